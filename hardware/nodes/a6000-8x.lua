-- A server with eight RTX A6000 on PCIe, optionally bridged in NVLink pairs. Host memory, NVMe and network depend
-- on the build: left out (no verdict on host memory); copy this file and fill them in (docs/hardware.md).
return node {
  name = "Server 8x RTX A6000",
  gpu = "a6000",
  gpus = 8,
  gpu_link = "PCIe 4.0 x16",           -- a bridge joins two cards at 112.5 GB/s (NVIDIA RTX A6000 datasheet); the other pairs talk over PCIe
  gpu_link_gbps = 64,                  -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  source = "NVIDIA RTX A6000 datasheet",
}
