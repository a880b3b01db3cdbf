-- BERT-large, uncased (Devlin et al. 2019; HF google-bert/bert-large-uncased
-- config.json: 24 layers, hidden 1024, 16 heads, intermediate 4096, vocab
-- 30522, 512 positions), with a two-label classification head: the model
-- of Hugging Face's single-GPU training measurements (perf_train_gpu_one).
return bert {
  name = "bert-large-uncased",
  hidden = 1024,
  layers = 24,
  heads = 16,
  intermediate = 4096,
  vocab = 30522,
  max_positions = 512,
  labels = 2,
}
