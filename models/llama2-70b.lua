-- Llama 2 70B (Touvron et al. 2023), grouped-query attention with 8 KV heads.
-- Config: HF meta-llama/Llama-2-70b-hf config.json. Published parameter
-- count: 68,976,648,192.
return llama {
  name = "Llama-2-70B",
  hidden = 8192,
  layers = 80,
  heads = 64,
  kv_heads = 8,
  intermediate = 28672,
  vocab = 32000,
  max_positions = 4096,
  norm_eps = 1e-5,
}
