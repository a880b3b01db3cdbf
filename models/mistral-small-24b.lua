-- Mistral-Small-24B-Base-2501. Config: HF mistralai/Mistral-Small-24B-Base-2501 config.json.
-- Parameter count: 23,572,403,200 (its source: tests/reference/models.json).
return mistral {
  name = "Mistral-Small-24B-Base-2501",
  hidden = 5120,
  layers = 40,
  heads = 32,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 32768,
  vocab = 131072,
  max_positions = 32768,
  rope_theta = 100000000.0,
  norm_eps = 1e-05,
}
