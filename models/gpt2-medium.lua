-- GPT-2 medium (Radford et al. 2019, "Language Models are Unsupervised
-- Multitask Learners"). Config: HF openai-community/gpt2-medium config.json.
-- Published parameter count: 354,823,168 (the tied embedding counted once;
-- the paper's Table 2 says 345M).
return gpt2 {
  name = "GPT-2 Medium",
  hidden = 1024,
  layers = 24,
  heads = 16,
  vocab = 50257,
  max_positions = 1024,
}
