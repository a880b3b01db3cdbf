-- Google Cloud a3-megagpu-8g: A3 Mega, eight H100 80GB.
return instance {
  name = "a3-megagpu-8g",
  provider = "Google Cloud",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 1872,                 -- Google Cloud, 'Accelerator-optimized machine family', A3 table (1872 GB memory, 1800 Gbps, 6 TB bundled local SSD)
  network_gbit_per_s = 1800,          -- as above
  nvme_tb = 6,                        -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 92.9376,           -- on-demand USD, us-east4: 92.9375882, Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml at commit fd66b26 (generated 2026-07-30 from the Cloud Billing catalog API: GPUs, vCPUs, memory and bundled local SSD; boot disk excluded), read 2026-12-03; the file has no us-central1 price for A3 Mega (us-east4 is its cheapest US region there, us-east5 94.07)
  spot_price_per_hour = 23.2752,      -- spot USD, us-east4: 23.2752366, the same file (spot prices change over time)
  region = "us-east4",
  price_date = "2026-07",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
