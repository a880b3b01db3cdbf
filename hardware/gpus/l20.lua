-- NVIDIA L20 (48 GB GDDR6): the export-compliant Ada Lovelace PCIe card for China, L40S's board with less compute.
-- NVIDIA published no public datasheet; figures below come from third-party spec pages, each named.
return gpu {
  name = "NVIDIA L20",                 -- display name
  vendor = "NVIDIA",
  architecture = "Ada Lovelace",
  compute_capability = "8.9",          -- AD102 (Ada Lovelace)
  memory_mib = 46068,                  -- nvidia-smi total "46068 MiB" with ECC on, as L40S (a public GitHub benchmark note; "GPU 0 total capacity: 44.53 GiB" from PyTorch in the same note)
  memory_bandwidth_gbps = 864,         -- GB/s, 384-bit GDDR6 at 2250 MHz (technical.city and topcpu.net L20 pages)
  fp16_tflops = 119.5,                 -- dense tensor FP16 as given for L20 in github.com/xlite-dev/LeetCUDA's README ("theoretical Tensor Cores FP16 119.5 TFLOPS")
  bf16_tflops = 119.5,                 -- dense; Ada tensor cores run bf16 at the fp16 rate (Ada Lovelace whitepaper)
  fp8_tflops = 239,                    -- dense; twice the fp16 rate on Ada tensor cores (Ada Lovelace whitepaper; L40S datasheet ratio)
  interconnect = "PCIe 4.0 x16",
  interconnect_gbps = 64,              -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  tdp_watts = 275,                     -- technical.city and topcpu.net L20 pages
}
