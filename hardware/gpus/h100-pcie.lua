-- NVIDIA H100 PCIe (80GB HBM2e): the dual-slot Hopper card, 114 SMs, for standard PCIe Gen5 servers.
return gpu {
  name = "NVIDIA H100 PCIe",           -- display name
  vendor = "NVIDIA",
  architecture = "Hopper",
  compute_capability = "9.0",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 81559,                  -- nvidia-smi "1MiB / 81559MiB", NVIDIA H100 PCIe at 350W cap, drivers 535-550, in several public GitHub pastes (no single issue URL found)
  memory_bandwidth_gbps = 2000,        -- GB/s, "2TB/s" (NVIDIA H100 datasheet, PCIe; product brief PB-11133-001 says ">2,000 GBps")
  fp32_tflops = 51,                    -- NVIDIA H100 datasheet, PCIe
  tf32_tflops = 378,                   -- dense; datasheet prints 756* with sparsity, halved (NVIDIA H100 datasheet, PCIe)
  fp16_tflops = 756.5,                 -- dense; datasheet prints 1,513* with sparsity, halved (NVIDIA H100 datasheet, PCIe; see github.com/qoofyk/LLM_Sizing_Guide/issues/3)
  bf16_tflops = 756.5,                 -- dense; datasheet prints 1,513* with sparsity, halved (NVIDIA H100 datasheet, PCIe)
  fp8_tflops = 1513,                   -- dense; datasheet prints 3,026* with sparsity, halved (NVIDIA H100 datasheet, PCIe)
  interconnect = "PCIe 5.0 x16",       -- optional 2-card NVLink bridge gives 600 GB/s (NVIDIA H100 datasheet, PCIe)
  interconnect_gbps = 128,             -- "PCIe Gen5: 128GB/s" (NVIDIA H100 datasheet, PCIe)
  sms = 114,                           -- H100 PCIe: 114 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper)
  tdp_watts = 350,                     -- max TDP 350 W (NVIDIA H100 PCIe product brief PB-11133-001; datasheet 300-350W)
}
