-- NVIDIA H20 (96 GB HBM3): the export-compliant Hopper for China, H100's memory system with a fraction of its compute.
-- NVIDIA published no public datasheet (github.com/sunkx109/GPUs-Specs/issues/2); the rates below are the ones
-- NVIDIA gave partners, as reported in the press (willitrunai.com H20 page; zangshuxian.com summary of Geekbench/Wccftech).
return gpu {
  name = "NVIDIA H20",                 -- display name
  vendor = "NVIDIA",
  architecture = "Hopper",
  compute_capability = "9.0",          -- GH100 die (Hopper)
  memory_mib = 97871,                  -- nvidia-smi "4MiB / 97871MiB", NVIDIA H20 at 500W cap, driver 570 (a public GitHub build note, 2025-07)
  memory_bandwidth_gbps = 4000,        -- GB/s, "4.0 TB/s" (press figures above)
  fp32_tflops = 44,                    -- press figures above
  tf32_tflops = 74,                    -- dense (press figures above)
  fp16_tflops = 148,                   -- dense (press figures above)
  bf16_tflops = 148,                   -- dense (press figures above)
  fp8_tflops = 296,                    -- dense (press figures above: 296 for FP8/INT8)
  interconnect = "NVLink 4",
  interconnect_gbps = 900,             -- NVLink bidirectional, kept from H100 (press figures above)
  tdp_watts = 500,                     -- power cap nvidia-smi prints, "74W / 500W" (same paste as memory_mib); press quotes 400 W
}
