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
  -- price_per_hour: none. AWS sells p5e through EC2 Capacity Blocks for ML
  -- (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-how.html, read 2026-12-03), not on
  -- demand: the AWS Price List bulk API (Last-Modified 2026-07-28) has no on-demand SKU for p5e.48xlarge in
  -- us-east-1, us-east-2 or us-west-2, as a third-party EFA instance-matrix note that read it on 2026-08-01
  -- records; the same note quotes the Capacity Blocks pricing page (https://aws.amazon.com/ec2/capacityblocks/pricing/,
  -- 2026-08-01) at an effective $47.76 an hour for p5e.48xlarge in all listed regions, a reservation price
  -- that AWS revises (next in October 2026, the page says) and not an on-demand one: not used as one.
  -- Re-checked 2026-12-03 (AWS's on-demand and Capacity Blocks pages as stored, the scrapes the other
  -- instance files cite, tsaol/aws-gpu's instances.vantage.sh extract of 2026-01-21: no us-east-1 price).
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
