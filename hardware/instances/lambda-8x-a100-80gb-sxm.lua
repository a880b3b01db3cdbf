-- Lambda gpu_8x_a100_80gb_sxm4: on-demand 8x A100 80GB SXM.
return instance {
  name = "gpu_8x_a100_80gb_sxm4",
  provider = "Lambda",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1800,                 -- Lambda pricing page instance table (1800 GiB RAM, 19.5 TiB SSD); no network figure between instances
  nvme_tb = 19.5,                     -- local NVMe / SSD, as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 14.32,             -- on-demand USD: $1.79 per GPU-hour as Lambda published it in 2024; not re-read for this commit
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us (on-demand cloud)",
  price_date = "2024",
  source = "https://lambda.ai/pricing",
}
