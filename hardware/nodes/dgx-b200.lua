-- NVIDIA DGX B200: eight B200 on two fifth-generation NVSwitches, two Intel Xeon Platinum 8570 (NVIDIA DGX B200 datasheet, 2024).
return node {
  name = "NVIDIA DGX B200",
  gpu = "b200",
  gpus = 8,
  cpu_ram_gib = 2048,                  -- "System Memory: 2TB, configurable to 4TB" (NVIDIA DGX B200 datasheet)
  nvme_tb = 30,                        -- "Internal storage: 8x 3.84 TB NVMe U.2" (DGX B200 datasheet)
  gpu_link = "NVLink 5 (NVSwitch)",
  gpu_link_gbps = 1800,                -- per GPU, bidirectional; 14.4 TB/s in all (DGX B200 datasheet)
  network_gbit_per_s = 3200,           -- 4 OSFP ports serving 8 single-port ConnectX-7, up to 400 Gb/s each (DGX B200 datasheet)
  source = "NVIDIA DGX B200 datasheet (2024)",
}
