-- Command R (Cohere For AI 2024, CohereForAI/c4ai-command-r-v01). Config:
-- HF CohereForAI/c4ai-command-r-v01 config.json (model_type cohere:
-- hidden_size 8192, 40 layers, 64 heads, 64 key/value heads,
-- intermediate_size 22528, vocab_size 256000, max_position_embeddings
-- 8192, rope_theta 8000000, logit_scale 0.0625, use_qk_norm false, the
-- head tied); the model card: "a 35 billion parameter" model.
return cohere {
  name = "c4ai-command-r-v01",
  -- the checkpoint's weights: config.json torch_dtype float16 (tests/fixtures/c4ai-command-r-v01-config.json)
  checkpoint_dtype = "fp16",
  hidden = 8192,
  layers = 40,
  heads = 64,
  kv_heads = 64,
  intermediate = 22528,
  vocab = 256000,
  max_positions = 8192,
  rope_theta = 8000000.0,
}
