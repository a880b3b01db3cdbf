-- Qwen3-14B. Config: HF Qwen/Qwen3-14B config.json.
-- Parameter count: 14,768,307,200 (its source: tests/reference/models.json).
return qwen3 {
  name = "Qwen3-14B",
  -- the checkpoint's weights: Qwen/Qwen3-14B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 40,
  heads = 40,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 17408,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-06,
}
