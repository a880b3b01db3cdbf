-- Qwen2.5-32B. Config: HF Qwen/Qwen2.5-32B config.json.
-- Parameter count: 32,763,876,352 (keras-hub's presets; the source is in tests/reference/models.json).
return qwen2 {
  name = "Qwen2.5-32B",
  -- the checkpoint's weights: Qwen/Qwen2.5-32B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 64,
  heads = 40,
  kv_heads = 8,
  intermediate = 27648,
  vocab = 152064,
  max_positions = 131072,
  norm_eps = 1e-05,
}
