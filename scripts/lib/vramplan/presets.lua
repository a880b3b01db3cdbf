-- vramplan.presets — what sets each Hugging Face model type apart within
-- its architecture family, written once: the config.json importer (hf.lua)
-- starts from these values, and model scripts call the preset by its
-- model_type (`gemma2 { hidden = 3584, ... }`) instead of spelling them out.
-- Values a config or a model script gives win over these. Each preset's
-- comment says which transformers classes it describes.
local presets = {}

local function preset(family, doc, values) return { family = family, doc = doc, values = values } end

-- MistralForCausalLM: LLaMA's modules; MistralModel builds the eager mask
-- its own way and narrows it to sliding_window (null in v0.2 and later).
presets.mistral = preset("llama", "Mistral: LLaMA with MistralModel's mask", { mistral_mask = true })

-- GemmaForCausalLM (Gemma 1, CodeGemma) of transformers 4.49-4.52:
-- GemmaRMSNorm, the embeddings scaled by sqrt(hidden_size), GeLU-gated MLP,
-- tied head.
presets.gemma = preset("llama", "Gemma: Gemma's norms, scaled embeddings, GeLU MLP, tied head",
  { norm_style = "gemma", embed_scale = true, tie_embeddings = true, activation = "gelu_pytorch_tanh" })

-- Gemma2ForCausalLM (Gemma 2) of transformers 4.50-4.52: Gemma's norms,
-- normalizer and tied head, four norms a layer (before and after the
-- attention and the MLP), every other layer sliding over sliding_window
-- keys through its own copy of the mask, the attention scores and the
-- logits soft-capped (Gemma2Config's defaults: 50 and 30), head_dim 256.
presets.gemma2 = preset("llama", "Gemma 2: sandwich norms, alternating sliding layers, soft caps",
  { norm_style = "gemma", embed_scale = true, tie_embeddings = true, activation = "gelu_pytorch_tanh",
    norm_position = "sandwich", sliding_pattern = 2, sliding_window = 4096, attn_softcap = 50.0, final_softcap = 30.0,
    head_dim = 256 })

-- Gemma3ForCausalLM (model_type gemma3_text) of transformers 4.50-4.52:
-- Gemma 2's layers with one global layer in every sliding_window_pattern
-- (6), a Gemma3RMSNorm over each query and key head, a second pair of
-- rotary tables for the sliding layers, the embedding module scaling its
-- own rows, no soft caps unless the config sets them.
presets.gemma3_text = preset("llama", "Gemma 3 (text): one global layer in six, per-head q/k norms, local rotary",
  { norm_style = "gemma", tie_embeddings = true, activation = "gelu_pytorch_tanh", norm_position = "sandwich",
    sliding_pattern = 6, sliding_window = 4096, head_dim = 256, qk_norm = true, qk_norm_style = "gemma",
    local_rope = true, scaled_embedding = true, rope_theta = 1000000.0 })

-- Olmo2ForCausalLM (OLMo 2) of transformers 4.49-4.52: Olmo2RMSNorm (the
-- weight applied in fp32) after the attention and the MLP instead of
-- before them, and over the whole query and key projections.
presets.olmo2 = preset("llama", "OLMo 2: post-block norms, whole-width q/k norms",
  { norm_style = "olmo2", norm_position = "post", qk_norm = true, qk_norm_style = "olmo2", rope_theta = 500000.0,
    peft_lora_defaults = false })

-- GraniteForCausalLM (IBM Granite 3.x) of transformers 4.49-4.52: LLaMA with
-- embedding, residual and logits multipliers (new tensors).
presets.granite = preset("llama", "Granite: LLaMA with multipliers", { multipliers = true, peft_lora_defaults = false })

-- Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4): fused qkv_proj and
-- gate_up_proj, MistralModel's mask.
presets.phi3 = preset("llama", "Phi-3: fused projections, Mistral's mask",
  { fused_projections = true, mistral_mask = true, peft_lora_defaults = false })

-- Qwen2ForCausalLM (Qwen2, Qwen2.5): LLaMA with biases on q, k and v and
-- MistralModel's mask.
presets.qwen2 = preset("llama", "Qwen2: q/k/v biases, Mistral's mask",
  { qkv_bias = true, rope_theta = 1000000.0, mistral_mask = true })

-- Qwen3ForCausalLM: an RMSNorm over every query and key head before the
-- rotary embedding, no biases.
presets.qwen3 = preset("llama", "Qwen3: per-head q/k norms, Mistral's mask",
  { qk_norm = true, rope_theta = 1000000.0, mistral_mask = true })

-- PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has no entry
-- for olmo2, granite, phi3, qwen2_moe, qwen3_moe, deepseek, deepseek_v2 or deepseek_v3:
-- LoRA on those needs named targets (peft_lora_defaults = false).

-- MixtralForCausalLM: Mistral with a sparse MoE block (MixtralConfig's
-- defaults: 8 experts, 2 a token).
presets.mixtral = preset("llama", "Mixtral: Mistral with a sparse MoE block",
  { experts = 8, experts_per_token = 2, norm_topk = true, mistral_mask = true })

