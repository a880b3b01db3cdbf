-- SmolLM2-1.7B (Hugging Face 2024). Config: HF HuggingFaceTB/SmolLM2-1.7B config.json
-- (LlamaForCausalLM: hidden 2048, 24 layers, 32 heads over 32 key/value heads,
-- intermediate 8192, vocab 49152, head tied to the embeddings). Parameter
-- count: 1,711,376,384 (its source: tests/reference/models.json).
return llama {
  name = "SmolLM2-1.7B",
  hidden = 2048,
  layers = 24,
  heads = 32,
  kv_heads = 32,
  intermediate = 8192,
  vocab = 49152,
  max_positions = 8192,
  rope_theta = 130000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
