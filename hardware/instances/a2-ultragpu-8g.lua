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
  -- price_per_hour: no on-demand price found that this commit could attribute: left out
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-central1",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
