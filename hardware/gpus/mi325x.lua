-- AMD Instinct MI325X (256 GB HBM3E, OAM): MI300X's CDNA 3 compute with more and faster memory.
return gpu {
  name = "AMD Instinct MI325X",        -- display name
  vendor = "AMD",
  architecture = "CDNA 3",             -- gfx942, as MI300X
  memory_mib = 262144,                 -- 256 GB (AMD Instinct MI325X datasheet) read as GiB, as MI300X's 192 GB reads (rocm-smi 206141652992 B, 192 GiB less 16 MiB); no rocm-smi reading of an MI325X found, so this is the nominal size, not a measured total
  memory_bandwidth_gbps = 6000,        -- GB/s, "6 TB/s" (AMD Instinct MI325X datasheet)
  fp32_tflops = 163.4,                 -- vector FP32 (AMD Instinct MI325X datasheet)
  tf32_tflops = 653.7,                 -- dense; datasheet prints 1307.4 with structured sparsity (AMD Instinct MI325X datasheet)
  fp16_tflops = 1307.4,                -- dense; datasheet prints 2614.9 with structured sparsity (AMD Instinct MI325X datasheet)
  bf16_tflops = 1307.4,                -- dense; datasheet prints 2614.9 with structured sparsity (AMD Instinct MI325X datasheet)
  fp8_tflops = 2614.9,                 -- dense; datasheet prints 5229.8 with structured sparsity (AMD Instinct MI325X datasheet)
  interconnect = "Infinity Fabric",
  interconnect_gbps = 896,             -- 7 links x 128 GB/s peak aggregate (AMD Instinct MI325X datasheet)
  tdp_watts = 1000,                    -- AMD Instinct MI325X datasheet
}
