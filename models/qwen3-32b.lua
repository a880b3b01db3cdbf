-- Qwen3-32B. Config: HF Qwen/Qwen3-32B config.json.
-- Parameter count: 32,762,123,264 (keras-hub's presets; the source is in tests/reference/models.json).
return qwen3 {
  name = "Qwen3-32B",
  -- the checkpoint's weights: Qwen/Qwen3-32B's config.json torch_dtype bfloat16 (as casys-kaist/LLMServingSim's
  -- configs/model/Qwen/Qwen3-32B.json copies it)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 64,
  heads = 64,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 25600,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-06,
}
