-- Phi-3-mini-4k-instruct (Abdin et al. 2024, arXiv:2404.14219). Config: HF
-- microsoft/Phi-3-mini-4k-instruct config.json (Phi3ForCausalLM: hidden
-- 3072, 32 layers, 32 heads, intermediate 8192, vocab 32064, rope_theta
-- 10000, rms_norm_eps 1e-5, sliding_window 2047, dropouts 0.0, untied head).
-- Published parameter count: 3,821,079,552 (keras-hub's phi3 preset).
return phi3 {
  name = "Phi-3-mini-4k-instruct",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/phi-3-mini-4k-config.json)
  checkpoint_dtype = "bf16",
  hidden = 3072,
  layers = 32,
  heads = 32,
  intermediate = 8192,
  vocab = 32064,
  max_positions = 4096,
  norm_eps = 1e-5,
  sliding_window = 2047,
}
