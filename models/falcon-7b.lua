-- Falcon-7B (TII 2023, tiiuae/falcon-7b). Config: HF tiiuae/falcon-7b
-- config.json (model_type falcon: hidden_size 4544, 32 layers, 71 heads,
-- multi_query, parallel_attn, no new_decoder_architecture, alibi false,
-- bias false, vocab_size 65024); the model card's table: 32 layers,
-- d_model 4544, head_dim 64, vocabulary 65024, sequence length 2048.
return falcon {
  name = "falcon-7b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/falcon-7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4544,
  layers = 32,
  heads = 71,
  multi_query = true,
  vocab = 65024,
  max_positions = 2048,
}
