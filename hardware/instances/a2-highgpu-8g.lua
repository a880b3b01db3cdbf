-- Google Cloud a2-highgpu-8g: A2 Standard, eight A100 40GB.
return instance {
  name = "a2-highgpu-8g",
  provider = "Google Cloud",
  gpu = "a100-40gb",
  gpus = 8,
  cpu_ram_gib = 680,                  -- Google Cloud, 'Accelerator-optimized machine family', A2 Standard table (680 GB memory, 100 Gbps)
  network_gbit_per_s = 100,           -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 29.38708,          -- on-demand USD, us-central1: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml at commit fd66b26 (generated 2026-07-30 from the Cloud Billing catalog API: GPUs, vCPUs, memory and bundled local SSD; boot disk excluded), read 2026-12-03 (the 2024 list price was 29.3873)
  spot_price_per_hour = 15.42416,     -- spot USD, us-central1, the same file (spot prices change over time)
  region = "us-central1",
  price_date = "2026-07",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
