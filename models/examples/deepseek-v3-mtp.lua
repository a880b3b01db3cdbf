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
-- engine): the main model's 671,026,404,352 (the built-in deepseek-v3's)
-- plus the MTP module's own 11,610,067,968 = enorm and hnorm (2 x 7,168),
-- eh_proj (14,336 x 7,168 = 102,760,448), one decoder layer with routed
-- experts (11,507,286,016: MLA 187,107,328, 256 experts of
-- 3 x 7,168 x 2,048 and one shared, the router's 1,835,008, two norms; the
-- router's 256 correction biases are a buffer) and shared_head.norm
-- (7,168): 682,636,472,320 in all. Against the published: 11.61B for
-- "11.5B unique" (+1.0 %; without eh_proj 11,507,307,520 would be 11.5B);
-- the embedding and head it shares (926,679,040 each, the published 0.9B)
-- are the main model's and counted once; with the copies the checkpoint
-- stores (model.layers.61.embed_tokens, shared_head.head) the module is
-- 13,463,426,048 (the README's "14B" is 685B - 671B, both rounded) and the
-- checkpoint 684,489,830,400 (published "685B", -0.07 %).
local fields = fields_of "deepseek-v3"
fields.name = "DeepSeek-V3 with MTP"
fields.kv_heads = nil -- (deepseek_v3_mtp has no kv_heads field: latent attention's heads are its own)
fields.mtp_depth = 1
return deepseek_v3_mtp(fields)
