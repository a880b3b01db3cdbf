-- GPT-2 XL (Radford et al. 2019, "Language Models are Unsupervised
-- Multitask Learners"). Config: HF openai-community/gpt2-xl config.json.
-- Published parameter count: 1,557,611,200 (the tied embedding counted once;
-- the paper's Table 2 says 1542M).
return gpt2 {
  name = "GPT-2 XL",
  hidden = 1600,
  layers = 48,
  heads = 25,
  vocab = 50257,
  max_positions = 1024,
}
