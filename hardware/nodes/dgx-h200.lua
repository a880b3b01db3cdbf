-- NVIDIA DGX H200: DGX H100's chassis with eight H200 141GB SXM (NVIDIA DGX H200 datasheet, 2024).
return node {
  name = "NVIDIA DGX H200",
  gpu = "h200",
  gpus = 8,
  cpu_ram_gib = 2048,                  -- "System Memory: 2TB" (NVIDIA DGX H200 datasheet)
  nvme_tb = 30,                        -- "Internal storage: 8x 3.84 TB NVMe U.2" (DGX H200 datasheet)
  gpu_link = "NVLink 4 (NVSwitch)",
  gpu_link_gbps = 900,                 -- per GPU, bidirectional (NVIDIA H200 datasheet)
  network_gbit_per_s = 3200,           -- 8 ConnectX-7 ports at 400 Gb/s (DGX H200 datasheet)
  source = "NVIDIA DGX H200 datasheet (2024)",
}
