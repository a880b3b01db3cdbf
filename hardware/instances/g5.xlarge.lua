-- AWS g5.xlarge: one A10G.
return instance {
  name = "g5.xlarge",
  provider = "AWS",
  gpu = "a10g",
  gpus = 1,
  cpu_ram_gib = 16,                   -- AWS EC2 accelerated-computing instance type pages (G5, G6, G6e); network 'up to 10 Gbit/s'
  network_gbit_per_s = 10,            -- as above
  nvme_tb = 0.25,                     -- local NVMe / SSD, as above
  price_per_hour = 1.006,             -- on-demand USD: $1.006/hr in us-east-1 as quoted in 'Amazon EC2 On-Demand Pricing ... (2026)' (June 2026)
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-06",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
