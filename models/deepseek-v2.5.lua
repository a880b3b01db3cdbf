-- DeepSeek-V2.5 (DeepSeek-AI 2024, deepseek-ai/DeepSeek-V2.5: DeepSeek-V2-Chat
-- and DeepSeek-Coder-V2-Instruct merged). Config: HF deepseek-ai/DeepSeek-V2.5
-- config.json (read 2026-12-03 in huggingface.co/nm-testing/DeepSeek-V2.5-
-- W4A16/blob/main/config.json, a copy of the snapshot 24b08cb7 of
-- deepseek-ai/DeepSeek-V2.5 as its _name_or_path says; model_type
-- deepseek_v2): DeepSeek-V2's shape exactly (models/deepseek-v2.lua: 60
-- layers of hidden 5120, 128 heads of multi-head latent attention with
-- ranks 1536 and 512, one dense layer of 12288, 160 routed experts of 1536,
-- 6 per token within 3 of 8 groups, routed_scaling_factor 16, 2 shared
-- experts, vocabulary 102400). Only the yarn rope_scaling's mscale and
-- mscale_all_dim differ (1.0, V2's 0.707): values, no memory. Published:
-- "236B" (the Hugging Face collection deepseek-ai/deepseek-v25, read
-- 2026-12-03, from the checkpoint's safetensors); the shapes sum to
-- 235,741,434,880, V2's count (tests).
local fields = fields_of "deepseek-v2"
fields.name = "DeepSeek-V2.5"
return deepseek_v2(fields)
