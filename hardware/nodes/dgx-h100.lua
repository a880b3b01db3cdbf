-- NVIDIA DGX H100: eight H100 80GB SXM5 on four NVSwitches, two Intel Xeon Platinum 8480C (NVIDIA DGX H100 datasheet, 2023).
return node {
  name = "NVIDIA DGX H100",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 2048,                  -- "System Memory: 2TB" (NVIDIA DGX H100 datasheet)
  nvme_tb = 30,                        -- "Internal storage: 8x 3.84 TB NVMe U.2" (DGX H100 datasheet)
  gpu_link = "NVLink 4 (NVSwitch)",
  gpu_link_gbps = 900,                 -- per GPU, bidirectional (NVIDIA H100 datasheet; DGX H100 datasheet: 7.2 TB/s in all)
  network_gbit_per_s = 3200,           -- 8 ConnectX-7 ports at 400 Gb/s InfiniBand/Ethernet for compute (DGX H100 datasheet)
  source = "NVIDIA DGX H100 datasheet (2023)",
}
