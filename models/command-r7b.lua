-- Command R7B (Cohere For AI 2024, CohereForAI/c4ai-command-r7b-12-2024,
-- CohereLabs/c4ai-command-r7b-12-2024 since the organisation's rename).
-- Shapes: the model's module
-- printout (Cohere2ForCausalLM: Embedding(256000, 4096), 32
-- Cohere2DecoderLayers, q_proj and o_proj 4096 x 4096, k_proj and v_proj
-- 4096 -> 1024, gate/up/down 4096 <-> 14336, the head tied), 32 heads of
-- 128, model_type cohere2 with sliding_window 4096 and
-- sliding_window_pattern 4 (three sliding layers with rotary, then a global
-- one without); "Model Size: 7 billion parameters" on the card, 8.03 B
-- counted. rope_theta (50000), max_position_embeddings and logit_scale only
-- change values.
return cohere {
  name = "command-r7b",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 256000,
  rope_theta = 50000.0,
  sliding_window = 4096,
  sliding_pattern = 4,
}
