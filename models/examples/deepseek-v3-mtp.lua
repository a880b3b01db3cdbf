-- DeepSeek-V3 with its multi-token prediction module (models/examples/
-- arch/deepseek_v3_mtp.lua: the MTP module as a branch whose combining step
-- is a Lua block with a second input). Config: HF deepseek-ai/DeepSeek-V3
-- config.json, as models/deepseek-v3.lua, with num_nextn_predict_layers 1.
-- Published (README.md of deepseek-ai/DeepSeek-V3): "The total size of
-- DeepSeek-V3 models on Hugging Face is 685B, which includes 671B of the
-- Main Model weights and 14B of the Multi-Token Prediction (MTP) Module
-- weights"; README_WEIGHTS.md: "MTP Modules: 11.5B unique parameters,
-- excluding the shared 0.9B Embedding and 0.9B output Head".
-- What this model counts (tests/lua/mtp_spec.lua sums it apart from the
-- engine): the main model 671,026,419,200 (the built-in deepseek-v3's
-- count) plus the MTP module's own 11,534,173,952 = enorm and hnorm
-- (2 x 7,168), eh_proj (14,336 x 7,168 = 102,760,448), one decoder layer
-- with routed experts (11,431,383,808: MLA 187,107,328, 256 experts of
-- 3 x 7,168 x 2,048 and one shared, the router 1,835,008 with its 256
-- correction biases, two norms) and shared_head.norm (7,168): 11.53B,
-- the published 11.5B. The embedding and head it shares (926,679,040
-- each, the published 0.9B) are the main model's and counted once; with
-- them the module is 13,387,531,008 (13.4B), which the checkpoint stores
-- (model.layers.61.embed_tokens, shared_head.head) and the README's "14B"
-- (685B - 671B, both rounded) counts.
return deepseek_v3_mtp {
  name = "DeepSeek-V3 with MTP",
  hidden = 7168,
  layers = 61,
  heads = 128,
  intermediate = 18432,
  vocab = 129280,
  max_positions = 163840,
  norm_eps = 1e-6,
  experts = 256,
  experts_per_token = 8,
  moe_intermediate = 2048,
  shared_intermediate = 2048,
  dense_layers = 3,
  expert_groups = 8,
  topk_groups = 4,
  q_lora_rank = 1536,
  kv_lora_rank = 512,
  qk_nope_head_dim = 128,
  qk_rope_head_dim = 64,
  v_head_dim = 128,
  mtp_depth = 1,
}
