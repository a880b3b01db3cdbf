-- StarCoder2-3B (Lozhkov et al. 2024, "StarCoder 2 and The Stack v2",
-- arXiv:2402.19173). Config: HF bigcode/starcoder2-3b config.json
-- (Starcoder2ForCausalLM: hidden 3072, 30 layers, 24 heads, 2 key/value
-- heads, intermediate 12288, vocab 49152, rope_theta 999999.4420358813,
-- sliding_window 4096, use_bias, dropouts 0.1, no tie_word_embeddings key:
-- PretrainedConfig's default ties the head). Parameter count: 3,030,371,328,
-- model.num_parameters() of that config; the Hub's model page rounds its
-- safetensors total to 3.03B.
return starcoder2 {
  name = "starcoder2-3b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/starcoder2-3b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 3072,
  layers = 30,
  heads = 24,
  kv_heads = 2,
  intermediate = 12288,
  vocab = 49152,
  max_positions = 16384,
  rope_theta = 999999.4420358813,
  sliding_window = 4096,
  attn_dropout = 0.1,
  resid_dropout = 0.1,
  embed_dropout = 0.1,
}
