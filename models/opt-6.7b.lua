-- OPT-6.7B (Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language
-- Models", arXiv:2205.01068). Config: HF facebook/opt-6.7b config.json
-- (OPTForCausalLM: hidden 4096, 32 layers, 32 heads, ffn_dim 16384, vocab
-- 50272, 2048 positions (a table of 2050 rows), ReLU, dropout 0.1,
-- do_layer_norm_before, tied head). Parameter count: 6,658,473,984 (PEFT's
-- examples/int8_training/Finetune_opt_bnb_peft.ipynb prints "all params:
-- 6666862592" with 8,388,608 of LoRA's r 16 on q_proj and v_proj).
return opt {
  name = "opt-6.7b",
  hidden = 4096,
  layers = 32,
  heads = 32,
  intermediate = 16384,
  vocab = 50272,
  max_positions = 2048,
}
