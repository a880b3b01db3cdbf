-- Mixtral 8x7B v0.1 (Jiang et al. 2024, arXiv:2401.04088). Config: HF
-- mistralai/Mixtral-8x7B-v0.1 config.json (MixtralForCausalLM): Mistral 7B's
-- attention with eight SwiGLU experts of width 14336 per layer, two per
-- token. Published parameter count: 46,702,792,704 (the HF safetensors
-- total of mistralai/Mixtral-8x7B-v0.1).
return mixtral {
  name = "Mixtral-8x7B-v0.1",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/mixtral-8x7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 32000,
  max_positions = 32768,
  rope_theta = 1000000.0,
  norm_eps = 1e-5,
}
