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
  price_per_hour = 27.44705,          -- on-demand USD: datareceipts/data-receipts 109-gpu-pricing/hyperscalers.json, retrieved 2026-11-09 (a scrape of the providers' list prices); AWS cut P4 and P5 on-demand prices in June 2025 (the list before was 32.7726, 40.9657 and 98.32)
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "us-east-1",
  price_date = "2026-11",
  source = "https://aws.amazon.com/ec2/pricing/on-demand/",
}
