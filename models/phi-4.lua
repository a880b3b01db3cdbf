-- Phi-4 (Abdin et al. 2024, arXiv:2412.08905). Config: HF microsoft/phi-4
-- config.json (Phi3ForCausalLM: hidden 5120, 40 layers, 40 heads over 10
-- key/value heads, intermediate 17920, vocab 100352, rope_theta 250000,
-- rms_norm_eps 1e-5, max_position_embeddings 16384, no sliding window,
-- untied head). Its parameters: 14,659,507,200 (the fields' arithmetic;
-- the model card's "14B").
return phi3 {
  name = "phi-4",
  hidden = 5120,
  layers = 40,
  heads = 40,
  kv_heads = 10,
  intermediate = 17920,
  vocab = 100352,
  max_positions = 16384,
  rope_theta = 250000,
  norm_eps = 1e-5,
}
