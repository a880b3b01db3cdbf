-- GPT-2 small (Radford et al. 2019, "Language Models are Unsupervised
-- Multitask Learners"). Config: HF openai-community/gpt2 config.json.
-- Published parameter count: 124,439,808 (the tied embedding counted once;
-- the paper's Table 2 says 117M).
return gpt2 {
  name = "GPT-2",
  -- the checkpoint's weights: its config.json names no torch_dtype, so
  -- from_pretrained's dtype "auto" takes the first floating weight's, fp32
  -- (model.safetensors: 548 MB for 124.4 M parameters, 4 bytes each)
  checkpoint_dtype = "fp32",
  hidden = 768,
  layers = 12,
  heads = 12,
  vocab = 50257,
  max_positions = 1024,
}
