-- NVIDIA A100 40GB PCIe: the dual-slot Ampere card (HBM2, 250 W) for standard servers.
return gpu {
  name = "NVIDIA A100 40GB PCIe",      -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 40960,                  -- nvidia-smi "0MiB / 40960MiB", NVIDIA A100-PCIE-40GB at 250W cap, in several public GitHub pastes (drivers 535-570; no single issue URL kept)
  memory_bandwidth_gbps = 1555,        -- GB/s (NVIDIA A100 datasheet, 40GB PCIe)
  fp32_tflops = 19.5,                  -- NVIDIA A100 datasheet
  tf32_tflops = 156,                   -- dense; datasheet prints 312* with sparsity, halved (NVIDIA A100 datasheet)
  fp16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  bf16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  interconnect = "PCIe 4.0 x16",       -- an optional NVLink bridge joins two cards at 600 GB/s (NVIDIA A100 datasheet, PCIe)
  interconnect_gbps = 64,              -- "PCIe Gen4: 64GB/s" (NVIDIA A100 datasheet)
  tdp_watts = 250,                     -- NVIDIA A100 datasheet, 40GB PCIe; nvidia-smi caps at 250W
}
