-- Gemma 2 9B (Gemma Team 2024, arXiv:2408.00118). Config: HF
-- google/gemma-2-9b config.json (Gemma2ForCausalLM: hidden 3584, 42
-- layers, 16 heads of 256 over 8 key/value heads, intermediate 14336,
-- vocab 256000, sliding_window 4096 on every other layer,
-- attn_logit_softcapping 50, final_logit_softcapping 30, tied head).
-- Parameter count: 9,241,705,984 (the checkpoint's safetensors total).
return gemma2 {
  name = "gemma-2-9b",
  -- the checkpoint's weights: config.json torch_dtype float32 (tests/fixtures/gemma-2-9b-config.json)
  checkpoint_dtype = "fp32",
  hidden = 3584,
  layers = 42,
  heads = 16,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 256000,
  max_positions = 8192,
  norm_eps = 1e-6,
}