-- Qwen2MoeForCausalLM: biases on q/k/v only, fine-grained experts beside a
-- gated shared expert, top-k weights not renormalized (Qwen2MoeConfig's
-- defaults).
presets.qwen2_moe = preset("llama", "Qwen2-MoE: fine-grained experts and a gated shared expert",
  { experts = 60, experts_per_token = 4, moe_intermediate = 1408, shared_intermediate = 5632, norm_topk = false,
    qkv_bias = true, rope_theta = 1000000.0, expert_names = "proj", mistral_mask = true, peft_lora_defaults = false })

-- Qwen3MoeForCausalLM (transformers 4.51-4.52): Qwen3's attention and
-- Mixtral's token loop over fine-grained experts (Qwen3MoeConfig's
-- defaults).
presets.qwen3_moe = preset("llama", "Qwen3-MoE: Qwen3's attention, fine-grained experts",
  { experts = 128, experts_per_token = 8, moe_intermediate = 768, norm_topk = false, qk_norm = true,
    rope_theta = 1000000.0, expert_names = "proj", mistral_mask = true, peft_lora_defaults = false })

-- DeepSeekMoE (model_type deepseek, its own modeling code): routed experts
-- after the dense layers, the shared experts merged into one ungated MLP,
-- and its own shifted loss (DeepseekForCausalLM.forward of
-- deepseek-ai/deepseek-moe-16b-base's modeling_deepseek.py: logits.float(),
-- then logits[..., :-1, :].contiguous() and CrossEntropyLoss).
presets.deepseek = preset("llama", "DeepSeekMoE: DeepSeek's training path",
  { moe_block = "deepseek", shared_gate = false, norm_topk = false, shifted_loss = true,
    peft_lora_defaults = false })

-- DeepseekV2ForCausalLM of DeepSeek's own modeling_deepseek.py (the
-- checkpoints' auto_map, trust_remote_code): multi-head latent attention
-- with each layer's rotary caches, DeepSeekMoE's training path behind an
-- fp32 softmax gate, the sequence-wise auxiliary loss, and its own shifted
-- loss (DeepseekV2ForCausalLM.forward: logits.float(), then
-- logits[..., :-1, :].contiguous()).
presets.deepseek_v2 = preset("llama", "DeepSeek-V2: its own modeling code (MLA, DeepSeekMoE's path)",
  { moe_block = "deepseek_v2", shared_gate = false, norm_topk = false, rope_interleave = true, layer_rotary = true,
    aux_loss = true, shifted_loss = true, peft_lora_defaults = false })

-- DeepseekV2ForCausalLM of transformers itself (4.54+; modeled as 4.56-4.57
-- run it: src/transformers/models/deepseek_v2/modeling_deepseek_v2.py at
-- commit 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d): the same modules and
-- weights as DeepSeek's file, but one model-level complex64 rotary table
-- (DeepseekV2RotaryEmbedding) applied by complex multiplication, q and k
-- states joined by torch.cat, DeepseekV2MoE sorting the assignments by
-- expert (the gate always scales by routed_scaling_factor and has no
-- auxiliary loss), masking_utils' causal mask and ForCausalLMLoss: the
-- route that trains in 16-bit and under autocast.
presets.deepseek_v2_hf = preset("llama", "DeepSeek-V2 as transformers' DeepseekV2ForCausalLM (16-bit trains)",
  { moe_block = "deepseek_v2_hf", shared_gate = false, norm_topk = false, complex_rotary = true,
    masking_utils = true, peft_lora_defaults = false })

-- DeepseekV3ForCausalLM (transformers 4.51+): multi-head latent attention,
-- a sigmoid, group-limited router.
presets.deepseek_v3 = preset("llama", "DeepSeek-V3: MLA and a group-limited router",
  { moe_block = "deepseek_v3", shared_gate = false, norm_topk = true, rope_interleave = true,
    peft_lora_defaults = false })

-- GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b) of transformers 5
-- (models/gpt_oss/modular_gpt_oss.py): biases on q, k, v and o, a sink
-- logit per head, half-width rotary tables applied by chunk and cat
-- (YaRN, theta 150000), GptOssRMSNorm (the weight applied in fp32, a
-- _keep_in_fp32_modules), a full and a sliding-window mask (layer_types
-- alternate, window 128), and GptOssMLP: a biased router, 3-D experts with
-- biases and the clamped gate (GptOssConfig's defaults: 128 experts, 4 a
-- token, head_dim 64).
presets.gpt_oss = preset("llama", "GPT-OSS: attention sinks, alternating sliding layers, biased 3-D experts",
  { moe_block = "gpt_oss", experts = 128, experts_per_token = 4, attention_bias = true, attention_sinks = true,
    chunked_rotary = true, norm_style = "olmo2", norm_keep_fp32 = true, masking_utils = true, hybrid_masks = true,
    sliding_window = 128, head_dim = 64, rope_theta = 150000.0, norm_topk = false, peft_lora_defaults = false })

-- The preset's values, copied (a caller may change its copy).
function presets.values(name)
  local p = presets[name]
  local out = {}
  for k, v in pairs(p and p.values or {}) do out[k] = v end
  return out
end

return presets
