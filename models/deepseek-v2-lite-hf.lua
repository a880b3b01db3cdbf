-- DeepSeek-V2-Lite as transformers' own DeepseekV2ForCausalLM runs it
-- (transformers 4.54+, modelled as 4.56-4.57 run it: src/transformers/models/
-- deepseek_v2/modeling_deepseek_v2.py at commit
-- 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d), the route that trains in bf16
-- and under autocast; deepseek-v2-lite is the same checkpoint under DeepSeek's
-- own modeling_deepseek.py (trust_remote_code), which trains in fp32 only
-- (also deepseek-ai/DeepSeek-V2-Lite-Chat, the same shape, as there).
-- The same configuration (deepseek-ai/DeepSeek-V2-Lite config.json) and
-- parameters (15,706,484,224; tests); what differs is the code: one complex64
-- rotary table for the model, apply_rotary_emb's complex product, torch.cat
-- of the query and key states, DeepseekV2MoE sorting the assignments by
-- expert behind a gate without the auxiliary loss, masking_utils' causal
-- mask and ForCausalLMLoss (vramplan.presets: deepseek_v2_hf).
local fields = fields_of "deepseek-v2-lite"
fields.name = "DeepSeek-V2-Lite (transformers)"
return deepseek_v2_hf(fields)
