-- Phi-3-medium-4k (Microsoft 2024). Config: HF
-- microsoft/Phi-3-medium-4k-instruct config.json (Phi3ForCausalLM: hidden
-- 5120, 40 layers, 40 heads over 10 key/value heads, intermediate 17920,
-- vocab 32064, sliding_window 2047, untied head). Parameter count:
-- 13,960,238,080 (its source: tests/reference/models.json).
return phi3 {
  name = "Phi-3-medium-4k-instruct",
  -- the checkpoint's weights: microsoft/Phi-3-medium-4k-instruct's config.json torch_dtype bfloat16 (as
  -- ThanatosShinji/onnx-tool's onnx_tool/llm.py copies it)
  checkpoint_dtype = "bf16",
  hidden = 5120,
  layers = 40,
  heads = 40,
  kv_heads = 10,
  intermediate = 17920,
  vocab = 32064,
  max_positions = 4096,
  norm_eps = 1e-5,
  sliding_window = 2047,
}
