-- DeepSeek-V2 as transformers' own DeepseekV2ForCausalLM runs it
-- (transformers 4.54+, modelled as 4.56-4.57 run it: src/transformers/models/
-- deepseek_v2/modeling_deepseek_v2.py at commit
-- 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d), the route that trains in bf16
-- and under autocast; deepseek-v2 is the same checkpoint under DeepSeek's own
-- modeling_deepseek.py (trust_remote_code), which trains in fp32 only (also
-- deepseek-ai/DeepSeek-V2-Chat, the same shape, as there). The same
-- configuration (deepseek-ai/DeepSeek-V2 config.json: group_limited_greedy
-- over 8 groups, routed_scaling_factor 16, which changes values, not bytes)
-- and parameters (235,741,434,880; tests); the code's differences are
-- deepseek-v2-lite-hf.lua's.
local fields = fields_of "deepseek-v2"
fields.name = "DeepSeek-V2 (transformers)"
return deepseek_v2_hf(fields)
