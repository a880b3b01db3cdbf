-- A memory-lean full fine-tune: the model, gradients and AdamW states all in
-- bf16 (no fp32 master copy), flash attention, every layer checkpointed.
return recipe {
  precision = "bf16",
  optimizer = "adamw",
  optimizer_impl = "fused",
  micro_batch = 1,
  seq_len = 4096,
  checkpointing = "full",
  attention = "flash",
}
