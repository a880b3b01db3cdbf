-- Micro-batch by sequence length for a LoRA fine-tune of Llama-3-8B on a
-- 24 GB card, keeping the combinations of at most 64k tokens a micro-batch
-- (longer ones are not worth evaluating on such a card).
return sweep {
  model = "llama3-8b",
  recipe = "lora-q-v-checkpointed",
  gpu = "rtx4090",
  vary = {
    micro_batch = { 1, 2, 4, 8, 16 },
    seq_len = { 512, 1024, 2048, 4096, 8192 },
  },
  order = { "micro_batch", "seq_len" },
  where = function(v) return v.micro_batch * v.seq_len <= 65536 end,
}
