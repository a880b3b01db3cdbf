-- NVIDIA A10G: the AWS-only 24 GB Ampere variant of the A10 used in EC2 G5 instances (80 SMs, GeForce-style tensor rates).
return gpu {
  name = "NVIDIA A10G",                -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.6",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 23028,                  -- nvidia-smi "8722MiB / 23028MiB", NVIDIA A10G, driver 535 (github.com/NVIDIA/DCGM/issues/232)
  memory_bandwidth_gbps = 600,         -- GB/s, same as A10 (Baseten "NVIDIA A10 vs A10G for ML model inference"; NVIDIA publishes no A10G datasheet)
  fp32_tflops = 35,                    -- Baseten A10 vs A10G spec table (A10 datasheet: 31.2)
  tf32_tflops = 35,                    -- dense; Baseten A10 vs A10G spec table (A10 datasheet: 62.5)
  fp16_tflops = 70,                    -- dense; Baseten A10 vs A10G spec table (A10 datasheet: 125); accumulate precision not stated
  bf16_tflops = 70,                    -- dense; Baseten A10 vs A10G spec table (A10 datasheet: 125)
  interconnect = "PCIe 4.0 x16",
  interconnect_gbps = 64,              -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  sms = 80,                            -- 10,240 CUDA cores / 128 a GA102 SM (deviceQuery on AWS g5: 80 multiprocessors)
  tdp_watts = 300,                     -- power cap nvidia-smi prints for A10G, "60W / 300W" (github.com/NVIDIA/DCGM/issues/232)
}
