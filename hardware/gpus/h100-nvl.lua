-- NVIDIA H100 NVL (94 GB HBM3, PCIe): the Hopper card sold in NVLink-bridged pairs for LLM servers.
return gpu {
  name = "NVIDIA H100 NVL",            -- display name
  vendor = "NVIDIA",
  architecture = "Hopper",
  compute_capability = "9.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 95830,                  -- nvidia-smi "0MiB / 95830MiB", NVIDIA H100 NVL at 400W cap, driver 535 (github.com/NVIDIA/gpu-admin-tools/issues/4, 2024-08)
  memory_bandwidth_gbps = 3900,        -- GB/s, "3.9TB/s" (NVIDIA H100 datasheet, H100 NVL)
  fp32_tflops = 60,                    -- NVIDIA H100 datasheet, H100 NVL
  tf32_tflops = 417.5,                 -- dense; datasheet prints 835* with sparsity, halved (NVIDIA H100 datasheet, H100 NVL)
  fp16_tflops = 835.5,                 -- dense; datasheet prints 1,671* with sparsity, halved (NVIDIA H100 datasheet, H100 NVL)
  bf16_tflops = 835.5,                 -- dense; datasheet prints 1,671* with sparsity, halved (NVIDIA H100 datasheet, H100 NVL)
  fp8_tflops = 1670.5,                 -- dense; datasheet prints 3,341* with sparsity, halved (NVIDIA H100 datasheet, H100 NVL)
  interconnect = "NVLink 4 bridge",    -- pairs of cards; PCIe Gen5 128 GB/s otherwise (NVIDIA H100 datasheet, H100 NVL)
  interconnect_gbps = 600,             -- "NVLink: 600GB/s" between the two cards of a pair (NVIDIA H100 datasheet, H100 NVL)
  tdp_watts = 400,                     -- datasheet 350-400W; nvidia-smi caps at 400W (github.com/NVIDIA/gpu-admin-tools/issues/4)
}
