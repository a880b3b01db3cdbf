-- NVIDIA H200 (141GB HBM3e, SXM): the H100 SXM compute die with more and faster memory, for HGX/DGX H200 nodes.
return gpu {
  name = "NVIDIA H200 141GB SXM",      -- display name
  vendor = "NVIDIA",
  architecture = "Hopper",
  compute_capability = "9.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 143771,                 -- nvidia-smi "0MiB / 143771MiB", NVIDIA H200 at 700W cap, drivers 550/570/580, in several public GitHub pastes (no single issue URL found)
  memory_bandwidth_gbps = 4800,        -- GB/s, "4.8TB/s" (NVIDIA H200 datasheet, SXM)
  fp32_tflops = 67,                    -- NVIDIA H200 datasheet, SXM
  tf32_tflops = 494.5,                 -- dense; datasheet prints 989* with sparsity, halved (NVIDIA H200 datasheet, SXM)
  fp16_tflops = 989.5,                 -- dense; datasheet prints 1,979* with sparsity, halved (NVIDIA H200 datasheet, SXM)
  bf16_tflops = 989.5,                 -- dense; datasheet prints 1,979* with sparsity, halved (NVIDIA H200 datasheet, SXM)
  fp8_tflops = 1979,                   -- dense; datasheet prints 3,958* with sparsity, halved (NVIDIA H200 datasheet, SXM)
  interconnect = "NVLink 4",
  interconnect_gbps = 900,             -- NVLink bidirectional (NVIDIA H200 datasheet, SXM)
  network_gbps = 50,                   -- one 400 Gb/s NDR InfiniBand port per GPU, GB/s one way (NVIDIA DGX H100/H200 datasheets: 8x 400 Gb/s)
  sms = 132,                           -- the H100 SXM5 die: 132 SMs (NVIDIA H100 architecture whitepaper)
  tdp_watts = 700,                     -- "up to 700W" (NVIDIA H200 datasheet, SXM)
  cuda_context_mib = 779,              -- measured here (tests/gpu, docs/gpu-check.md): used memory outside the caching allocator after 15 training steps' kernels, torch 2.11 / CUDA 13.0, lazy loading (619 MiB right after init)
}
