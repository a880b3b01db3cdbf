-- Qwen3-8B (Qwen Team 2025, arXiv:2505.09388). Config: HF Qwen/Qwen3-8B
-- config.json (model_type qwen3): 36 layers of 4096 with 32 query and 8
-- key/value heads of 128, an RMSNorm over every query and key head before
-- the rotary embedding, no biases, an untied head. Published parameter
-- count: 8,190,735,360 (the checkpoint's safetensors total; the model card
-- rounds it to 8.2B).
return qwen3 {
  name = "Qwen3-8B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/qwen3-8b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 4096,
  layers = 36,
  heads = 32,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 12288,
  vocab = 151936,
  max_positions = 40960,
  norm_eps = 1e-6,
}
