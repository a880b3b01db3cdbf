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
  -- price_per_hour: none. AWS lists p5e among the instances sold through EC2 Capacity Blocks for ML
  -- (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-how.html, read 2026-12-03), whose
  -- reservation prices follow supply and demand; no on-demand list price for p5e was found on 2026-12-03
  -- (searched: AWS's on-demand and Capacity Blocks pricing pages as stored, the price scrapes the other
  -- instance files cite). A mirror of the Capacity Blocks page (2024) shows an 8x H200 row at $43.26 an hour
  -- without naming the instance type: not used.
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
