-- Qwen2.5-0.5B (Qwen Team 2024, arXiv:2412.15115). Config: HF
-- Qwen/Qwen2.5-0.5B config.json (model_type qwen2): 24 layers of 896 with
-- 14 query and 2 key/value heads, q/k/v biases, the head tied to the
-- embedding. Published parameter count: 494,032,768 (the checkpoint's
-- total; the model card rounds it to 0.49B).
return qwen2 {
  name = "Qwen2.5-0.5B",
  hidden = 896,
  layers = 24,
  heads = 14,
  kv_heads = 2,
  intermediate = 4864,
  vocab = 151936,
  max_positions = 32768,
  norm_eps = 1e-6,
  tie_embeddings = true,
}
