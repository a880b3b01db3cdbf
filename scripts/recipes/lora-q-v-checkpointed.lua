-- LoRA as most single-GPU fine-tunes of a 7B model run it: the model loaded
-- in bf16 and frozen, r = 8 adapters on q_proj and v_proj (PEFT's defaults
-- for LLaMA, kept in fp32 by PEFT), AdamW over the adapters alone, every
-- layer checkpointed, under the Trainer's bf16=True autocast (accelerate's,
-- which hands back the outputs in fp32). With llama2-7b at 4 x 512 tokens it is the
-- configuration widely reported to fit a 24 GB card (RTX 3090 / 4090).
return recipe {
  precision = "bf16-autocast",
  outputs_fp32 = true,
  finetune = "lora",
  lora_rank = 8,
  lora_alpha = 16,
  lora_dropout = 0.05,
  lora_targets = "q_proj,v_proj",
  optimizer = "adamw",
  micro_batch = 4,
  seq_len = 512,
  checkpointing = "full",
}
