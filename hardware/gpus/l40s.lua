-- NVIDIA L40S: the 48 GB Ada Lovelace data-centre PCIe card (GDDR6 with ECC), FP8-capable, no NVLink.
return gpu {
  name = "NVIDIA L40S",                -- display name
  vendor = "NVIDIA",
  architecture = "Ada Lovelace",
  compute_capability = "8.9",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 46068,                  -- nvidia-smi --query-gpu memory.total "46068 MiB", driver 595 (github.com/akash-network/provider-configs/pull/99; also github.com/modal-labs/modal-client/pull/2797); ECC is on by default
  memory_bandwidth_gbps = 864,         -- GB/s (NVIDIA L40S datasheet)
  fp32_tflops = 91.6,                  -- NVIDIA L40S datasheet
  tf32_tflops = 183,                   -- dense; datasheet prints 366* with sparsity (NVIDIA L40S datasheet)
  fp16_tflops = 362.05,                -- dense; datasheet prints 733* with sparsity (NVIDIA L40S datasheet)
  bf16_tflops = 362.05,                -- dense; datasheet prints 733* with sparsity (NVIDIA L40S datasheet)
  fp8_tflops = 733,                    -- dense; datasheet prints 1,466* with sparsity (NVIDIA L40S datasheet)
  interconnect = "PCIe 4.0 x16",
  interconnect_gbps = 64,              -- "PCIe Gen4 x16: 64GB/s bidirectional" (NVIDIA L40S datasheet)
  sms = 142,                           -- 18,176 CUDA cores / 128 an AD102 SM (NVIDIA L40S datasheet)
  tdp_watts = 350,                     -- max power consumption (NVIDIA L40S datasheet)
}
