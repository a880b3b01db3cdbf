-- Gemma 3 27B's language model (Gemma Team 2025, arXiv:2503.19786) as
-- Gemma3ForCausalLM runs it: the multimodal google/gemma-3-27b-pt
-- checkpoint's text model alone, without its vision tower.
-- Config: that checkpoint's text_config (hidden 5376, 62 layers, 32 heads of
-- 128 over 16 key/value heads, intermediate 21504, vocab 262208,
-- sliding_window 1024 on five layers in six, tied head). Parameter count:
-- 27,009,346,304 (its source: tests/reference/models.json).
return gemma3_text {
  name = "gemma-3-27b (text)",
  hidden = 5376,
  layers = 62,
  heads = 32,
  kv_heads = 16,
  head_dim = 128,
  intermediate = 21504,
  vocab = 262208,
  max_positions = 131072,
  norm_eps = 1e-6,
  sliding_window = 1024,
}
