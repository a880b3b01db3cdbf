-- LLaMA-style decoders (Llama 2, Llama 3, Mistral, and with experts > 0 the
-- mixtures of experts Mixtral, Qwen-MoE, DeepSeekMoE, DeepSeek-V2 and
-- DeepSeek-V3):
-- pre-norm RMSNorm, rotary positions, SwiGLU MLP (or a routed set of SwiGLU
-- experts), grouped-query attention or, with kv_lora_rank > 0, DeepSeek's
-- multi-head latent attention, no biases unless asked, untied head; with
-- fused_projections Phi-3 (Phi3ForCausalLM of transformers 4.49-4.52);
-- with norm_style "gemma" and embed_scale Gemma (GemmaForCausalLM); with
-- norm_style "olmo2", norm_position "post" and qk_norm OLMo-2; with
-- multipliers Granite (GraniteForCausalLM); with norm_position "sandwich",
-- sliding_pattern and the soft caps Gemma 2 (Gemma2ForCausalLM); with
-- those and qk_norm_style "gemma", local_rope and scaled_embedding Gemma 3's
-- text model (Gemma3ForCausalLM); with moe_block "gpt_oss", attention_sinks,
-- chunked_rotary and hybrid_masks GPT-OSS (GptOssForCausalLM, transformers 5).
-- Field names follow vramplan; HF config.json keys map onto them (hf.lua).
return architecture {
  name = "llama",
  doc = "LLaMA-style decoder as HF's LlamaForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "kv_heads", "int", default = function(c) return c.heads end, doc = "num_key_value_heads (GQA; 1 = MQA)" },
    { "head_dim", "int", default = function(c) return c.heads and c.hidden and c.hidden // c.heads end,
      doc = "head_dim (default hidden / heads)" },
    { "intermediate", "int", doc = "intermediate_size of the SwiGLU MLP" },
    { "vocab", "int", doc = "vocab_size" },
    { "max_positions", "int", default = 4096, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-6, min = 0, doc = "rms_norm_eps" },
    { "tie_embeddings", "bool", default = false, doc = "tie_word_embeddings" },
    { "attention_bias", "bool", default = false, doc = "biases on q/k/v/o" },
    { "qkv_bias", "bool", default = function(c) return c.attention_bias end,
      doc = "biases on q/k/v only (Qwen2: true with attention_bias false)" },
    { "mlp_bias", "bool", default = false, doc = "biases on the MLP projections" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "activation", "string", default = "silu", options = op_options("mlp", "activation"), doc = "hidden_act" },
    { "experts", "int", default = 0, min = 0, doc = "routed experts per layer (0: a dense MLP); num_local_experts" },
    { "experts_per_token", "int", default = 2, doc = "num_experts_per_tok (top-k)" },
    { "moe_intermediate", "int", default = function(c) return c.intermediate end,
      doc = "each expert's intermediate size (Mixtral: intermediate_size)" },
    { "shared_intermediate", "int", default = 0, min = 0,
      doc = "intermediate size of the always-on shared expert (0: none)" },
    { "shared_gate", "bool", default = function(c) return c.shared_intermediate > 0 end,
      doc = "a sigmoid gate on the shared expert (Qwen2-MoE)" },
    { "norm_topk", "bool", default = true, doc = "norm_topk_prob: renormalize the top-k routing weights" },
    { "moe_block", "string", default = "mixtral",
      doc = "plain-PyTorch MoE code: mixtral (HF's token loop, Qwen2-MoE too), deepseek (DeepSeekMoE's training path), "
            .. "deepseek_v3 (transformers' DeepseekV3MoE), deepseek_v2 (DeepSeek-V2's own modeling code) or "
            .. "deepseek_v2_hf (transformers' DeepseekV2MoE, 4.56-4.57) or gpt_oss (transformers' GptOssMLP: "
            .. "biased router and 3-D experts, the clamped gate)" },
    { "expert_names", "string", default = function(c) return c.moe_block == "mixtral" and "w" or "proj" end,
      doc = "the experts' projection names: w (w1, w3, w2: Mixtral) or proj (gate_proj, up_proj, down_proj)" },
    { "aux_loss", "bool", default = false, doc = "DeepSeekMoE's sequence-wise auxiliary loss (aux_loss_alpha > 0)" },
    { "dense_layers", "int", default = 0, min = 0,
      doc = "first_k_dense_replace: leading layers with a dense MLP of `intermediate` (DeepSeek)" },
    { "expert_groups", "int", default = 1, min = 1, doc = "n_group: expert groups that limit the choice (deepseek_v3)" },
    { "topk_groups", "int", default = 1, min = 1, doc = "topk_group: groups a token's experts come from (deepseek_v3)" },
    { "group_limited", "bool", default = false,
      doc = "deepseek_v2: topk_method group_limited_greedy (experts chosen within topk_groups of expert_groups); "
            .. "false: greedy" },
    { "q_lora_rank", "int", default = 0, min = 0, doc = "MLA: the queries' low rank (0: one q_proj)" },
    { "kv_lora_rank", "int", default = 0, min = 0,
      doc = "multi-head latent attention (DeepSeek-V2/V3) when set: the keys' and values' latent width" },
    { "qk_nope_head_dim", "int", default = 0, min = 0, doc = "MLA: each head's query/key width without rotary" },
    { "qk_rope_head_dim", "int", default = 0, min = 0, doc = "MLA: each head's rotary width" },
    { "v_head_dim", "int", default = 0, min = 0, doc = "MLA: each head's value width" },
    { "rope_interleave", "bool", default = false, doc = "MLA: rotary halves interleaved in the weights" },
    { "shifted_loss", "bool", default = false,
      doc = "the model's own loss before transformers 4.46 (DeepSeekMoE's and DeepSeek-V2's modeling code): "
            .. "logits.float() (a copy unless fp32 already, which the outputs keep), then "
            .. "logits[..., :-1, :].contiguous() and the labels shifted, CrossEntropyLoss over them" },
    { "layer_rotary", "bool", default = false,
      doc = "MLA as DeepSeek-V2's own modeling_deepseek.py runs it: no model-level rotary tables, each layer its own "
            .. "cos/sin caches of seq_len rows, the query and key states filled by slice assignments" },
    { "complex_rotary", "bool", default = false,
      doc = "MLA as transformers' DeepseekV2Attention runs it (4.54+): the model's one complex64 freqs_cis table, "
            .. "q_pe and k_pe made fp32 and multiplied as complex pairs, cast back" },
    { "masking_utils", "bool", default = false,
      doc = "the eager causal mask as transformers 4.53+ makes it (masking_utils.create_causal_mask): "
            .. "[b, 1, s, s] in the activations' dtype, made by torch.where from a bool comparison" },
    { "qk_norm", "bool", default = false, doc = "an RMSNorm over each query and key head before rotary (Qwen3)" },
    { "fused_projections", "bool", default = false,
      doc = "Phi-3: one qkv_proj and one gate_up_proj, their outputs split into views; rotary joined by torch.cat" },
    { "partial_rotary_factor", "number", default = 1.0, min = 0, max = 1,
      doc = "the share of each head the rotary embedding turns (Phi-4-mini: 0.75); the rest joined back by torch.cat" },
    { "sliding_window", "int", default = 0, min = 0,
      doc = "sliding_window: keys a query sees at most (Mistral, Phi-3; 0: none)" },
    { "norm_style", "string", default = "llama",
      doc = "the RMSNorms: llama (LlamaRMSNorm), gemma (GemmaRMSNorm: 1 + weight, applied in fp32) or olmo2 "
            .. "(Olmo2RMSNorm: the weight applied in fp32)" },
    { "norm_position", "string", default = "pre",
      doc = "pre: each block's input normalized (LLaMA); post: each block's output normalized before the "
            .. "residual add (OLMo-2); sandwich: both, two norms a block (Gemma 2)" },
    { "sliding_pattern", "int", default = 0, min = 0,
      doc = "Gemma 2's alternating layers: layer i slides over sliding_window keys unless (i + 1) is a multiple "
            .. "of this (2: every other layer global), each sliding layer narrowing its own copy of the model's "
            .. "mask; 0: every layer alike" },
    { "attn_softcap", "number", default = 0, min = 0,
      doc = "attn_logit_softcapping: the attention scores capped as cap * tanh(scores / cap) (Gemma 2); 0: none" },
    { "final_softcap", "number", default = 0, min = 0,
      doc = "final_logit_softcapping: the logits capped as cap * tanh(logits / cap) (Gemma 2); 0: none" },
    { "qk_norm_style", "string", default = function(c) return c.norm_style == "olmo2" and "olmo2" or "head" end,
      doc = "with qk_norm: head (an RMSNorm over each head, Qwen3), olmo2 (over the whole projection, OLMo-2) or "
            .. "gemma (a GemmaRMSNorm over each head, Gemma 3)" },
    { "local_rope", "bool", default = false,
      doc = "a second pair of rotary tables for the sliding layers, made beside the first (Gemma 3's "
            .. "rope_local_base_freq)" },
    { "scaled_embedding", "bool", default = false,
      doc = "the embedding module returns its rows times sqrt(hidden_size) (Gemma 3's scaled word embedding): the "
            .. "product is inputs_embeds, the raw rows a temporary" },
    { "embed_scale", "bool", default = false,
      doc = "the embeddings multiplied by sqrt(hidden_size) before the first layer (Gemma's normalizer)" },
    { "multipliers", "bool", default = false,
      doc = "Granite: the embeddings times embedding_multiplier, every block's output times residual_multiplier "
            .. "and the logits over logits_scaling, each product a new tensor" },
    { "peft_lora_defaults", "bool", default = true,
      doc = "PEFT has default LoRA targets (q_proj, v_proj) for this model type; false (OLMo 2, Granite, Phi-3, the "
            .. "Qwen and DeepSeek mixtures): a recipe must name them" },
    { "mistral_mask", "bool", default = function(c) return c.fused_projections or c.sliding_window > 0 end,
      doc = "the eager additive mask built as MistralModel builds it (no triu copy; Mistral, Mixtral, Phi-3)" },
    { "router_aux_loss", "bool", default = false,
      doc = "output_router_logits: every layer's router logits kept with the outputs and the load-balancing loss "
            .. "added to the loss (Mixtral, Qwen-MoE)" },
    { "lua_blocks", "string", default = "",
      doc = "a blocks script whose Lua blocks (attention, mlp, rmsnorm) replace the core's ops: llama (LLaMA's, "
            .. "models/blocks/llama.lua), diff_transformer (differential attention), or one of your own "
            .. "(blocks/NAME.lua beside the model; docs/writing-blocks.md)" },
    { "attention_sinks", "bool", default = false,
      doc = "GPT-OSS: a learned sink logit per head joined to the scores before the softmax (eager attention; "
            .. "transformers has no SDPA path for it)" },
    { "chunked_rotary", "bool", default = false,
      doc = "GPT-OSS: half-width rotary tables (emb = freqs) and each head's halves rotated by torch.chunk and joined "
            .. "by torch.cat (_apply_rotary_emb)" },
    { "norm_keep_fp32", "bool", default = false,
      doc = "the RMSNorms are _keep_in_fp32_modules (GPT-OSS): fp32 weights when the model loads in fp16 or quantized" },
    { "hybrid_masks", "bool", default = false,
      doc = "transformers 5's causal_mask_mapping (GPT-OSS's layer_types): a full causal and a sliding-window eager "
            .. "mask made once each by masking_utils, both kept through the layers" },
    { "capacity_factor", "number", default = 0, min = 0,
      doc = "Megatron's moe_expert_capacity_factor: rows per expert as a multiple of the even share (0: dropless)" },
  },
  check = function(c)
    if c.head_dim == c.hidden // c.heads and c.hidden % c.heads ~= 0 then
      return "heads", string.format("must divide hidden (%d) unless head_dim is given", c.hidden)
    end
    if c.heads % c.kv_heads ~= 0 then
      return "kv_heads", string.format("must divide heads (%d)", c.heads)
    end
    if c.experts > 0 and c.experts_per_token > c.experts then
      return "experts_per_token", string.format("cannot exceed experts (%d)", c.experts)
    end
    if c.moe_block ~= "mixtral" and c.moe_block ~= "deepseek" and c.moe_block ~= "deepseek_v3"
        and c.moe_block ~= "deepseek_v2" and c.moe_block ~= "deepseek_v2_hf" and c.moe_block ~= "gpt_oss" then
      return "moe_block", "must be mixtral, deepseek, deepseek_v3, deepseek_v2, deepseek_v2_hf or gpt_oss"
    end
    if c.hybrid_masks and (not c.masking_utils or c.sliding_window == 0 or c.sliding_pattern > 0) then
      return "hybrid_masks", "needs masking_utils and a sliding_window, and no sliding_pattern"
    end
    if (c.attention_sinks or c.chunked_rotary) and (c.kv_lora_rank > 0 or c.fused_projections) then
      return c.attention_sinks and "attention_sinks" or "chunked_rotary",
        "is GPT-OSS's attention: no latent attention or fused projections"
    end
    if c.complex_rotary and (c.kv_lora_rank == 0 or c.layer_rotary or c.rope_interleave) then
      return "complex_rotary", "is transformers' DeepSeek-V2 latent attention: needs kv_lora_rank, not with "
        .. "layer_rotary or rope_interleave"
    end
    if c.layer_rotary and c.kv_lora_rank == 0 then
      return "layer_rotary", "is DeepSeek-V2's multi-head latent attention: needs kv_lora_rank"
    end
    if c.kv_lora_rank > 0 and (c.qk_nope_head_dim == 0 or c.qk_rope_head_dim == 0 or c.v_head_dim == 0) then
      return "kv_lora_rank", "multi-head latent attention needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim"
    end
    if c.norm_style ~= "llama" and c.norm_style ~= "gemma" and c.norm_style ~= "olmo2" then
      return "norm_style", "must be llama, gemma or olmo2"
    end
    if c.norm_position ~= "pre" and c.norm_position ~= "post" and c.norm_position ~= "sandwich" then
      return "norm_position", "must be pre, post or sandwich"
    end
    if c.sliding_pattern > 0 and c.sliding_window == 0 then
      return "sliding_pattern", "needs a sliding_window for the sliding layers"
    end
    if c.sliding_pattern > 0 and (c.experts > 0 or c.kv_lora_rank > 0 or c.fused_projections) then
      return "sliding_pattern", "is Gemma 2's dense decoder: no experts, latent attention or fused projections"
    end
    if c.qk_norm_style ~= "head" and c.qk_norm_style ~= "olmo2" and c.qk_norm_style ~= "gemma" then
      return "qk_norm_style", "must be head, olmo2 or gemma"
    end
    if c.local_rope and c.sliding_pattern == 0 then
      return "local_rope", "is the sliding layers' rotary tables: needs sliding_pattern"
    end
    if c.scaled_embedding and (c.embed_scale or c.multipliers) then
      return "scaled_embedding", "scales the embeddings itself: not with embed_scale or multipliers"
    end
    if c.expert_names ~= "w" and c.expert_names ~= "proj" then
      return "expert_names", "must be w or proj"
    end
    local rotary_dim = math.floor(c.head_dim * c.partial_rotary_factor)
    if c.partial_rotary_factor < 1 and (not c.fused_projections or rotary_dim % 2 ~= 0 or rotary_dim == 0) then
      return "partial_rotary_factor", "is Phi-3's (fused_projections) and must leave an even, nonzero rotated width"
    end
    if c.fused_projections and (c.experts > 0 or c.kv_lora_rank > 0) then
      return "fused_projections", "is Phi-3's dense attention and MLP: no experts or latent attention"
    end
    if c.router_aux_loss and (c.experts == 0 or c.moe_block ~= "mixtral") then
      return "router_aux_loss", "is the load-balancing loss of transformers' sparse blocks: needs experts and "
        .. "moe_block mixtral"
    end
    if c.dense_layers > 0 and (c.experts == 0 or c.dense_layers >= c.layers) then
      return "dense_layers", string.format("needs experts and fewer than layers (%d)", c.layers)
    end
  end,
  build = function(c, lua) -- lua: the lua_blocks script's constructors, or nil
    lua = lua or {}
    -- Liger-Kernel's apply_liger_kernel_to_<model_type>
    -- (src/liger_kernel/transformers/monkey_patch.py): none for DeepSeek's
    -- model types (DeepSeekMoE, latent attention) or Qwen2-MoE's (the
    -- gated shared expert); the norms out of place for Gemma 2 and 3
    -- (sandwich norms) and OLMo-2, in place for the others
    local liger = c.kv_lora_rank == 0 and not c.shared_gate
      and (c.experts == 0 or c.moe_block == "mixtral" or c.moe_block == "gpt_oss")
    local liger_norm = not liger and "none"
      or (c.norm_position == "sandwich" or c.norm_style == "olmo2") and "out_of_place" or "in_place"
    -- the q and k norms: Qwen3's are LigerRMSNorm (in place), Gemma 3's
    -- LigerRMSNormForGemma3 and OLMo-2's LigerRMSNormForOlmo2 (out of
    -- place) where the class swap reaches them; a built model's patch
    -- reaches Gemma 3's alone
    local liger_qk = (c.qk_norm and liger) and (c.qk_norm_style == "head" and "in_place" or "out_of_place") or nil
    local function dense()
      if lua.mlp then return lua.mlp() end
      return mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation,
                   gated = true, bias = c.mlp_bias, module_names = c.fused_projections and "phi3" or nil,
                   liger = liger }
    end
    local function ffn()
      if c.experts == 0 then return dense() end
      return moe { hidden = c.hidden, intermediate = c.moe_intermediate, experts = c.experts,
                   top_k = c.experts_per_token, shared_intermediate = c.shared_intermediate,
                   shared_gate = c.shared_gate, norm_topk = c.norm_topk, capacity_factor = c.capacity_factor,
                   block = c.moe_block, aux_loss = c.aux_loss, groups = c.expert_groups, topk_groups = c.topk_groups,
                   expert_names = c.expert_names, output_router_logits = c.router_aux_loss,
                   group_limited = c.group_limited,
                   -- GPT-OSS's patch leaves its experts alone (swiglu False by default)
                   liger = liger and c.moe_block == "mixtral" }
    end
    local function norm(liger_instance)
      if lua.rmsnorm then return lua.rmsnorm() end
      return rmsnorm { hidden = c.hidden, eps = c.norm_eps, style = c.norm_style, keep_fp32 = c.norm_keep_fp32,
                       liger = liger_norm, liger_instance = liger_instance }
    end
    -- pre: the block's input normalized (LLaMA); post: its output, before
    -- the residual add (OLMo-2)
    local function block(op)
      if c.norm_position == "post" then return residual { op, norm(), scale = c.multipliers } end
      if c.norm_position == "sandwich" then return residual { norm(), op, norm(), scale = c.multipliers } end
      return residual { norm(), op, scale = c.multipliers }
    end
    -- Gemma 2: the layer narrows the model's mask itself on its sliding
    -- layers; the attention sees no window of its own, and in training
    -- Gemma2Model makes no cache (HybridCache only when not training)
    local hybrid = c.sliding_pattern > 0
    local function layer(feed_forward)
      local ops = {}
      if hybrid then ops[1] = sliding_mask { window = c.sliding_window, pattern = c.sliding_pattern } end
      ops[#ops + 1] = block(lua.attention and lua.attention() or attention {
          hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
          qkv_bias = c.qkv_bias, out_bias = c.attention_bias, rotary = true,
          -- (GPT-OSS's softmax keeps the scores' dtype)
          dropout = c.attn_dropout, upcast_softmax = not c.attention_sinks, caches = not hybrid,
          -- DeepSeek-V2's attention sets attn_weights = None before it returns
          keeps_weights = not c.layer_rotary, sinks = c.attention_sinks,
          rotary_style = c.layer_rotary and "deepseek" or c.complex_rotary and "complex"
            or c.chunked_rotary and "chunked" or nil,
          mask = c.hybrid_masks and "additive-4d-pair" or hybrid and "additive-hybrid"
            or c.mistral_mask and "additive-mistral" or c.masking_utils and "additive-4d" or "additive",
          -- (GPT-OSS's window changes no kernel's memory: eager gets the masks, flash a window size)
          sliding_window = (hybrid or c.hybrid_masks) and 0 or c.sliding_window, softcap = c.attn_softcap,
          fused_qkv = c.fused_projections, rotary_cat = c.fused_projections,
          rotary_dim = c.partial_rotary_factor < 1 and math.floor(c.head_dim * c.partial_rotary_factor) or 0,
          module_names = c.fused_projections and "phi3" or nil,
          q_lora_rank = c.q_lora_rank, kv_lora_rank = c.kv_lora_rank, qk_nope_head_dim = c.qk_nope_head_dim,
          qk_rope_head_dim = c.qk_rope_head_dim, v_head_dim = c.v_head_dim, rope_interleave = c.rope_interleave,
          qk_norm = c.qk_norm, qk_norm_style = c.qk_norm_style, peft_defaults = c.peft_lora_defaults,
          liger_qk = liger_qk, liger_qk_instance = liger_qk and c.qk_norm_style == "gemma" or nil,
        })
      ops[#ops + 1] = block(feed_forward)
      return ops
    end
    -- Granite rebinds inputs_embeds to their product with embedding_multiplier;
    -- Gemma keeps them and scales a copy into the hidden states
    -- as does Gemma 3's embedding module
    -- (Gemma 3's scaling is the embedding module's own: before PEFT joins a prompt)
    local embed = { token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = not c.multipliers,
                                      scaled = c.scaled_embedding } }
    if c.multipliers then embed[#embed + 1] = scale { model_local = true } end
    local rotary_dim = c.kv_lora_rank > 0 and c.qk_rope_head_dim or math.floor(c.head_dim * c.partial_rotary_factor)
    embed[#embed + 1] = rotary_embedding { head_dim = rotary_dim, theta = c.rope_theta, tables = not c.layer_rotary,
                                           complex = c.complex_rotary, half_tables = c.chunked_rotary }
    if c.local_rope then embed[#embed + 1] = rotary_embedding { head_dim = rotary_dim, sliding = true } end
    if c.embed_scale then embed[#embed + 1] = scale {} end
    local final = {
      -- OLMo-2's under the Trainer's patch: _patch_rms_norm_module's LigerRMSNorm, in place
      norm(liger_norm ~= "none" and c.norm_style == "olmo2" and "in_place" or nil),
      lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, scale_logits = c.multipliers,
                softcap = c.final_softcap, float_logits = c.shifted_loss },
      c.shifted_loss and cross_entropy { upcast = false, shift = "logits" } or cross_entropy {},
    }
    if c.router_aux_loss then
      final[#final + 1] = router_aux_loss { experts = c.experts, top_k = c.experts_per_token }
    end
    return decoder {
      -- LlamaDecoderLayer (and its kin) registers self_attn, mlp, then its norms
      norms_registered = "last",
      embed = embed,
      first_layer = c.dense_layers > 0 and layer(dense()) or nil,
      first_layers = c.dense_layers,
      layer = layer(ffn()),
      layers = c.layers,
      final = final,
    }
  end,
}
