-- NVIDIA A100 80GB (SXM4): the Ampere data-centre GPU most LLM training recipes are written for.
return gpu {
  name = "NVIDIA A100 80GB",           -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 81920,                  -- nvidia-smi total for A100 80GB (github.com/modal-labs/modal-client/pull/2797); same board as A800-SXM4-80GB "34447MiB / 81920MiB", driver 535 (github.com/dexmal/dexbotic/issues/41); many A100-SXM4-80GB pastes show 81920MiB
  memory_bandwidth_gbps = 2039,        -- GB/s (NVIDIA A100 datasheet, 80GB SXM)
  fp32_tflops = 19.5,                  -- NVIDIA A100 datasheet
  tf32_tflops = 156,                   -- dense; datasheet prints 312* with sparsity, halved (NVIDIA A100 datasheet)
  fp16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  bf16_tflops = 312,                   -- dense; datasheet prints 624* with sparsity, halved (NVIDIA A100 datasheet)
  interconnect = "NVLink 3",
  interconnect_gbps = 600,             -- NVLink bidirectional (NVIDIA A100 datasheet, SXM)
  network_gbps = 25,                   -- one 200 Gb/s HDR InfiniBand port per GPU, GB/s one way (NVIDIA DGX A100 datasheet: 8x 200 Gb/s)
  sms = 108,                           -- A100 SXM: 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper)
  tdp_watts = 400,                     -- NVIDIA A100 datasheet, SXM
}
