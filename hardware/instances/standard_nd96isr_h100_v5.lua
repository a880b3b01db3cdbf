-- Azure Standard_ND96isr_H100_v5: ND H100 v5, eight H100 80GB SXM5.
return instance {
  name = "Standard_ND96isr_H100_v5",
  provider = "Azure",
  gpu = "h100-80gb",
  gpus = 8,
  cpu_ram_gib = 1900,                 -- Microsoft Learn, 'ND H100 v5-series' (1900 GiB memory, 8x 400 Gb/s NDR InfiniBand)
  network_gbit_per_s = 3200,          -- as above
  gpu_link = "NVLink 4 (NVSwitch)",
  price_per_hour = 98.32,             -- on-demand USD: 8 x $12.29 per GPU-hour (Azure's H100 SXM) in datareceipts/data-receipts 109-gpu-pricing/compare.json, retrieved 2026-11-09
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "eastus",
  price_date = "2026-11",
  source = "https://azure.microsoft.com/pricing/details/virtual-machines/linux/",
}
