-- OPT-1.3B (Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language
-- Models", arXiv:2205.01068). Config: HF facebook/opt-1.3b config.json
-- (OPTForCausalLM: hidden 2048, 24 layers, 32 heads, ffn_dim 8192, vocab
-- 50272, 2048 positions (a table of 2050 rows), ReLU, dropout 0.1,
-- do_layer_norm_before, tied head). Parameter count: 1,315,758,080
-- (DeepSpeed-Chat's model-size helper, microsoft/DeepSpeedExamples:
-- "[pre-lora] num params: 1315758080").
return opt {
  name = "opt-1.3b",
  hidden = 2048,
  layers = 24,
  heads = 32,
  intermediate = 8192,
  vocab = 50272,
  max_positions = 2048,
}
