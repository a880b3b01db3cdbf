-- Meta Llama 3 8B (Meta, April 2024: a model card, no paper of its own).
-- Config: HF meta-llama/Meta-Llama-3-8B config.json. Published parameter
-- count: 8,030,261,248.
return llama {
  name = "Meta-Llama-3-8B",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 128256,
  max_positions = 8192,
  rope_theta = 500000.0,
  norm_eps = 1e-5,
}
