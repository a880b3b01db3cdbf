-- LLaMA 65B (Touvron et al. 2023, arXiv:2302.13971, Table 2: dimension
-- 8192, 64 heads, 80 layers): the model of QLoRA's headline (Dettmers et
-- al. 2023: "finetune a 65B parameter model on a single 48GB GPU"). HF
-- config (huggyllama/llama-65b): intermediate 22016, vocabulary 32000,
-- rms_norm_eps 1e-6, 2048 positions.
return llama {
  name = "LLaMA-65B",
  hidden = 8192,
  layers = 80,
  heads = 64,
  intermediate = 22016,
  vocab = 32000,
  max_positions = 2048,
  norm_eps = 1e-6,
}
