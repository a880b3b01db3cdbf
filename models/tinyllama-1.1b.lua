-- TinyLlama-1.1B (Zhang et al. 2024, arXiv:2401.02385). Config: HF
-- TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json
-- (LlamaForCausalLM: hidden 2048, 22 layers, 32 heads over 4 key/value
-- heads, intermediate 5632, vocab 32000, untied head). Parameter count:
-- 1,100,048,384 (its source: tests/reference/models.json).
return llama {
  name = "TinyLlama-1.1B",
  hidden = 2048,
  layers = 22,
  heads = 32,
  kv_heads = 4,
  intermediate = 5632,
  vocab = 32000,
  max_positions = 2048,
  norm_eps = 1e-5,
}
