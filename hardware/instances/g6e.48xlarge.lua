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
  price_per_hour = 30.13118,          -- on-demand USD, us-east-1: the AWS Price List bulk API for us-east-1 (https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv, Last-Modified 2026-07-28; Linux, shared tenancy) as a third-party EFA instance-matrix note quotes it (accessed 2026-08-01); the same figure in tsaol/aws-gpu data/g6e_instances.js at commit 77fcd9f (instances.vantage.sh data of 2026-01-21); unchanged from the 2024 list price
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-07",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
