-- Google Cloud a2-megagpu-16g: A2 Standard, sixteen A100 40GB (A2 Ultra is a2-ultragpu-*, A100 80GB: a guide that calls A2 Ultra 16x A100 40GB mixes the two up).
return instance {
  name = "a2-megagpu-16g",
  provider = "Google Cloud",
  gpu = "a100-40gb",
  gpus = 16,
  cpu_ram_gib = 1360,                 -- Google Cloud, 'Accelerator-optimized machine family', A2 Standard table (1360 GB memory, 100 Gbps)
  network_gbit_per_s = 100,           -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 55.739504,         -- on-demand USD, us-central1: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml at commit fd66b26 (generated 2026-07-30 from the Cloud Billing catalog API: GPUs, vCPUs, memory and bundled local SSD; boot disk excluded), read 2026-12-03 (the 2024 list price was 55.739)
  spot_price_per_hour = 29.25568,     -- spot USD, us-central1, the same file (spot prices change over time)
  region = "us-central1",
  price_date = "2026-07",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
