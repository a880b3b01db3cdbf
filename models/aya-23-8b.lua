-- Aya 23 8B (Cohere For AI 2024, CohereForAI/aya-23-8B). Config: HF
-- CohereForAI/aya-23-8B config.json (model_type cohere: hidden_size 4096,
-- 32 layers, 32 heads, 8 key/value heads, intermediate_size 14336,
-- vocab_size 256000, max_position_embeddings 8192, rope_theta 10000,
-- logit_scale 0.125, use_qk_norm false, the head tied); the model card:
-- 8 billion parameters.
return cohere {
  name = "aya-23-8b",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 256000,
  max_positions = 8192,
}
