-- Gemma 3 4B's language model (Gemma Team 2025, arXiv:2503.19786) as
-- Gemma3ForCausalLM runs it: the multimodal google/gemma-3-4b-pt
-- checkpoint's text model alone, without its vision tower.
-- Config: that checkpoint's text_config (hidden 2560, 34 layers, 8 heads of
-- 256 over 4 key/value heads, intermediate 10240, vocab 262208,
-- sliding_window 1024 on five layers in six, tied head). Parameter count:
-- 3,880,263,168 (its source: tests/reference/models.json).
return gemma3_text {
  name = "gemma-3-4b (text)",
  hidden = 2560,
  layers = 34,
  heads = 8,
  kv_heads = 4,
  intermediate = 10240,
  vocab = 262208,
  max_positions = 131072,
  norm_eps = 1e-6,
  sliding_window = 1024,
}
