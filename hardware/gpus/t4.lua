-- NVIDIA Tesla T4: the 70 W 16 GB Turing inference card (free Colab, AWS g4dn); FP16 tensor cores, no TF32/BF16.
return gpu {
  name = "NVIDIA T4",                  -- display name
  vendor = "NVIDIA",
  architecture = "Turing",
  compute_capability = "7.5",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 15360,                  -- nvidia-smi total for T4 (github.com/modal-labs/modal-client/pull/2797); many pasted nvidia-smi tables show "0MiB / 15360MiB" at 70W cap; ECC (on by default) takes the rest of the 16 GB
  memory_bandwidth_gbps = 320,         -- GB/s, "320+ GB/s" (NVIDIA T4 datasheet)
  fp32_tflops = 8.1,                   -- NVIDIA T4 datasheet
  fp16_tflops = 65,                    -- "Mixed Precision (FP16/FP32)" tensor (NVIDIA T4 datasheet; Turing has no sparsity)
  interconnect = "PCIe 3.0 x16",
  interconnect_gbps = 32,              -- PCIe Gen3 x16, ~16 GB/s each way (PCIe 3.0 spec; datasheet gives only "x16 PCIe Gen3")
  sms = 40,                            -- 2,560 CUDA cores / 64 a TU104 SM (NVIDIA T4 datasheet)
  tdp_watts = 70,                      -- NVIDIA T4 datasheet
}
