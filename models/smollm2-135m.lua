-- SmolLM2-135M (Hugging Face 2024). Config: HF HuggingFaceTB/SmolLM2-135M config.json
-- (LlamaForCausalLM: hidden 576, 30 layers, 9 heads over 3 key/value heads,
-- intermediate 1536, vocab 49152, head tied to the embeddings). Parameter
-- count: 134,515,008 (its source: tests/reference/models.json).
return llama {
  name = "SmolLM2-135M",
  hidden = 576,
  layers = 30,
  heads = 9,
  kv_heads = 3,
  intermediate = 1536,
  vocab = 49152,
  max_positions = 8192,
  rope_theta = 100000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
