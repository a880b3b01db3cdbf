-- Qwen2.5-3B. Config: HF Qwen/Qwen2.5-3B config.json.
-- Parameter count: 3,085,938,688 (its source: tests/reference/models.json).
return qwen2 {
  name = "Qwen2.5-3B",
  -- the checkpoint's weights: Qwen/Qwen2.5-3B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 36,
  heads = 16,
  kv_heads = 2,
  intermediate = 11008,
  vocab = 151936,
  max_positions = 32768,
  norm_eps = 1e-06,
  tie_embeddings = true,
}
