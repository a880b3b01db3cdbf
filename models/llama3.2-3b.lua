-- Llama 3.2 3B (Meta 2024). Config: HF meta-llama/Llama-3.2-3B config.json
-- (LlamaForCausalLM: hidden 3072, 28 layers, 24 query heads of 128 over 8
-- key/value heads, intermediate 8192, vocab 128256, rope_theta 500000 with
-- llama3 rope scaling (inverse frequencies only: nothing to allocate),
-- rms_norm_eps 1e-5, head tied to the embeddings). Its checkpoint holds
-- 3,212,749,824 parameters.
return llama {
  name = "Llama-3.2-3B",
  -- the checkpoint's weights: meta-llama/Llama-3.2-3B's config.json torch_dtype bfloat16 (as citsjtu2020/LLM-Prof's
  -- sglang/Model_Config.md copies it)
  checkpoint_dtype = "bf16",
  hidden = 3072,
  layers = 28,
  heads = 24,
  kv_heads = 8,
  head_dim = 128,
  intermediate = 8192,
  vocab = 128256,
  max_positions = 131072,
  rope_theta = 500000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
