-- gpt-oss-120b (OpenAI 2025, gpt-oss model card, arXiv:2508.10925). Config:
-- HF openai/gpt-oss-120b config.json (GptOssForCausalLM): gpt-oss-20b's
-- layer with 128 experts, 36 layers. Parameter count: 116,829,156,672
-- (the model card's 116.83B total; the checkpoint stores the experts in
-- MXFP4, which fine-tuning dequantizes to bf16; axolotl's examples train
-- axolotl-ai-co/gpt-oss-120b-dequantized, the same model stored in bf16).
return gpt_oss {
  name = "gpt-oss-120b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/gpt-oss-120b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2880,
  layers = 36,
  heads = 64,
  kv_heads = 8,
  head_dim = 64,
  intermediate = 2880,
  experts = 128,
  experts_per_token = 4,
  vocab = 201088,
  max_positions = 131072,
  rope_theta = 150000.0,
  norm_eps = 1e-5,
  sliding_window = 128,
}
