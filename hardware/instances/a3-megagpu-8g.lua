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
  -- price_per_hour: no on-demand price found that this commit could attribute: left out
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-central1",
  source = "https://cloud.google.com/compute/vm-instance-pricing#accelerator-optimized",
}
