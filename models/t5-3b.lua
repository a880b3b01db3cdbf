-- T5-3B (Raffel et al. 2020, JMLR 21(140)). Config: HF t5-3b config.json
-- (model_type t5): 24 encoder and 24 decoder blocks of 1024, 32 heads of
-- 128 (4096 wide, wider than the model), a ReLU feed-forward of 16384,
-- vocabulary 32128, a tied head. Published parameter count: 2851M
-- (DeepSpeed's estimator output for t5-3b in its memory.rst); vramplan
-- counts 2,851,598,336.
return t5 {
  name = "T5-3B",
  hidden = 1024,
  layers = 24,
  heads = 32,
  head_dim = 128,
  intermediate = 16384,
  vocab = 32128,
  dropout = 0.1,
  feed_forward = "relu",
  tie_embeddings = true,
}
