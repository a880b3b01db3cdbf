-- Mistral NeMo 12B (Mistral AI and NVIDIA, July 2024: a model card). Config:
-- HF mistralai/Mistral-Nemo-Instruct-2407 config.json (MistralForCausalLM:
-- hidden 5120, 40 layers, 32 query heads of 128 (4096 wide, beside a
-- 5120-wide model) over 8 key/value heads, intermediate 14336, vocab
-- 131072, rope_theta 1e6, rms_norm_eps 1e-5, no sliding window, untied
-- head). Its checkpoint holds 12,247,782,400 parameters.
return mistral {
  name = "Mistral-Nemo-Instruct-2407",
  hidden = 5120,
  layers = 40,
  heads = 32,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 14336,
  vocab = 131072,
  max_positions = 1024000,
  rope_theta = 1000000.0,
  norm_eps = 1e-5,
}
