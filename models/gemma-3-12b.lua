-- Gemma 3 12B's language model (Gemma Team 2025, arXiv:2503.19786) as
-- Gemma3ForCausalLM runs it: the multimodal google/gemma-3-12b-pt
-- checkpoint's text model alone, without its vision tower.
-- Config: that checkpoint's text_config (hidden 3840, 48 layers, 16 heads of
-- 256 over 8 key/value heads, intermediate 15360, vocab 262208,
-- sliding_window 1024 on five layers in six, tied head). Parameter count:
-- 11,766,034,176 (its source: tests/reference/models.json).
return gemma3_text {
  name = "gemma-3-12b (text)",
  hidden = 3840,
  layers = 48,
  heads = 16,
  kv_heads = 8,
  intermediate = 15360,
  vocab = 262208,
  max_positions = 131072,
  norm_eps = 1e-6,
  sliding_window = 1024,
}
