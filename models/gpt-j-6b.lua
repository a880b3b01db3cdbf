-- GPT-J-6B (Wang and Komatsuzaki 2021, EleutherAI). Config: HF
-- EleutherAI/gpt-j-6b config.json (GPTJForCausalLM: n_embd 4096, n_layer
-- 28, n_head 16, rotary_dim 64, vocab_size 50400, n_positions 2048,
-- gelu_new, untied lm_head with a bias). Parameter count: 6,053,381,344
-- (the model card's "Number of parameters").
return gptj {
  name = "gpt-j-6b",
  hidden = 4096,
  layers = 28,
  heads = 16,
  rotary_dim = 64,
  vocab = 50400,
  max_positions = 2048,
}
