-- Mistral 7B v0.1 (Jiang et al. 2023, arXiv:2310.06825). Config: HF
-- mistralai/Mistral-7B-v0.1 config.json (MistralForCausalLM, the same
-- modules as LlamaForCausalLM, MistralModel's mask). Its sliding_window of
-- 4096 limits which keys a query sees; below it nothing changes, at 4096
-- tokens and more transformers hands SDPA the 4-D mask, which SDPA's
-- memory-efficient kernel keeps per layer. Published parameter count:
-- 7,241,732,096.
return mistral {
  name = "Mistral-7B-v0.1",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 32000,
  max_positions = 32768,
  norm_eps = 1e-5,
  sliding_window = 4096,
}
