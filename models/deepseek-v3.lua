-- DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437). Config: HF
-- deepseek-ai/DeepSeek-V3 config.json (model_type deepseek_v3): 61 layers of
-- hidden 7168 with multi-head latent attention (128 heads; queries through
-- a rank-1536 latent, keys and values through a rank-512 one; 128 + 64
-- rotary query/key widths, 128 value width), three dense layers
-- (intermediate 18432), then 256 routed experts of width 2048, 8 per token,
-- chosen by a sigmoid router limited to 4 of 8 groups, beside one shared
-- expert. Published: "Total parameters: 671B" for the main model
-- (README_WEIGHTS.md; the checkpoint's further 11.5B are the multi-token
-- prediction module, which transformers does not load).
return deepseek_v3 {
  name = "DeepSeek-V3",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/deepseek-v3-config.json)
  checkpoint_dtype = "bf16",
  hidden = 7168,
  layers = 61,
  heads = 128,
  kv_heads = 128,
  intermediate = 18432,
  vocab = 129280,
  max_positions = 163840,
  norm_eps = 1e-6,
  experts = 256,
  experts_per_token = 8,
  moe_intermediate = 2048,
  shared_intermediate = 2048,
  dense_layers = 3,
  expert_groups = 8,
  topk_groups = 4,
  q_lora_rank = 1536,
  kv_lora_rank = 512,
  qk_nope_head_dim = 128,
  qk_rope_head_dim = 64,
  v_head_dim = 128,
}
