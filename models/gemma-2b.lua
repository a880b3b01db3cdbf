-- Gemma 2B (Gemma Team 2024, arXiv:2403.08295). Config: HF google/gemma-2b
-- config.json (GemmaForCausalLM: hidden 2048, 18 layers, 8 query heads of
-- 256 over one key/value head, intermediate 16384, vocab 256000,
-- rms_norm_eps 1e-6, tied head, GeLU gated MLP). Published parameter
-- count: 2,506,172,416 (keras-hub's gemma preset).
return gemma {
  name = "gemma-2b",
  hidden = 2048,
  layers = 18,
  heads = 8,
  kv_heads = 1,
  head_dim = 256,
  intermediate = 16384,
  vocab = 256000,
  max_positions = 8192,
  norm_eps = 1e-6,
}
