-- NVIDIA GeForce RTX 3090: the 24 GB Ampere consumer card common in home and lab fine-tuning rigs.
return gpu {
  name = "NVIDIA GeForce RTX 3090",    -- display name
  vendor = "NVIDIA",
  architecture = "Ampere",
  compute_capability = "8.6",          -- NVIDIA CUDA GPUs compute-capability table
  memory_mib = 24576,                  -- nvidia-smi "22598MiB / 24576MiB", driver 595 (github.com/noonghunna/club-3090/issues/1128; same in issues/758)
  memory_bandwidth_gbps = 936,         -- GB/s (NVIDIA Ampere GA102 whitepaper v2, Appendix A, RTX 3090)
  fp32_tflops = 35.6,                  -- NVIDIA Ampere GA102 whitepaper v2, Appendix A
  tf32_tflops = 35.6,                  -- dense; whitepaper prints 71* with sparsity (GA102 whitepaper v2, Appendix A)
  fp16_tflops = 71,                    -- dense, FP32 accumulate (142 with FP16 accumulate); 142* sparse halved (GA102 whitepaper v2, Appendix A)
  bf16_tflops = 71,                    -- dense, FP32 accumulate; 142* sparse halved (GA102 whitepaper v2, Appendix A)
  interconnect = "PCIe 4.0 x16",       -- an optional NVLink bridge gives 112.5 GB/s between two cards (GA102 whitepaper v2)
  interconnect_gbps = 64,              -- PCIe Gen4 x16, 32 GB/s each way (PCIe 4.0 spec)
  sms = 82,                            -- 10,496 CUDA cores / 128 a GA102 SM (NVIDIA Ampere GA102 whitepaper)
  tdp_watts = 350,                     -- total graphics power (NVIDIA Ampere GA102 whitepaper v2, Appendix A)
}
