-- A server with eight GeForce RTX 4090 on PCIe (no NVLink on Ada GeForce). Host memory, NVMe and network depend
-- on the build: left out (no verdict on host memory); copy this file and fill them in (docs/hardware.md).
return node {
  name = "Server 8x RTX 4090",
  gpu = "rtx4090",
  gpus = 8,
  gpu_link = "PCIe 4.0 x16",
  gpu_link_gbps = 64,                  -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec), through PCIe switches or the CPUs
  source = "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090: no NVLink)",
}
