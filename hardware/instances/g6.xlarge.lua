-- AWS g6.xlarge: one L4.
return instance {
  name = "g6.xlarge",
  provider = "AWS",
  gpu = "l4",
  gpus = 1,
  cpu_ram_gib = 16,                   -- AWS EC2 accelerated-computing instance type pages (G5, G6, G6e); network 'up to 10 Gbit/s'
  network_gbit_per_s = 10,            -- as above
  nvme_tb = 0.25,                     -- local NVMe / SSD, as above
  price_per_hour = 0.8048,            -- on-demand USD: the us-east-1 list price as published in 2024; not re-read: no dated source for it was found on 2026-12-03 (searched AWS's pricing pages as stored, the scraped catalogs the other instance files cite); the 2024 figure stays, marked by price_date
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2024",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
