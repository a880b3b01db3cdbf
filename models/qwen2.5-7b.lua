-- Qwen2.5-7B (Qwen Team 2024, arXiv:2412.15115). Config: HF Qwen/Qwen2.5-7B
-- config.json (model_type qwen2): LLaMA's layout with biases on the q, k
-- and v projections, 28 query and 4 key/value heads, an untied head.
-- Published parameter count: 7,615,616,512 (the checkpoint's total, as GGUF
-- metadata records it; the model card rounds it to 7.61B).
return qwen2 {
  name = "Qwen2.5-7B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/qwen2.5-7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 3584,
  layers = 28,
  heads = 28,
  kv_heads = 4,
  intermediate = 18944,
  vocab = 152064,
  max_positions = 131072,
  norm_eps = 1e-6,
}
