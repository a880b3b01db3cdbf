-- Phi-2 (Microsoft 2023). Config: HF microsoft/phi-2 config.json
-- (PhiForCausalLM: hidden 2560, 32 layers, 32 heads, intermediate 10240,
-- vocab 51200, partial_rotary_factor 0.4, resid_pdrop 0.1, gelu_new,
-- untied head with a bias). Parameter count: 2,779,683,840 (the
-- checkpoint's safetensors total).
return phi {
  name = "phi-2",
  -- the checkpoint's weights: config.json torch_dtype float16 (tests/fixtures/phi-2-config.json)
  checkpoint_dtype = "fp16",
  hidden = 2560,
  layers = 32,
  heads = 32,
  intermediate = 10240,
  vocab = 51200,
  partial_rotary_factor = 0.4,
  resid_dropout = 0.1,
}
