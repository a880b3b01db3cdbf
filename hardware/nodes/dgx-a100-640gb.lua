-- NVIDIA DGX A100 640GB: eight A100 80GB SXM4 on NVSwitch, two AMD EPYC 7742 (NVIDIA DGX A100 datasheet, 2020-11).
return node {
  name = "NVIDIA DGX A100 640GB",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 2048,                  -- "System Memory: 2TB" (NVIDIA DGX A100 datasheet, 640GB system)
  nvme_tb = 30,                        -- "internal storage 30TB (8x 3.84TB) U.2 NVMe" (DGX A100 datasheet, 640GB)
  gpu_link = "NVLink 3 (NVSwitch)",
  gpu_link_gbps = 600,                 -- per GPU, bidirectional (NVIDIA A100 datasheet)
  network_gbit_per_s = 1600,           -- 8 single-port ConnectX-6 at 200 Gb/s HDR InfiniBand (DGX A100 datasheet)
  source = "NVIDIA DGX A100 datasheet (2020-11)",
}
