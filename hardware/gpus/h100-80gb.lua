-- NVIDIA H100 80GB (SXM5, HBM3): the Hopper flagship of HGX/DGX H100 nodes; adds FP8 via the Transformer Engine.
return gpu {
  name = "NVIDIA H100 80GB SXM",       -- display name
  vendor = "NVIDIA",
  architecture = "Hopper",
  compute_capability = "9.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 81559,                  -- nvidia-smi "0MiB / 81559MiB", NVIDIA H100 80GB HBM3, driver 550 (github.com/NVIDIA/nccl/issues/1264; also github.com/wilicc/gpu-burn/issues/114)
  memory_bandwidth_gbps = 3350,        -- GB/s (NVIDIA H100 datasheet, SXM)
  fp32_tflops = 67,                    -- NVIDIA H100 datasheet, SXM
  tf32_tflops = 494.5,                 -- dense; datasheet prints 989* with sparsity, halved (NVIDIA H100 datasheet, SXM)
  fp16_tflops = 989.5,                 -- dense; datasheet prints 1,979* with sparsity, halved (NVIDIA H100 datasheet, SXM)
  bf16_tflops = 989.5,                 -- dense; datasheet prints 1,979* with sparsity, halved (NVIDIA H100 datasheet, SXM)
  fp8_tflops = 1979,                   -- dense; datasheet prints 3,958* with sparsity, halved (NVIDIA H100 datasheet, SXM)
  interconnect = "NVLink 4",
  interconnect_gbps = 900,             -- NVLink bidirectional (NVIDIA H100 datasheet, SXM)
  network_gbps = 50,                   -- one 400 Gb/s NDR InfiniBand port per GPU, GB/s one way (NVIDIA DGX H100/H200 datasheets: 8x 400 Gb/s)
  sms = 132,                           -- H100 SXM5: 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper)
  tdp_watts = 700,                     -- "up to 700W" (NVIDIA H100 datasheet, SXM)
}
