-- GPT-J-6B (Wang and Komatsuzaki 2021, EleutherAI). Config: HF
-- EleutherAI/gpt-j-6b config.json (GPTJForCausalLM: n_embd 4096, n_layer
-- 28, n_head 16, rotary_dim 64, vocab_size 50400, n_positions 2048,
-- gelu_new, untied lm_head with a bias). Parameters: 6,050,882,784, the
-- sum of GPTJForCausalLM's module shapes. The model card's "Number of
-- parameters", 6,053,381,344, is mesh-transformer-jax's count over its 8
-- model-parallel shards (configs/6B_roto_256.json: cores_per_replica 8;
-- transformer_shard.py, CausalTransformer: hk.data_structures.tree_size of
-- the params, which carry the "shard" axis; layers.py at commit 02850c46):
-- every shard holds its own ReplicatedLayerNorm scale and offset (28 ln_1
-- and the projection's ln_f), its own full-width dense_proj_o (fc_out)
-- bias and its own EmbeddingShard bias (hk.Linear(d_model)). That counts
-- 7 more copies of 2 x 4096 per norm (29 norms) and of 4096 per fc_out
-- bias (28), and 8 x 4096 of embedding biases HF has no module for:
-- 4096 x (7 x 2 x 29 + 7 x 28 + 8) = 4096 x 610 = 2,498,560. to_hf_weights.py
-- takes shard 0's norms, sums the 8 biases and folds the embedding's into
-- wte.weight (tests).
return gptj {
  name = "gpt-j-6b",
  hidden = 4096,
  layers = 28,
  heads = 16,
  rotary_dim = 64,
  vocab = 50400,
  max_positions = 2048,
}
