-- Qwen2.5-72B. Config: HF Qwen/Qwen2.5-72B config.json.
-- Parameter count: 72,706,203,648 (keras-hub's presets; the source is in tests/reference/models.json).
return qwen2 {
  name = "Qwen2.5-72B",
  hidden = 8192,
  layers = 80,
  heads = 64,
  kv_heads = 8,
  intermediate = 29568,
  vocab = 152064,
  max_positions = 131072,
  norm_eps = 1e-05,
}
