-- An HGX-style server: an NVIDIA HGX baseboard of eight b200 on NVSwitch in an OEM chassis. Host memory, NVMe
-- and network are the OEM's choice, so they are left out (no verdict on host memory); copy this file and fill
-- them in for your server (docs/hardware.md).
return node {
  name = "HGX 8x B200 server",
  gpu = "b200",
  gpus = 8,
  gpu_link = "NVLink 5 (NVSwitch)",
  gpu_link_gbps = 1800,                 -- per GPU, bidirectional (NVIDIA HGX B200 datasheet)
  source = "NVIDIA HGX B200 datasheet; the HGX baseboard fixes only the GPUs and NVLink",
}
