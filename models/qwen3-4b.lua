-- Qwen3-4B. Config: HF Qwen/Qwen3-4B config.json.
-- Parameter count: 4,022,468,096 (its source: tests/reference/models.json).
return llama {
  name = "Qwen3-4B",
  hidden = 2560,
  layers = 36,
  heads = 32,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 9728,
  vocab = 151936,
  max_positions = 40960,
  rope_theta = 1000000.0,
  norm_eps = 1e-06,
  qk_norm = true,
  tie_embeddings = true,
  mistral_mask = true, -- Qwen's models are MistralModel's
}
