-- Qwen3-235B-A22B (Qwen Team 2025). Config: HF Qwen/Qwen3-235B-A22B
-- config.json (Qwen3MoeForCausalLM: hidden 4096, 94 layers, 64 heads of
-- 128 over 4 key/value heads, 128 experts of 1536, 8 a token, vocab
-- 151936, untied head). Parameter count: 235,093,634,560 (its source:
-- tests/reference/models.json).
return qwen3_moe {
  name = "Qwen3-235B-A22B",
  hidden = 4096,
  layers = 94,
  heads = 64,
  kv_heads = 4,
  head_dim = 128,
  intermediate = 12288,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-6,
  moe_intermediate = 1536,
  norm_topk = true,
}
