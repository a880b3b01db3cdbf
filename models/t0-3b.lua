-- T0 3B (Sanh et al. 2022, "Multitask Prompted Training Enables Zero-Shot
-- Task Generalization", ICLR), fine-tuned from the LM-adapted T5 v1.1 XL.
-- Config: HF bigscience/T0_3B config.json (model_type t5): 24 encoder and 24
-- decoder blocks of 2048, 32 heads of 64, a gated-GELU feed-forward of 5120,
-- vocabulary 32128, an untied head. Published parameter count: 2,849,757,184
-- (keras-hub's t5_1.1_xl preset, the same architecture); DeepSpeed's
-- estimator, counting T5Model without the head, prints 2783M.
return t5 {
  name = "T0-3B",
  -- the checkpoint's weights: config.json torch_dtype float32 (tests/fixtures/t0_3b-config.json)
  checkpoint_dtype = "fp32",
  hidden = 2048,
  layers = 24,
  heads = 32,
  head_dim = 64,
  intermediate = 5120,
  vocab = 32128,
  dropout = 0.1,
  feed_forward = "gated-gelu",
  tie_embeddings = false,
}
