-- Lambda gpu_8x_b200_sxm6: on-demand 8x B200.
return instance {
  name = "gpu_8x_b200_sxm6",
  provider = "Lambda",
  gpu = "b200",
  gpus = 8,
  cpu_ram_gib = 2900,                 -- 2900 GiB (skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv); no network figure between instances
  gpu_link = "NVLink 5 (NVSwitch)",
  price_per_hour = 53.52,             -- on-demand USD: skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv (gpu_8x_b200_sxm6, us-east-1), the same scrape as the 8x H100 price
  -- spot_price_per_hour: Lambda publishes no spot price
  region = "us-east-1",
  price_date = "2026-09",
  source = "https://lambda.ai/pricing",
}
