-- GPT-2 large (Radford et al. 2019, "Language Models are Unsupervised
-- Multitask Learners"). Config: HF openai-community/gpt2-large config.json.
-- Published parameter count: 774,030,080 (the tied embedding counted once;
-- the paper's Table 2 says 762M).
return gpt2 {
  name = "GPT-2 Large",
  hidden = 1280,
  layers = 36,
  heads = 20,
  vocab = 50257,
  max_positions = 1024,
}
