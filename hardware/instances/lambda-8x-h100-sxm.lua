-- Lambda gpu_8x_h100_sxm5: on-demand 8x H100 SXM.
return instance {
  name = "gpu_8x_h100_sxm5",
  provider = "Lambda",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 1800,                 -- 1800 GiB (skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv); 22 TiB SSD (Lambda pricing page); no network figure between instances
  nvme_tb = 22,                       -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 31.92,             -- on-demand USD: skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv (gpu_8x_h100_sxm5, us-east-1); $3.99 per GPU-hour on lambda.ai/pricing as tgarg01/silybench-data records it (checked 2026-09-25)
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-09",
  source = "https://lambda.ai/pricing",
}
