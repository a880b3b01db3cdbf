-- OLMo 2 7B (Team OLMo 2024, arXiv:2501.00656). Config: HF
-- allenai/OLMo-2-1124-7B config.json (Olmo2ForCausalLM: hidden 4096, 32
-- layers, 32 heads, intermediate 11008, vocab 100352, rope_theta 500000,
-- rms_norm_eps 1e-6, untied head; the norms after each block and over the
-- whole query and key projections). Its checkpoint holds 7,298,617,344
-- parameters (the Hub's safetensors total).
return olmo2 {
  name = "OLMo-2-1124-7B",
  -- the checkpoint's weights: config.json torch_dtype float32 (tests/fixtures/olmo-2-7b-config.json)
  checkpoint_dtype = "fp32",
  hidden = 4096,
  layers = 32,
  heads = 32,
  intermediate = 11008,
  vocab = 100352,
  max_positions = 4096,
  norm_eps = 1e-6,
}
