-- Google Cloud a2-highgpu-8g: A2 Standard, eight A100 40GB.
return instance {
  name = "a2-highgpu-8g",
  provider = "Google Cloud",
  gpu = "a100-40gb",
  gpus = 8,
  cpu_ram_gib = 680,                  -- Google Cloud, 'Accelerator-optimized machine family', A2 Standard table (680 GB memory, 100 Gbps)
  network_gbit_per_s = 100,           -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 29.3873,           -- on-demand USD: the us-central1 on-demand price as published in 2024 (GPUs, vCPUs and memory together); not re-read for this commit
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-central1",
  price_date = "2024",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
