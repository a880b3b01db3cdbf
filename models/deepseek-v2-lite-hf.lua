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
return deepseek_v2_hf {
  name = "DeepSeek-V2-Lite (transformers)",
  hidden = 2048,
  layers = 27,
  heads = 16,
  kv_heads = 16,
  intermediate = 10944,
  vocab = 102400,
  max_positions = 163840,
  norm_eps = 1e-6,
  experts = 64,
  experts_per_token = 6,
  moe_intermediate = 1408,
  shared_intermediate = 2816,
  dense_layers = 1,
  q_lora_rank = 0,
  kv_lora_rank = 512,
  qk_nope_head_dim = 128,
  qk_rope_head_dim = 64,
  v_head_dim = 128,
}
