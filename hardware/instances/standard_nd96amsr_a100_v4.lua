-- Azure Standard_ND96amsr_A100_v4: NDm A100 v4, eight A100 80GB SXM4.
return instance {
  name = "Standard_ND96amsr_A100_v4",
  provider = "Azure",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1900,                 -- Microsoft Learn, 'NDm A100 v4-series' (1900 GiB memory, 8x 200 Gb/s HDR InfiniBand)
  network_gbit_per_s = 1600,          -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 32.77,             -- on-demand USD: the East US pay-as-you-go Linux price as published in 2024; not re-read: no dated source for it was found on 2026-12-03 (searched the provider's pricing pages as stored, the scraped catalogs the other instance files cite); the 2024 figure stays, marked by price_date
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "eastus",
  price_date = "2024",
  source = "https://azure.microsoft.com/pricing/details/virtual-machines/linux/",
}
