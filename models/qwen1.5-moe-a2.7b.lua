-- Qwen1.5-MoE-A2.7B (Qwen team 2024, qwenlm.github.io/blog/qwen-moe).
-- Config: HF Qwen/Qwen1.5-MoE-A2.7B config.json (Qwen2MoeForCausalLM): 60
-- fine-grained experts of width 1408, four per token, beside a shared
-- expert of width 5632 behind a sigmoid gate; biases on q/k/v. Published:
-- "14.3B parameters in total and 2.7B activated" (model card).
return qwen2_moe {
  name = "Qwen1.5-MoE-A2.7B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/qwen1.5-moe-a2.7b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 24,
  heads = 16,
  kv_heads = 16,
  intermediate = 5632,
  vocab = 151936,
  max_positions = 8192,
  norm_eps = 1e-6,
}
