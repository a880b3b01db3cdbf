-- Qwen3-4B. Config: HF Qwen/Qwen3-4B config.json.
-- Parameter count: 4,022,468,096 (its source: tests/reference/models.json).
return qwen3 {
  name = "Qwen3-4B",
  -- the checkpoint's weights: Qwen/Qwen3-4B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 2560,
  layers = 36,
  heads = 32,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 9728,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-06,
  tie_embeddings = true,
}
