-- Mistral 7B v0.3. Config: HF mistralai/Mistral-7B-v0.3 config.json
-- (MistralForCausalLM: v0.1's layers with a 32768-word vocabulary, rope_theta
-- 1e6 and no sliding window, so MistralModel's mask never narrows).
-- Parameter count: 7,248,023,552 (its source: tests/reference/models.json).
return mistral {
  name = "Mistral-7B-v0.3",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 8,
  intermediate = 14336,
  vocab = 32768,
  max_positions = 32768,
  rope_theta = 1000000.0,
  norm_eps = 1e-5,
}
