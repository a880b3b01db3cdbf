-- Google Cloud a2-ultragpu-8g: A2 Ultra, eight A100 80GB (not sixteen A100 40GB: that is a2-megagpu-16g, A2 Standard).
return instance {
  name = "a2-ultragpu-8g",
  provider = "Google Cloud",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1360,                 -- Google Cloud, 'Accelerator-optimized machine family', A2 Ultra table (1360 GB memory, 100 Gbps, 3 TB bundled local SSD)
  network_gbit_per_s = 100,           -- as above
  nvme_tb = 3,                        -- local NVMe / SSD, as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 40.5504,           -- on-demand USD, us-central1: 40.5503831, Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml at commit fd66b26 (generated 2026-07-30 from the Cloud Billing catalog API: GPUs, vCPUs, memory and bundled local SSD; boot disk excluded), read 2026-12-03
  spot_price_per_hour = 22.0764,      -- spot USD, us-central1: 22.0763704, the same file (spot prices change over time)
  region = "us-central1",
  price_date = "2026-07",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
