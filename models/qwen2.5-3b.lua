-- Qwen2.5-3B. Config: HF Qwen/Qwen2.5-3B config.json.
-- Parameter count: 3,085,938,688 (its source: tests/reference/models.json).
return llama {
  name = "Qwen2.5-3B",
  hidden = 2048,
  layers = 36,
  heads = 16,
  kv_heads = 2,
  intermediate = 11008,
  vocab = 151936,
  max_positions = 32768,
  rope_theta = 1000000.0,
  norm_eps = 1e-06,
  qkv_bias = true,
  tie_embeddings = true,
  mistral_mask = true, -- Qwen's models are MistralModel's
}
