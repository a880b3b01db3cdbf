-- NVIDIA GeForce RTX 4090: the 24 GB Ada Lovelace consumer flagship; FP8 tensor cores, no NVLink.
return gpu {
  name = "NVIDIA GeForce RTX 4090",    -- display name
  vendor = "NVIDIA",
  architecture = "Ada Lovelace",
  compute_capability = "8.9",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 24564,                  -- nvidia-smi "507MiB / 24564MiB", driver 550 (github.com/RLinf/RLinf/issues/255; also github.com/vllm-project/vllm/issues/7553, driver 535)
  memory_bandwidth_gbps = 1008,        -- GB/s (NVIDIA Ada Lovelace architecture whitepaper, RTX 4090)
  fp32_tflops = 82.6,                  -- NVIDIA Ada Lovelace architecture whitepaper, RTX 4090
  tf32_tflops = 82.6,                  -- dense; whitepaper prints 165.2* with sparsity (Ada whitepaper, RTX 4090)
  fp16_tflops = 165.2,                 -- dense, FP32 accumulate (330.3 with FP16 accumulate); 330.3* sparse halved (Ada whitepaper, RTX 4090)
  bf16_tflops = 165.2,                 -- dense, FP32 accumulate; 330.3* sparse halved (Ada whitepaper, RTX 4090)
  fp8_tflops = 330.3,                  -- dense, FP32 accumulate; 660.6* sparse halved (Ada whitepaper, RTX 4090)
  interconnect = "PCIe 4.0 x16",       -- no NVLink on Ada GeForce
  interconnect_gbps = 64,              -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  sms = 128,                           -- 16,384 CUDA cores / 128 an AD102 SM (NVIDIA Ada Lovelace architecture whitepaper)
  tdp_watts = 450,                     -- total graphics power (NVIDIA Ada Lovelace architecture whitepaper, RTX 4090)
}
