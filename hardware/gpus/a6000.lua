-- NVIDIA RTX A6000: the 48 GB Ampere workstation card (GA102, full-rate FP32-accumulate tensor cores).
return gpu {
  name = "NVIDIA RTX A6000",           -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.6",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 49140,                  -- nvidia-smi "0MiB / 49140MiB" with ECC off (the default), drivers 535-550, in several public GitHub pastes (no single issue URL found); with ECC enabled the same card prints 46068MiB
  memory_bandwidth_gbps = 768,         -- GB/s (NVIDIA RTX A6000 datasheet)
  fp32_tflops = 38.7,                  -- NVIDIA RTX A6000 datasheet
  tf32_tflops = 77.4,                  -- dense; 154.8* with sparsity halved (NVIDIA Ampere GA102 whitepaper v2, Appendix C)
  fp16_tflops = 154.8,                 -- dense, FP32 accumulate; datasheet "Tensor Performance" 309.7* is sparse, halved (RTX A6000 datasheet; GA102 whitepaper v2, Appendix C)
  bf16_tflops = 154.8,                 -- dense, FP32 accumulate; 309.7* sparse halved (GA102 whitepaper v2, Appendix C)
  interconnect = "PCIe 4.0 x16",       -- an optional NVLink bridge gives 112.5 GB/s between two cards (RTX A6000 datasheet)
  interconnect_gbps = 64,              -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  sms = 84,                            -- 10,752 CUDA cores / 128 a GA102 SM (NVIDIA RTX A6000 datasheet)
  tdp_watts = 300,                     -- max power consumption (NVIDIA RTX A6000 datasheet)
}
