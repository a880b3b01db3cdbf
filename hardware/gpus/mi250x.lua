-- AMD Instinct MI250X (CDNA 2, OAM): one module holds two GCDs that ROCm and PyTorch see as two GPUs of 64 GB
-- each; this file describes one GCD, as --gpu and the per-GPU verdict count it. Module figures are halved.
return gpu {
  name = "AMD Instinct MI250X (one GCD)", -- display name
  vendor = "AMD",
  architecture = "CDNA 2",             -- gfx90a
  memory_mib = 65520,                  -- per GCD: HSA pool "Size: 67092480(0x3ffc000) KB" on "AMD Instinct MI250X/MI250" (github.com/ROCm/rocm_smi_lib/issues/160), 65520 MiB; rocm-smi's VRAM Total of a GCD is the same 68702699520 B
  memory_bandwidth_gbps = 1600,        -- GB/s: 3.2 TB/s per module (AMD Instinct MI250X datasheet), halved
  fp32_tflops = 47.9,                  -- vector FP32 95.7 per module (AMD Instinct MI250X datasheet), halved
  fp16_tflops = 191.5,                 -- dense matrix FP16 383 per module (AMD Instinct MI250X datasheet), halved; CDNA 2 has no sparsity and no TF32
  bf16_tflops = 191.5,                 -- dense matrix BF16 383 per module (AMD Instinct MI250X datasheet), halved
  interconnect = "Infinity Fabric",    -- 8 links, 800 GB/s peak per module (AMD Instinct MI250X datasheet); the two GCDs share them
}
