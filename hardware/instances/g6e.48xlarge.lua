-- AWS g6e.48xlarge: eight L40S on PCIe.
return instance {
  name = "g6e.48xlarge",
  provider = "AWS",
  gpu = "l40s",
  gpus = 8,
  cpu_ram_gib = 1536,                 -- AWS EC2 accelerated-computing instance type pages (G5, G6, G6e)
  network_gbit_per_s = 400,           -- as above
  nvme_tb = 7.6,                      -- local NVMe / SSD, as above
  gpu_link = "PCIe 4.0 x16",
  price_per_hour = 30.1312,           -- on-demand USD: the us-east-1 list price as published in 2024; not re-read: no dated source for it was found on 2026-12-03 (searched AWS's pricing pages as stored, the scraped catalogs the other instance files cite); the 2024 figure stays, marked by price_date
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2024",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
