-- Full training in bf16 mixed precision with AdamW, the recipe of most LLM
-- pre-training and full fine-tuning: a bf16 model and gradients, fp32 master
-- weights and Adam states (Megatron-LM, DeepSpeed), fused AdamW, SDPA
-- attention (flash kernel), no activation checkpointing, 4k tokens.
return recipe {
  precision = "mixed-bf16",
  optimizer = "adamw",
  optimizer_impl = "fused",
  micro_batch = 1,
  seq_len = 4096,
  checkpointing = "none",
  attention = "sdpa",
}
