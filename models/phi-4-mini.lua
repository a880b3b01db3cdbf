-- Phi-4-mini-instruct (Microsoft 2025, arXiv:2503.01743). Config: HF
-- microsoft/Phi-4-mini-instruct config.json (Phi3ForCausalLM: hidden 3072,
-- 32 layers, 24 query heads of 128 over 8 key/value heads, intermediate
-- 8192, vocab 200064, partial_rotary_factor 0.75, rope_theta 10000,
-- rms_norm_eps 1e-5, tied head). Its checkpoint holds
-- 3,836,021,760 parameters.
return phi3 {
  name = "Phi-4-mini-instruct",
  hidden = 3072,
  layers = 32,
  heads = 24,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 8192,
  vocab = 200064,
  max_positions = 131072,
  norm_eps = 1e-5,
  tie_embeddings = true,
  partial_rotary_factor = 0.75,
}
