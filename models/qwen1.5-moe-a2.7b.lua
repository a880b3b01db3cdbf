-- Qwen1.5-MoE-A2.7B (Qwen team 2024, qwenlm.github.io/blog/qwen-moe).
-- Config: HF Qwen/Qwen1.5-MoE-A2.7B config.json (Qwen2MoeForCausalLM): 60
-- fine-grained experts of width 1408, four per token, beside a shared
-- expert of width 5632 behind a sigmoid gate; biases on q/k/v. Published:
-- "14.3B parameters in total and 2.7B activated" (model card).
return llama {
  name = "Qwen1.5-MoE-A2.7B",
  hidden = 2048,
  layers = 24,
  heads = 16,
  kv_heads = 16,
  intermediate = 5632,
  vocab = 151936,
  max_positions = 8192,
  rope_theta = 1000000.0,
  norm_eps = 1e-6,
  qkv_bias = true,
  experts = 60,
  experts_per_token = 4,
  moe_intermediate = 1408,
  shared_intermediate = 5632,
  norm_topk = false,
  expert_names = "proj",
  mistral_mask = true, -- Qwen's models are MistralModel's
  peft_lora_defaults = false, -- PEFT has no default LoRA targets for its model_type
}
