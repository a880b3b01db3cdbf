-- What HF's Trainer does with `bf16=True`: torch.autocast(bfloat16) over an
-- fp32 model, foreach AdamW (torch's default), SDPA attention, gradient
-- checkpointing, accelerate's fp32 copy of the outputs (convert_outputs_to_fp32)
-- and the model's outputs dropped before backward.
return recipe {
  precision = "amp-bf16",
  outputs_fp32 = true,
  optimizer = "adamw",
  optimizer_impl = "foreach",
  micro_batch = 4,
  seq_len = 2048,
  checkpointing = "full",
  attention = "sdpa",
  keep_logits = false,
}
