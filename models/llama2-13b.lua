-- Llama 2 13B (Touvron et al. 2023). Config: HF meta-llama/Llama-2-13b-hf
-- config.json. Published parameter count: 13,015,864,320.
return llama {
  name = "Llama-2-13B",
  hidden = 5120,
  layers = 40,
  heads = 40,
  kv_heads = 40,
  intermediate = 13824,
  vocab = 32000,
  max_positions = 4096,
  norm_eps = 1e-5,
}
