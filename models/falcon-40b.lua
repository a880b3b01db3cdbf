-- Falcon-40B (TII 2023, tiiuae/falcon-40b). Config: HF tiiuae/falcon-40b
-- config.json (model_type falcon: hidden_size 8192, 60 layers, 128 heads,
-- new_decoder_architecture with 8 key/value groups (num_kv_heads), so
-- ln_attn and ln_mlp, parallel_attn, alibi false, bias false, vocab_size
-- 65024); the model card's table: 60 layers, d_model 8192, head_dim 64,
-- vocabulary 65024, sequence length 2048.
return falcon {
  name = "falcon-40b",
  hidden = 8192,
  layers = 60,
  heads = 128,
  new_decoder_architecture = true,
  kv_heads = 8,
  vocab = 65024,
  max_positions = 2048,
}
