-- BLOOMZ-7b1 (Muennighoff et al. 2022, arXiv:2211.01786): BLOOM-7b1
-- (BigScience 2022, arXiv:2211.05100) fine-tuned on xP3; the same network.
-- Config: HF bigscience/bloomz-7b1 config.json (model_type bloom): 30 layers
-- of 4096, 32 heads, vocabulary 250880, ALiBi, a tied head. Published
-- parameter count (the bloom-7b1 model card): 7,069,016,064.
return bloom {
  name = "BLOOMZ-7b1",
  hidden = 4096,
  layers = 30,
  heads = 32,
  vocab = 250880,
  norm_eps = 1e-5,
}
