-- Qwen2.5-1.5B. Config: HF Qwen/Qwen2.5-1.5B config.json.
-- Parameter count: 1,543,714,304 (its source: tests/reference/models.json).
return qwen2 {
  name = "Qwen2.5-1.5B",
  hidden = 1536,
  layers = 28,
  heads = 12,
  kv_heads = 2,
  intermediate = 8960,
  vocab = 151936,
  max_positions = 131072,
  norm_eps = 1e-06,
  tie_embeddings = true,
}
