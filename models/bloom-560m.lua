-- BLOOM-560m (BigScience 2022, arXiv:2211.05100). Config: HF
-- bigscience/bloom-560m config.json (model_type bloom): 24 layers of 1024,
-- 16 heads, vocabulary 250880, ALiBi, a tied head. Published parameter
-- count (its model card): 559,214,592.
return bloom {
  name = "BLOOM-560m",
  hidden = 1024,
  layers = 24,
  heads = 16,
  vocab = 250880,
  norm_eps = 1e-5,
}
