-- A scaling study: LLaMA-style decoders from 2k to 8k wide and 16 to 64
-- layers deep, heads of 128 and an MLP of 8/3 the width (rounded up to a
-- multiple of 256, as Llama's own sizes are), trained in bf16 with AdamW and
-- full checkpointing on one H100. The width varies slowest.
return sweep {
  model = "llama2-7b",
  recipe = { precision = "amp-bf16", optimizer = "adamw", seq_len = 2048, checkpointing = "full" },
  gpu = "h100-80gb",
  vary = {
    hidden = { 2048, 3072, 4096, 5120, 6144, 8192 },
    layers = { 16, 24, 32, 48, 64 },
    heads = function(v) return v.hidden // 128 end,
    kv_heads = function(v) return v.hidden // 128 end,
    intermediate = function(v) return (v.hidden * 8 // 3 + 255) // 256 * 256 end,
  },
  order = { "hidden", "layers" },
}
