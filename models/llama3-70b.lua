-- Meta Llama 3 70B (Meta, April 2024: a model card, no paper of its own).
-- Config: HF meta-llama/Meta-Llama-3-70B config.json. Published parameter
-- count: 70,553,706,496.
return llama {
  name = "Meta-Llama-3-70B",
  hidden = 8192,
  layers = 80,
  heads = 64,
  kv_heads = 8,
  intermediate = 28672,
  vocab = 128256,
  max_positions = 8192,
  rope_theta = 500000.0,
  norm_eps = 1e-5,
}
