-- Llama 3.2 1B (Meta 2024). Config: HF meta-llama/Llama-3.2-1B config.json
-- (LlamaForCausalLM: hidden 2048, 16 layers, 32 query heads of 64 over 8
-- key/value heads, intermediate 8192, vocab 128256, rope_theta 500000 with
-- llama3 rope scaling (inverse frequencies only: nothing to allocate),
-- rms_norm_eps 1e-5, head tied to the embeddings). Its checkpoint holds
-- 1,235,814,400 parameters.
return llama {
  name = "Llama-3.2-1B",
  -- the checkpoint's weights: config.json torch_dtype bfloat16 (tests/fixtures/llama3.2-1b-config.json)
  checkpoint_dtype = "bf16",
  hidden = 2048,
  layers = 16,
  heads = 32,
  kv_heads = 8,
  head_dim = 64,
  intermediate = 8192,
  vocab = 128256,
  max_positions = 131072,
  rope_theta = 500000.0,
  norm_eps = 1e-5,
  tie_embeddings = true,
}
