-- Azure Standard_ND96asr_v4: ND A100 v4, eight A100 40GB SXM4.
return instance {
  name = "Standard_ND96asr_v4",
  provider = "Azure",
  gpu = "a100-40gb",
  gpus = 8,
  cpu_ram_gib = 900,                  -- Microsoft Learn, 'ND A100 v4-series' (900 GiB memory, 8x 200 Gb/s HDR InfiniBand)
  network_gbit_per_s = 1600,          -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 27.197,            -- on-demand USD: 8 x $3.3996 per GPU-hour in datareceipts/data-receipts 109-gpu-pricing/hyperscalers.json, retrieved 2026-11-09 (a scrape of the providers' list prices)
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "eastus",
  price_date = "2026-11",
  source = "https://azure.microsoft.com/pricing/details/virtual-machines/linux/",
}
