-- NVIDIA A100 40GB (SXM4): the launch Ampere data-centre GPU (HBM2), as in DGX A100 / AWS p4d / GCP a2-highgpu.
return gpu {
  name = "NVIDIA A100 40GB",           -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.0",          -- NVIDIA CUDA GPUs compute-capability table; deviceQuery in github.com/bottlerocket-os/bottlerocket/pull/3873
  memory_mib = 40960,                  -- nvidia-smi "598MiB / 40960MiB", A100-SXM4-40GB, driver 580 (github.com/bottlerocket-os/bottlerocket-core-kit/pull/834; also github.com/modal-labs/modal-client/pull/2797); driver 470 printed 40536MiB (github.com/nanopool/phoenix-miner/issues/17)
  memory_bandwidth_gbps = 1555,        -- GB/s (NVIDIA A100 datasheet, 40GB SXM)
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
