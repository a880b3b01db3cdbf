-- MPT-30B (MosaicML 2023, mosaicml/mpt-30b). Config: HF mosaicml/mpt-30b
-- config.json (model_type mpt; its model card's table: d_model 7168, 48
-- layers, 64 heads, vocabulary 50432, sequence length 8192 after its
-- long-context stage; attn_pdrop 0, clip_qkv null). Parameters:
-- 29,957,200,896 (the card: 29.95B).
return mpt {
  name = "mpt-30b",
  hidden = 7168,
  layers = 48,
  heads = 64,
  vocab = 50432,
  max_positions = 8192,
}
