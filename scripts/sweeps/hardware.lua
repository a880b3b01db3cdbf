-- A hardware comparison: LoRA on Llama-2-7B at growing micro-batches, on
-- every GPU of the catalog (hardware/gpus/). The GPU varies slowest: the
-- rows of one card are together.
return sweep {
  model = "llama2-7b",
  recipe = "lora-q-v-checkpointed",
  gpu = catalog.gpus,
  vary = { micro_batch = { 1, 2, 4, 8, 16 } },
}
