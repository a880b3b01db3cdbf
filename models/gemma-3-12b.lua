-- Gemma 3 12B's language model (Gemma Team 2025, arXiv:2503.19786) as
-- Gemma3ForCausalLM runs it: the multimodal google/gemma-3-12b-pt
-- checkpoint's text model alone, without its vision tower.
-- Config: that checkpoint's text_config (hidden 3840, 48 layers, 16 heads of
-- 256 over 8 key/value heads, intermediate 15360, vocab 262208,
-- sliding_window 1024 on five layers in six, tied head). Parameter count:
-- 11,766,034,176 (its source: tests/reference/models.json).
return llama {
  name = "gemma-3-12b (text)",
  hidden = 3840,
  layers = 48,
  heads = 16,
  kv_heads = 8,
  head_dim = 256,
  intermediate = 15360,
  vocab = 262208,
  max_positions = 131072,
  rope_theta = 1000000.0,
  norm_eps = 1e-6,
  tie_embeddings = true,
  activation = "gelu_pytorch_tanh",
  norm_style = "gemma",
  norm_position = "sandwich",
  qk_norm = true,
  qk_norm_style = "gemma",
  sliding_window = 1024,
  sliding_pattern = 6,
  local_rope = true,
  scaled_embedding = true,
}
