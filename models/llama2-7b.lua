-- Llama 2 7B (Touvron et al. 2023). Config: HF meta-llama/Llama-2-7b-hf
-- config.json. Published parameter count: 6,738,415,616.
return llama {
  name = "Llama-2-7B",
  -- the checkpoint's weights: config.json torch_dtype float16 (tests/fixtures/llama2-7b-config.json)
  checkpoint_dtype = "fp16",
  hidden = 4096,
  layers = 32,
  heads = 32,
  kv_heads = 32,
  intermediate = 11008,
  vocab = 32000,
  max_positions = 4096,
  norm_eps = 1e-5,
}
