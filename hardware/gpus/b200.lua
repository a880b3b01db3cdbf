-- NVIDIA B200 (SXM, 180 GB HBM3e): the Blackwell data-centre GPU of HGX/DGX B200 nodes; FP8 and FP4 tensor cores.
return gpu {
  name = "NVIDIA B200",                -- display name
  vendor = "NVIDIA",
  architecture = "Blackwell",
  compute_capability = "10.0",         -- device query "Compute Capability: 10.0" (github.com/pytorch/ao/pull/4002, 2026-03)
  memory_mib = 183359,                 -- nvidia-smi "166593MiB / 183359MiB", NVIDIA B200 at 1000W cap, driver 580 (github.com/NVIDIA/TensorRT-LLM/issues/10278, 2025-12)
  memory_bandwidth_gbps = 8000,        -- GB/s, "8TB/s" per GPU (NVIDIA HGX B200 datasheet: 64 TB/s for 8); the driver's 7680-bit bus at 3996 MHz gives 7.7 TB/s (github.com/pytorch/ao/pull/4002)
  fp32_tflops = 75,                    -- NVIDIA HGX B200 datasheet: 600 TFLOPS FP32 for 8 GPUs
  tf32_tflops = 1125,                  -- dense; HGX B200 datasheet prints 18 PFLOPS* TF32 for 8 with sparsity: 2.25 per GPU, halved
  fp16_tflops = 2250,                  -- dense; HGX B200 datasheet 36 PFLOPS* for 8 with sparsity, per GPU halved (torchao's roofline uses 2.25e15 too, pytorch/ao#4002)
  bf16_tflops = 2250,                  -- dense; as fp16 (NVIDIA HGX B200 datasheet)
  fp8_tflops = 4500,                   -- dense; HGX B200 datasheet 72 PFLOPS* for 8 with sparsity, per GPU halved
  interconnect = "NVLink 5",
  interconnect_gbps = 1800,            -- NVLink 5 bidirectional per GPU, "1.8TB/s" (NVIDIA HGX B200 datasheet)
  tdp_watts = 1000,                    -- power cap nvidia-smi prints, "192W / 1000W" (github.com/NVIDIA/TensorRT-LLM/issues/10278)
}
