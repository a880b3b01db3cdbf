-- AWS p4de.24xlarge: p4d with A100 80GB.
return instance {
  name = "p4de.24xlarge",
  provider = "AWS",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1152,                 -- AWS EC2 instance type pages (P4, P5) and the EC2 Capacity Blocks pricing table (instance memory, NVMe, network)
  network_gbit_per_s = 400,           -- as above
  nvme_tb = 8,                        -- local NVMe / SSD, as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 40.9657,           -- on-demand USD: AWS cut P4d, P4de and P5 on-demand prices in June 2025 (up to 45% for P5; usage.ai, 'LLM Cost Optimization on AWS', 2026-06): this is the list price before that cut, the last one this commit could attribute
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2025-05",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
