-- SmolLM2-360M (Hugging Face 2024). Config: HF HuggingFaceTB/SmolLM2-360M config.json
-- (LlamaForCausalLM: hidden 960, 32 layers, 15 heads over 5 key/value heads,
-- intermediate 2560, vocab 49152, head tied to the embeddings). Parameter
-- count: 361,821,120 (its source: tests/reference/models.json).
return llama {
  name = "SmolLM2-360M",
  hidden = 960,
  layers = 32,
  heads = 15,
  kv_heads = 5,
  intermediate = 2560,
  vocab = 49152,
  max_positions = 8192,
  rope_theta = 100000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
