-- Google Cloud a2-megagpu-16g: A2 Standard, sixteen A100 40GB (A2 Ultra is a2-ultragpu-*, A100 80GB: a guide that calls A2 Ultra 16x A100 40GB mixes the two up).
return instance {
  name = "a2-megagpu-16g",
  provider = "Google Cloud",
  gpu = "a100-40gb",
  gpus = 16,
  cpu_ram_gib = 1360,                 -- Google Cloud, 'Accelerator-optimized machine family', A2 Standard table (1360 GB memory, 100 Gbps)
  network_gbit_per_s = 100,           -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 55.739,            -- on-demand USD: the us-central1 on-demand price as published in 2024 (GPUs, vCPUs and memory together); not re-read for this commit
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-central1",
  price_date = "2024",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
