-- QLoRA as its paper trains Guanaco (Dettmers et al. 2023; the qlora
-- repository's finetune_guanaco_65b.sh): the base in NF4 with double
-- quantization and bf16 compute, r = 64 / alpha 16 adapters on every
-- linear layer, paged AdamW with 32-bit states, gradient checkpointing,
-- one sequence of 512 + 16 tokens per step, under the Trainer's bf16=True
-- autocast (the script's --bf16; accelerate hands back the outputs in fp32),
-- whose qlora.py casts the LoRA layers to bf16 after get_peft_model
-- (lora_dtype base). With llama-65b it is the paper's headline: a 65B model
-- fine-tuned on one 48 GB GPU.
return recipe {
  precision = "bf16-autocast",
  outputs_fp32 = true,
  finetune = "qlora",
  quant = "nf4",
  double_quant = true,
  compute_dtype = "bf16",
  lora_dtype = "base",
  lora_rank = 64,
  lora_alpha = 16,
  lora_dropout = 0.05,
  lora_targets = "all-linear",
  optimizer = "paged-adamw-32bit",
  micro_batch = 1,
  seq_len = 528,
  checkpointing = "full",
}
