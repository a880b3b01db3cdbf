-- Google Cloud a3-highgpu-8g: A3 High, eight H100 80GB.
return instance {
  name = "a3-highgpu-8g",
  provider = "Google Cloud",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 1872,                 -- Google Cloud, 'Accelerator-optimized machine family', A3 table (1872 GB memory, 1000 Gbps, 6 TB bundled local SSD)
  network_gbit_per_s = 1000,          -- as above
  nvme_tb = 6,                        -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 87.8328,           -- on-demand USD: 8 x $10.9791, the us-central1 on-demand price of one H100 with its share of the machine (GPU + 26 vCPU + 234 GiB; a3-highgpu-8g is eight such shares) from the Cloud Billing catalog, as tgarg01/silybench-data derived/csv/gpu_prices.csv records it (checked 2026-09-26)
  spot_price_per_hour = 52.568,       -- spot: 8 x $6.571, the same record's spot price per GPU share
  region = "us-central1",
  price_date = "2026-09",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
