-- gpt-oss-20b (OpenAI 2025, gpt-oss model card, arXiv:2508.10925). Config:
-- HF openai/gpt-oss-20b config.json (GptOssForCausalLM: hidden 2880, 24
-- layers alternating sliding (window 128) and full attention, 64 heads of
-- 64 over 8 key/value heads with biases and a sink logit each, 32 experts
-- of width 2880, 4 a token, vocab 201088, untied head). Parameter count:
-- 20,914,757,184 (the model card's 20.91B total; the checkpoint stores
-- the experts in MXFP4, which fine-tuning dequantizes to bf16).
return gpt_oss {
  name = "gpt-oss-20b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/gpt-oss-20b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2880,
  layers = 24,
  heads = 64,
  kv_heads = 8,
  head_dim = 64,
  intermediate = 2880,
  experts = 32,
  experts_per_token = 4,
  vocab = 201088,
  max_positions = 131072,
  rope_theta = 150000.0,
  norm_eps = 1e-5,
  sliding_window = 128,
}
