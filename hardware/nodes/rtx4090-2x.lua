-- A workstation with two GeForce RTX 4090 on PCIe (no NVLink on Ada GeForce). Host memory depends on the build:
-- left out (no verdict on host memory); copy this file and set cpu_ram_gib for yours (docs/hardware.md).
return node {
  name = "Workstation 2x RTX 4090",
  gpu = "rtx4090",
  gpus = 2,
  gpu_link = "PCIe 4.0 x16",
  gpu_link_gbps = 64,                  -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec); peer-to-peer is disabled on GeForce drivers, so traffic goes through host memory
  source = "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090: no NVLink)",
}
