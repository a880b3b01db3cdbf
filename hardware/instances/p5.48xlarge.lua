-- AWS p5.48xlarge: eight H100 80GB SXM5, 3200 Gbit/s EFA.
return instance {
  name = "p5.48xlarge",
  provider = "AWS",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 2048,                 -- AWS EC2 instance type pages (P4, P5) and the EC2 Capacity Blocks pricing table (instance memory, NVMe, network)
  network_gbit_per_s = 3200,          -- as above
  nvme_tb = 30.72,                    -- local NVMe / SSD, as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 98.32,             -- on-demand USD: AWS cut P4d, P4de and P5 on-demand prices in June 2025 (up to 45% for P5; usage.ai, 'LLM Cost Optimization on AWS', 2026-06): this is the list price before that cut, the last one this commit could attribute
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2025-05",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
