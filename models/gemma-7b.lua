-- Gemma 7B (Gemma Team 2024, arXiv:2403.08295). Config: HF google/gemma-7b
-- config.json (GemmaForCausalLM: hidden 3072, 28 layers, 16 heads of 256,
-- intermediate 24576, vocab 256000, rms_norm_eps 1e-6, tied head, GeLU
-- gated MLP). Published parameter count: 8,537,680,896 (keras-hub's gemma
-- preset).
return gemma {
  name = "gemma-7b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/gemma-7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 3072,
  layers = 28,
  heads = 16,
  head_dim = 256,
  intermediate = 24576,
  vocab = 256000,
  max_positions = 8192,
  norm_eps = 1e-6,
}
