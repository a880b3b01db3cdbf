-- DeepSeekMoE 16B (Dai et al. 2024, arXiv:2401.06066). Config: HF
-- deepseek-ai/deepseek-moe-16b-base config.json (model_type deepseek, its
-- own modeling_deepseek.py): a dense first layer (first_k_dense_replace 1,
-- intermediate 10944), then 27 layers of 64 fine-grained routed experts of
-- width 1408, 6 per token, beside 2 shared experts (one ungated MLP of
-- width 2816), and a sequence-wise auxiliary loss (aux_loss_alpha 0.001).
-- Published: "16.4B parameters" (DeepSeek-MoE README); the checkpoint's
-- total is 16,375,728,128.
return deepseek {
  name = "DeepSeekMoE-16B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/deepseek-moe-16b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 28,
  heads = 16,
  kv_heads = 16,
  intermediate = 10944,
  vocab = 102400,
  max_positions = 4096,
  norm_eps = 1e-6,
  experts = 64,
  experts_per_token = 6,
  moe_intermediate = 1408,
  shared_intermediate = 2816,
  dense_layers = 1,
  aux_loss = true,
}
