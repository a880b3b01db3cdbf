-- Lambda gpu_8x_a100_80gb_sxm4: on-demand 8x A100 80GB SXM.
return instance {
  name = "gpu_8x_a100_80gb_sxm4",
  provider = "Lambda",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1800,                 -- 1800 GiB (skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv); 19.5 TiB SSD (Lambda pricing page); no network figure between instances
  nvme_tb = 19.5,                     -- local NVMe / SSD, as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 22.32,             -- on-demand USD: skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv (gpu_8x_a100_80gb_sxm4, us-east-1), the same scrape as the 8x H100 price
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-09",
  source = "https://lambda.ai/pricing",
}
