-- NVIDIA A100 80GB PCIe: the dual-slot Ampere card with HBM2e (Azure NC A100 v4, many on-premise servers).
return gpu {
  name = "NVIDIA A100 80GB PCIe",      -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 81920,                  -- nvidia-smi "0MiB / 81920MiB", NVIDIA A100 80GB PCIe at 300W cap, driver 570 (a public GitHub build note, 2025-07)
  memory_bandwidth_gbps = 1935,        -- GB/s (NVIDIA A100 datasheet, 80GB PCIe)
  fp32_tflops = 19.5,                  -- NVIDIA A100 datasheet
  tf32_tflops = 156,                   -- dense; datasheet prints 312* with sparsity, halved (NVIDIA A100 datasheet)
  fp16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  bf16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  interconnect = "PCIe 4.0 x16",       -- an optional NVLink bridge joins two cards at 600 GB/s (NVIDIA A100 datasheet, PCIe)
  interconnect_gbps = 64,              -- "PCIe Gen4: 64GB/s" (NVIDIA A100 datasheet)
  tdp_watts = 300,                     -- NVIDIA A100 datasheet, 80GB PCIe
}
