-- Qwen2.5-14B. Config: HF Qwen/Qwen2.5-14B config.json.
-- Parameter count: 14,770,033,664 (its source: tests/reference/models.json).
return qwen2 {
  name = "Qwen2.5-14B",
  -- the checkpoint's weights: Qwen/Qwen2.5-14B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 48,
  heads = 40,
  kv_heads = 8,
  intermediate = 13824,
  vocab = 152064,
  max_positions = 131072,
  norm_eps = 1e-05,
}
