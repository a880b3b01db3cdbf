-- mT0-XXL (Muennighoff et al. 2023, "Crosslingual Generalization through
-- Multitask Finetuning", ACL), fine-tuned from mT5-XXL (Xue et al. 2021).
-- Config: HF bigscience/mt0-xxl config.json (model_type mt5): 24 encoder and
-- 24 decoder blocks of 4096, 64 heads of 64, a gated-GELU feed-forward of
-- 10240, vocabulary 250112, an untied head. Published parameter count: 13B
-- (the model card's table); vramplan counts 12,921,057,280.
return t5 {
  name = "mT0-XXL",
  -- the checkpoint's weights: config.json torch_dtype float32 (tests/fixtures/mt0-xxl-config.json)
  checkpoint_dtype = "fp32",
  hidden = 4096,
  layers = 24,
  heads = 64,
  head_dim = 64,
  intermediate = 10240,
  vocab = 250112,
  dropout = 0.1,
  feed_forward = "gated-gelu",
  tie_embeddings = false,
}
