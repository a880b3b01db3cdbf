-- An HGX-style server: an NVIDIA HGX baseboard of eight a100-80gb on NVSwitch in an OEM chassis. Host memory, NVMe
-- and network are the OEM's choice, so they are left out (no verdict on host memory); copy this file and fill
-- them in for your server (docs/hardware.md).
return node {
  name = "HGX 8x A100-80GB server",
  gpu = "a100-80gb",
  gpus = 8,
  gpu_link = "NVLink 3 (NVSwitch)",
  gpu_link_gbps = 600,                 -- per GPU, bidirectional (NVIDIA A100 datasheet)
  source = "NVIDIA A100 datasheet; the HGX baseboard fixes only the GPUs and NVLink",
}
