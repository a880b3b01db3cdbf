-- Gemma 2 2B (Gemma Team 2024, arXiv:2408.00118). Config: HF
-- google/gemma-2-2b config.json (Gemma2ForCausalLM: hidden 2304, 26
-- layers, 8 heads of 256 over 4 key/value heads, intermediate 9216, vocab
-- 256000, sliding_window 4096 on every other layer, attn_logit_softcapping
-- 50, final_logit_softcapping 30, tied head). Parameter count:
-- 2,614,341,888 (the checkpoint's safetensors total).
return gemma2 {
  name = "gemma-2-2b",
  hidden = 2304,
  layers = 26,
  heads = 8,
  kv_heads = 4,
  intermediate = 9216,
  vocab = 256000,
  max_positions = 8192,
  norm_eps = 1e-6,
}
