-- NVIDIA Tesla V100 32GB (SXM2): the 32 GB Volta part (DGX-1/DGX-2 era); FP16 tensor cores, no TF32/BF16.
return gpu {
  name = "NVIDIA V100 32GB",           -- display name
  vendor = "NVIDIA",
  architecture = "Volta",
  compute_capability = "7.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 32768,                  -- nvidia-smi "308MiB / 32768MiB", Tesla V100-SXM2 at 300W cap, driver 525 (github.com/Wan-Video/Wan2.1/issues/5); pre-R510 drivers printed less (32480MiB on V100-PCIE-32GB, driver 410, blog.cachecha.com/csdn/kunhe0512/126265050.html)
  memory_bandwidth_gbps = 900,         -- GB/s (NVIDIA V100 datasheet, SXM2)
  fp32_tflops = 15.7,                  -- NVIDIA V100 datasheet, SXM2
  fp16_tflops = 125,                   -- tensor FP16 with FP32 accumulate, "Tensor Performance" (NVIDIA V100 datasheet, SXM2; Volta has no sparsity)
  interconnect = "NVLink 2",
  interconnect_gbps = 300,             -- NVLink bidirectional (NVIDIA V100 datasheet, SXM2)
  sms = 80,                            -- V100 SXM2: 80 SMs (NVIDIA Tesla V100 GPU Architecture whitepaper)
  tdp_watts = 300,                     -- NVIDIA V100 datasheet, SXM2
}
