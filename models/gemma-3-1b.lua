-- Gemma 3 1B (Gemma Team 2025, arXiv:2503.19786), the text-only model.
-- Config: HF google/gemma-3-1b-pt config.json (Gemma3ForCausalLM: hidden
-- 1152, 26 layers, 4 heads of 256 over one key/value head, intermediate
-- 6912, vocab 262144, sliding_window 512 on five layers in six,
-- rope_theta 1e6 for the global layers and 1e4 for the sliding ones, no
-- soft caps, tied head). Parameter count: 999,885,952 (keras-hub's
-- gemma3_1b preset).
return llama {
  name = "gemma-3-1b",
  hidden = 1152,
  layers = 26,
  heads = 4,
  kv_heads = 1,
  head_dim = 256,
  intermediate = 6912,
  vocab = 262144,
  max_positions = 32768,
  rope_theta = 1000000.0,
  norm_eps = 1e-6,
  tie_embeddings = true,
  activation = "gelu_pytorch_tanh",
  norm_style = "gemma",
  norm_position = "sandwich",
  qk_norm = true,
  qk_norm_style = "gemma",
  sliding_window = 512,
  sliding_pattern = 6,
  local_rope = true,
  scaled_embedding = true,
}
