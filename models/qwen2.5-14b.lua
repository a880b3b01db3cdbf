-- Qwen2.5-14B. Config: HF Qwen/Qwen2.5-14B config.json.
-- Parameter count: 14,770,033,664 (its source: tests/reference/models.json).
return llama {
  name = "Qwen2.5-14B",
  hidden = 5120,
  layers = 48,
  heads = 40,
  kv_heads = 8,
  intermediate = 13824,
  vocab = 152064,
  max_positions = 131072,
  rope_theta = 1000000.0,
  norm_eps = 1e-05,
  qkv_bias = true,
  mistral_mask = true, -- Qwen's models are MistralModel's
}
