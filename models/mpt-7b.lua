-- MPT-7B (MosaicML 2023, "Introducing MPT-7B", mosaicml/mpt-7b). Config:
-- HF mosaicml/mpt-7b config.json (model_type mpt; its model card's table:
-- d_model 4096, 32 layers, 32 heads, vocabulary 50432, sequence length
-- 2048; attn_pdrop 0, clip_qkv null, use_cache false). Parameters:
-- 6,649,286,656 (the card rounds them to 6.7B).
return mpt {
  name = "mpt-7b",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/mpt-7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4096,
  layers = 32,
  heads = 32,
  vocab = 50432,
  max_positions = 2048,
}
