-- Pythia-1B (Biderman et al. 2023, arXiv:2304.01373). Config: HF
-- EleutherAI/pythia-1b config.json (GPTNeoXForCausalLM: hidden 2048, 16
-- layers, 8 heads, intermediate 8192, vocab 50304, rotary_pct 0.25,
-- parallel residual, untied embed_out). Parameter count: 1,011,781,632
-- (the paper's Table 1, total parameters).
return gpt_neox {
  name = "pythia-1b",
  -- the checkpoint's weights: config.json torch_dtype float16 (tests/fixtures/pythia-1b-config.json)
  checkpoint_dtype = "fp16",
  hidden = 2048,
  layers = 16,
  heads = 8,
  intermediate = 8192,
  vocab = 50304,
}
