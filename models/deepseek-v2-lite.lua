-- DeepSeek-V2-Lite (DeepSeek-AI 2024, arXiv:2405.04434); also
-- deepseek-ai/DeepSeek-V2-Lite-Chat, the same shape (its config.json as
-- huggingface.co/TechxGenus/DeepSeek-V2-Lite-Chat-AWQ copies it, read
-- 2026-12-03: 27 layers of 2048, 16 heads, 64 experts of 1408). Config: HF
-- deepseek-ai/DeepSeek-V2-Lite config.json (model_type deepseek_v2, its
-- own modeling_deepseek.py): 27 layers of hidden 2048 with multi-head
-- latent attention without a query latent (q_lora_rank null: one q_proj;
-- 16 heads, keys and values through a rank-512 latent, 128 + 64 rotary
-- query/key widths, 128 value width; yarn rope_scaling), one dense layer
-- (intermediate 10944), then 64 routed experts of width 1408, 6 per token,
-- chosen greedily by a softmax gate (routed_scaling_factor 1.0), beside 2
-- shared experts, with the sequence-wise auxiliary loss (aux_loss_alpha
-- 0.001). Published: "15.7B parameters", "2.4B activated" (the model card,
-- DeepSeek-V2 README: 16B / 2.4B). The configuration's shapes sum to
-- 15,706,484,224 parameters; the activated ones (6 of 64 experts) to
-- 2,661,150,208 with the embeddings and the head, 2,451,435,008 without
-- the input embedding: the published 2.4B (tests).
return deepseek_v2 {
  name = "DeepSeek-V2-Lite",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/deepseek-v2-lite-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 27,
  heads = 16,
  kv_heads = 16,
  intermediate = 10944,
  vocab = 102400,
  max_positions = 163840,
  norm_eps = 1e-6,
  experts = 64,
  experts_per_token = 6,
  moe_intermediate = 1408,
  shared_intermediate = 2816,
  dense_layers = 1,
  q_lora_rank = 0,
  kv_lora_rank = 512,
  qk_nope_head_dim = 128,
  qk_rope_head_dim = 64,
  v_head_dim = 128,
}
