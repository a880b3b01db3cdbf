-- NVIDIA GeForce RTX 5090: the 32 GB Blackwell consumer flagship (GB202, GDDR7); FP8/FP4 tensor cores, no NVLink.
return gpu {
  name = "NVIDIA GeForce RTX 5090",    -- display name
  vendor = "NVIDIA",
  architecture = "Blackwell",
  compute_capability = "12.0",         -- GeForce Blackwell is sm_120 (NVIDIA CUDA GPUs compute-capability table)
  memory_mib = 32607,                  -- nvidia-smi "492MiB / 32607MiB", driver 595 (github.com/noonghunna/club-3090/issues/617, 2026-07; same in issues/1261)
  memory_bandwidth_gbps = 1792,        -- GB/s, 512-bit GDDR7 at 28 Gbps (NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090)
  fp32_tflops = 104.8,                 -- NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090
  tf32_tflops = 104.8,                 -- dense, as on GeForce Ada (RTX Blackwell whitepaper, RTX 5090)
  fp16_tflops = 209.5,                 -- dense, FP32 accumulate (the rate mixed-precision training gets); 838.4* sparse with FP16 accumulate is the headline (RTX Blackwell whitepaper; spheron.network RTX 5090 spec table, 2026-05)
  bf16_tflops = 209.5,                 -- dense, FP32 accumulate (RTX Blackwell whitepaper)
  fp8_tflops = 419,                    -- dense, FP32 accumulate (RTX Blackwell whitepaper)
  interconnect = "PCIe 5.0 x16",       -- no NVLink on GeForce Blackwell
  interconnect_gbps = 128,             -- PCIe Gen5 x16, 64 GB/s each way (PCIe 5.0 spec)
  tdp_watts = 575,                     -- total graphics power; nvidia-smi caps "106W / 575W" (github.com/noonghunna/club-3090/issues/1261)
}
