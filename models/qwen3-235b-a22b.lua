-- Qwen3-235B-A22B (Qwen Team 2025). Config: HF Qwen/Qwen3-235B-A22B
-- config.json (Qwen3MoeForCausalLM: hidden 4096, 94 layers, 64 heads of
-- 128 over 4 key/value heads, 128 experts of 1536, 8 a token, vocab
-- 151936, untied head). Parameter count: 235,093,634,560 (its source:
-- tests/reference/models.json).
return llama {
  name = "Qwen3-235B-A22B",
  hidden = 4096,
  layers = 94,
  heads = 64,
  kv_heads = 4,
  head_dim = 128,
  intermediate = 12288,
  vocab = 151936,
  max_positions = 40960,
  rope_theta = 1000000.0,
  norm_eps = 1e-6,
  qk_norm = true,
  experts = 128,
  experts_per_token = 8,
  moe_intermediate = 1536,
  norm_topk = true,
  expert_names = "proj",
  mistral_mask = true, -- Qwen's models are MistralModel's
  peft_lora_defaults = false, -- PEFT has no default LoRA targets for its model_type
}
