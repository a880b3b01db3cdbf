-- Command R+ (Cohere For AI 2024, CohereForAI/c4ai-command-r-plus). Config:
-- HF CohereForAI/c4ai-command-r-plus config.json (model_type cohere:
-- hidden_size 12288, 64 layers, 96 heads, 8 key/value heads,
-- intermediate_size 33792, vocab_size 256000, max_position_embeddings
-- 8192, rope_theta 75000000, logit_scale 0.8333, use_qk_norm true, the head
-- tied); the model card: "a 104 billion parameter" model.
return cohere {
  name = "c4ai-command-r-plus",
  hidden = 12288,
  layers = 64,
  heads = 96,
  kv_heads = 8,
  intermediate = 33792,
  vocab = 256000,
  max_positions = 8192,
  rope_theta = 75000000.0,
  qk_norm = true,
}
