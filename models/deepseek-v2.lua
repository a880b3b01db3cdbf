-- DeepSeek-V2 (DeepSeek-AI 2024, arXiv:2405.04434); also
-- deepseek-ai/DeepSeek-V2-Chat, the same shape (its config.json,
-- huggingface.co/deepseek-ai/DeepSeek-V2-Chat, read 2026-12-03: 60 layers
-- of 5120, 128 heads, 160 experts of 1536; leaderboard requests of both
-- checkpoints give 235.741B parameters).
-- Config: HF deepseek-ai/DeepSeek-V2 config.json (model_type deepseek_v2, its own
-- modeling_deepseek.py): 60 layers of hidden 5120 with multi-head latent
-- attention (128 heads; queries through a rank-1536 latent, keys and values
-- through a rank-512 one; 128 + 64 rotary query/key widths, 128 value
-- width; yarn rope_scaling, factor 40, over 4096 original positions), one
-- dense layer (intermediate 12288), then 160 routed experts of width 1536,
-- 6 per token, chosen by a softmax gate within 3 of 8 groups
-- (group_limited_greedy) and scaled by routed_scaling_factor 16, beside 2
-- shared experts, with the sequence-wise auxiliary loss (aux_loss_alpha
-- 0.001). Published: "236B total parameters, of which 21B are activated for
-- each token" (the paper's abstract; README: 236B / 21B). The configuration's
-- shapes sum to 235,741,434,880 parameters; the activated ones (6 of 160
-- experts) to 21,375,800,320 with the embeddings and the head (tests).
return deepseek_v2 {
  name = "DeepSeek-V2",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/deepseek-v2-config.json)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 60,
  heads = 128,
  kv_heads = 128,
  intermediate = 12288,
  vocab = 102400,
  max_positions = 163840,
  norm_eps = 1e-6,
  experts = 160,
  experts_per_token = 6,
  moe_intermediate = 1536,
  shared_intermediate = 3072,
  dense_layers = 1,
  expert_groups = 8,
  topk_groups = 3,
  group_limited = true,
  q_lora_rank = 1536,
  kv_lora_rank = 512,
  qk_nope_head_dim = 128,
  qk_rope_head_dim = 64,
  v_head_dim = 128,
}
