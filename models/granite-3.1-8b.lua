-- Granite 3.1 8B (IBM, 2024). Config: HF ibm-granite/granite-3.1-8b-instruct
-- config.json (GraniteForCausalLM: hidden 4096, 40 layers, 32 query heads
-- over 8 key/value heads, intermediate 12800, vocab 49155, rope_theta 1e7,
-- rms_norm_eps 1e-5, tied head; embedding_multiplier 12, residual_multiplier
-- 0.22, logits_scaling 16, attention_multiplier 1/128). Its parameters:
-- 8,170,848,256 (the fields' arithmetic; the model card's "8B").
return granite {
  name = "granite-3.1-8b-instruct",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/granite-3.1-8b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4096,
  layers = 40,
  heads = 32,
  kv_heads = 8,
  intermediate = 12800,
  vocab = 49155,
  max_positions = 131072,
  rope_theta = 10000000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
