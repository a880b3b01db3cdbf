-- Pythia-6.9B (Biderman et al. 2023, arXiv:2304.01373). Config: HF
-- EleutherAI/pythia-6.9b config.json (GPTNeoXForCausalLM: hidden 4096, 32
-- layers, 32 heads, intermediate 16384, vocab 50432, rotary_pct 0.25,
-- parallel residual, untied embed_out). Parameter count: 6,857,302,016
-- (the paper's Table 1, total parameters).
return gpt_neox {
  name = "pythia-6.9b",
  hidden = 4096,
  layers = 32,
  heads = 32,
  intermediate = 16384,
  vocab = 50432,
}
