-- T5-Large (Raffel et al. 2020, JMLR 21(140)). Config: HF t5-large
-- config.json (model_type t5): 24 encoder and 24 decoder blocks of 1024,
-- 16 heads of 64, a ReLU feed-forward of 4096, vocabulary 32128, one
-- embedding shared by the encoder, the decoder and the head. Published
-- parameter count: 737,668,096 (keras-hub's t5_large preset; DeepSpeed's
-- memory.rst prints 737.67M).
return t5 {
  name = "T5-Large",
  hidden = 1024,
  layers = 24,
  heads = 16,
  head_dim = 64,
  intermediate = 4096,
  vocab = 32128,
  dropout = 0.1,
  feed_forward = "relu",
  tie_embeddings = true,
}
