-- AWS g6.xlarge: one L4.
return instance {
  name = "g6.xlarge",
  provider = "AWS",
  gpu = "l4",
  gpus = 1,
  cpu_ram_gib = 16,                   -- AWS EC2 accelerated-computing instance type pages (G5, G6, G6e); network 'up to 10 Gbit/s'
  network_gbit_per_s = 10,            -- as above
  nvme_tb = 0.25,                     -- local NVMe / SSD, as above
  price_per_hour = 0.8048,            -- on-demand USD, us-east-1: tsaol/aws-gpu data/g6_instances.js at commit 77fcd9f (2026-01-21; 'Auto-generated from instances.vantage.sh data, Last updated: 2026-01-21'), read 2026-12-03; unchanged from the 2024 list price
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-01",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
