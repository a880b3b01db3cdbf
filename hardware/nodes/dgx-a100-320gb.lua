-- NVIDIA DGX A100 320GB: eight A100 40GB SXM4 on NVSwitch, two AMD EPYC 7742 (NVIDIA DGX A100 datasheet, 2020).
return node {
  name = "NVIDIA DGX A100 320GB",
  gpu = "a100-40gb",
  gpus = 8,
  cpu_ram_gib = 1024,                  -- "System Memory: 1TB" (NVIDIA DGX A100 datasheet, 320GB system)
  nvme_tb = 15,                        -- "Storage: OS 2x 1.92TB M.2 NVMe, internal storage 15TB (4x 3.84TB) U.2 NVMe" (DGX A100 datasheet, 320GB)
  gpu_link = "NVLink 3 (NVSwitch)",
  gpu_link_gbps = 600,                 -- per GPU, bidirectional (NVIDIA A100 datasheet; DGX A100 datasheet: 4.8 TB/s bisection over 6 NVSwitches)
  network_gbit_per_s = 1600,           -- 8 single-port ConnectX-6 at 200 Gb/s HDR InfiniBand for compute (DGX A100 datasheet)
  source = "NVIDIA DGX A100 datasheet (2020)",
}
