-- AMD Instinct MI300X (192GB HBM3, OAM): AMD's CDNA 3 data-centre accelerator, run through ROCm/HIP.
return gpu {
  name = "AMD Instinct MI300X",        -- display name
  vendor = "AMD",
  architecture = "CDNA 3",             -- gfx942
  memory_mib = 196592,                 -- rocm-smi "VRAM Total Memory (B): 206141652992" in SPX mode (public GitHub pastes); equals 8 x 25767706624 B CPX partitions in github.com/ROCm/ROCm/issues/4750
  memory_bandwidth_gbps = 5300,        -- GB/s, "5.3 TB/s" (AMD Instinct MI300X datasheet)
  fp32_tflops = 163.4,                 -- vector FP32 (AMD Instinct MI300X datasheet)
  tf32_tflops = 653.7,                 -- dense; datasheet prints 1307.4 with structured sparsity (AMD Instinct MI300X datasheet)
  fp16_tflops = 1307.4,                -- dense; datasheet prints 2614.9 with structured sparsity (AMD Instinct MI300X datasheet)
  bf16_tflops = 1307.4,                -- dense; datasheet prints 2614.9 with structured sparsity (AMD Instinct MI300X datasheet)
  fp8_tflops = 2614.9,                 -- dense; datasheet prints 5229.8 with structured sparsity (AMD Instinct MI300X datasheet)
  interconnect = "Infinity Fabric",
  interconnect_gbps = 896,             -- 7 links x 128 GB/s peak aggregate (AMD Instinct MI300X datasheet)
  sms = 304,                           -- 304 compute units (AMD Instinct MI300X datasheet)
  tdp_watts = 750,                     -- AMD Instinct MI300X datasheet
}
