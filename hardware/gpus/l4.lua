-- NVIDIA L4: the 72 W single-slot 24 GB Ada Lovelace inference card (GCP g2, AWS g6).
return gpu {
  name = "NVIDIA L4",                  -- display name
  vendor = "NVIDIA",
  architecture = "Ada Lovelace",
  compute_capability = "8.9",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 23034,                  -- nvidia-smi total for L4 (github.com/modal-labs/modal-client/pull/2797); many pasted nvidia-smi tables show "0MiB / 23034MiB" at 72W cap
  memory_bandwidth_gbps = 300,         -- GB/s (NVIDIA L4 datasheet)
  fp32_tflops = 30.3,                  -- NVIDIA L4 datasheet
  tf32_tflops = 60,                    -- dense; datasheet prints 120* with sparsity, halved (NVIDIA L4 datasheet)
  fp16_tflops = 121,                   -- dense; datasheet prints 242* with sparsity, halved (NVIDIA L4 datasheet)
  bf16_tflops = 121,                   -- dense; datasheet prints 242* with sparsity, halved (NVIDIA L4 datasheet)
  fp8_tflops = 242.5,                  -- dense; datasheet prints 485* with sparsity, halved (NVIDIA L4 datasheet)
  interconnect = "PCIe 4.0 x16",
  interconnect_gbps = 64,              -- "PCIe Gen4 x16 64GB/s" (NVIDIA L4 datasheet)
  sms = 58,                            -- 7,424 CUDA cores / 128 an AD104 SM (NVIDIA L4 datasheet)
  tdp_watts = 72,                      -- max thermal design power (NVIDIA L4 datasheet)
}
