-- NVIDIA Tesla V100 16GB (SXM2): the Volta data-centre GPU that introduced tensor cores; FP16 only, no TF32/BF16.
return gpu {
  name = "NVIDIA V100 16GB",           -- display name
  vendor = "NVIDIA",
  architecture = "Volta",
  compute_capability = "7.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 16384,                  -- nvidia-smi "5MiB / 16384MiB", Tesla V100-SXM2-16GB, driver 570 (github.com/1CatAI/1Cat-vLLM/issues/85); pre-R510 drivers printed 16160MiB (github.com/4paradigm/k8s-vgpu-scheduler/issues/7, driver 440)
  memory_bandwidth_gbps = 900,         -- GB/s (NVIDIA V100 datasheet, SXM2)
  fp32_tflops = 15.7,                  -- NVIDIA V100 datasheet, SXM2
  fp16_tflops = 125,                   -- tensor FP16 with FP32 accumulate, "Tensor Performance" (NVIDIA V100 datasheet, SXM2; Volta has no sparsity)
  interconnect = "NVLink 2",
  interconnect_gbps = 300,             -- NVLink bidirectional (NVIDIA V100 datasheet, SXM2)
  sms = 80,                            -- V100 SXM2: 80 SMs (NVIDIA Tesla V100 GPU Architecture whitepaper)
  tdp_watts = 300,                     -- NVIDIA V100 datasheet, SXM2
}
