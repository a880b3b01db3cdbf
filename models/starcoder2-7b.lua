-- StarCoder2-7B (Lozhkov et al. 2024, "StarCoder 2 and The Stack v2",
-- arXiv:2402.19173). Config: HF bigcode/starcoder2-7b config.json
-- (Starcoder2ForCausalLM: hidden 4608, 32 layers, 36 heads, 4 key/value
-- heads, intermediate 18432, vocab 49152, rope_theta 1000000,
-- sliding_window 4096, use_bias, dropouts 0.1, the head tied by
-- PretrainedConfig's default). Parameter count: 7,173,923,840,
-- model.num_parameters() of that config; the Hub's model page rounds its
-- safetensors total to 7.17B.
return starcoder2 {
  name = "starcoder2-7b",
  hidden = 4608,
  layers = 32,
  heads = 36,
  kv_heads = 4,
  intermediate = 18432,
  vocab = 49152,
  max_positions = 16384,
  rope_theta = 1000000.0,
  sliding_window = 4096,
  attn_dropout = 0.1,
  resid_dropout = 0.1,
  embed_dropout = 0.1,
}
