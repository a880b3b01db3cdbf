-- Llama-3.1-405B. Config: HF meta-llama/Llama-3.1-405B config.json.
-- Parameter count: 405,853,388,800 (its source: tests/reference/models.json).
return llama {
  name = "Llama-3.1-405B",
  hidden = 16384,
  layers = 126,
  heads = 128,
  kv_heads = 8,
  intermediate = 53248,
  vocab = 128256,
  max_positions = 131072,
  rope_theta = 500000.0,
  norm_eps = 1e-05,
}
