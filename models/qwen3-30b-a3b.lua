-- Qwen3-30B-A3B (Qwen Team 2025, arXiv:2505.09388). Config: HF
-- Qwen/Qwen3-30B-A3B config.json (Qwen3MoeForCausalLM): 48 layers of
-- Qwen3 attention (32 query heads of 128 over 4 key/value heads, q_norm and
-- k_norm) and 128 experts of width 768, 8 per token, renormalized
-- (norm_topk_prob), no shared expert, untied 151936-word head. Its
-- checkpoint's tensors hold 30,532,122,624 parameters.
return qwen3_moe {
  name = "Qwen3-30B-A3B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/qwen3-30b-a3b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 48,
  heads = 32,
  kv_heads = 4,
  head_dim = 128,
  intermediate = 6144,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-6,
  norm_topk = true,
}
