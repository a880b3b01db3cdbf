-- Azure Standard_ND96amsr_A100_v4: NDm A100 v4, eight A100 80GB SXM4.
return instance {
  name = "Standard_ND96amsr_A100_v4",
  provider = "Azure",
  gpu = "a100-80gb",
  gpus = 8,
  cpu_ram_gib = 1900,                 -- Microsoft Learn, 'NDm A100 v4-series' (1900 GiB memory, 8x 200 Gb/s HDR InfiniBand)
  network_gbit_per_s = 1600,          -- as above
  gpu_link = "NVLink 3 (NVSwitch)",
  price_per_hour = 32.77,             -- on-demand USD, East US pay-as-you-go Linux: $32.77/hr as a third-party GPU-pricing report (data retrieved January-February 2026) quotes https://cloudprice.net/vm/Standard_ND96amsr_A100_v4; unchanged from the 2024 list price. No Azure retail-prices API extract with a date was found on 2026-12-03
  -- spot_price_per_hour: spot / preemptible prices change hourly; none recorded
  region = "eastus",
  price_date = "2026-01",
  source = "https://azure.microsoft.com/pricing/details/virtual-machines/linux/",
}
