-- BERT-base, cased (Devlin et al. 2019; HF google-bert/bert-base-cased
-- config.json: 12 layers, hidden 768, 12 heads, intermediate 3072, vocab
-- 28996, 512 positions), with a two-label classification head. The
-- encoder and pooler count 108,310,272 parameters (keras-hub's bert_base_en
-- preset); the head adds 768 x 2 + 2.
return bert {
  name = "bert-base-cased",
  hidden = 768,
  layers = 12,
  heads = 12,
  intermediate = 3072,
  vocab = 28996,
  max_positions = 512,
  labels = 2,
}
