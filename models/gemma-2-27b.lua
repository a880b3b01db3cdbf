-- Gemma 2 27B (Gemma Team 2024, arXiv:2408.00118). Config: HF
-- google/gemma-2-27b config.json (Gemma2ForCausalLM: hidden 4608, 46
-- layers, 32 heads of 128 over 16 key/value heads, intermediate 36864,
-- vocab 256000, sliding_window 4096 on every other layer,
-- attn_logit_softcapping 50, final_logit_softcapping 30, tied head).
-- Parameter count: 27,227,128,320 (the checkpoint's safetensors total).
return gemma2 {
  name = "gemma-2-27b",
  hidden = 4608,
  layers = 46,
  heads = 32,
  kv_heads = 16,
  head_dim = 128,
  intermediate = 36864,
  vocab = 256000,
  max_positions = 8192,
  norm_eps = 1e-6,
}
