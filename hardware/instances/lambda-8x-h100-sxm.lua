-- Lambda gpu_8x_h100_sxm5: on-demand 8x H100 SXM.
return instance {
  name = "gpu_8x_h100_sxm5",
  provider = "Lambda",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 1800,                 -- Lambda pricing page instance table (1800 GiB RAM, 22 TiB SSD); no network figure between instances
  nvme_tb = 22,                       -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 23.92,             -- on-demand USD: $2.99 per GPU-hour as Lambda published it in 2024; not re-read for this commit
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us (on-demand cloud)",
  price_date = "2024",
  source = "https://lambda.ai/pricing",
}
