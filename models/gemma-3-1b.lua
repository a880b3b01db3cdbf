-- Gemma 3 1B (Gemma Team 2025, arXiv:2503.19786), the text-only model.
-- Config: HF google/gemma-3-1b-pt config.json (Gemma3ForCausalLM: hidden
-- 1152, 26 layers, 4 heads of 256 over one key/value head, intermediate
-- 6912, vocab 262144, sliding_window 512 on five layers in six,
-- rope_theta 1e6 for the global layers and 1e4 for the sliding ones, no
-- soft caps, tied head). Parameter count: 999,885,952 (keras-hub's
-- gemma3_1b preset).
return gemma3_text {
  name = "gemma-3-1b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/gemma-3-1b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 1152,
  layers = 26,
  heads = 4,
  kv_heads = 1,
  intermediate = 6912,
  vocab = 262144,
  max_positions = 32768,
  norm_eps = 1e-6,
  sliding_window = 512,
}
