-- AWS p5e.48xlarge: eight H200 141GB, 3200 Gbit/s EFA.
return instance {
  name = "p5e.48xlarge",
  provider = "AWS",
  gpu = "h200",
  gpus = 8,
  cpu_ram_gib = 2048,                 -- AWS EC2 instance type pages (P4, P5) and the EC2 Capacity Blocks pricing table (instance memory, NVMe, network)
  network_gbit_per_s = 3200,          -- as above
  nvme_tb = 30.72,                    -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  -- price_per_hour: no on-demand price found that this commit could attribute: left out
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
