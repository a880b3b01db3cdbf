-- vramplan.hf — Hugging Face config.json files as model descriptions: the
-- model_type picks the architecture family and each known key maps to a
-- family field. Keys that do not change training memory are ignored.
local json = require("dkjson")
local presets = require("vramplan.presets")
local schema = require("vramplan.schema")

local hf = {}

-- model_type -> family and { hf_key = field } (nil: ignored on purpose)
local mappings = {
  gpt2 = {
    family = "gpt2",
    keys = {
      n_embd = "hidden", n_layer = "layers", n_head = "heads", n_inner = "intermediate",
      vocab_size = "vocab", n_positions = "max_positions", activation_function = "activation",
      resid_pdrop = "resid_dropout", embd_pdrop = "embed_dropout", attn_pdrop = "attn_dropout",
      layer_norm_epsilon = "norm_eps", tie_word_embeddings = "tie_embeddings",
    },
  },
  llama = {
    family = "llama",
    keys = {
      hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
      num_key_value_heads = "kv_heads", intermediate_size = "intermediate", vocab_size = "vocab",
      max_position_embeddings = "max_positions", rms_norm_eps = "norm_eps", rope_theta = "rope_theta",
      tie_word_embeddings = "tie_embeddings", attention_bias = "attention_bias", mlp_bias = "mlp_bias",
      head_dim = "head_dim", attention_dropout = "attn_dropout", hidden_act = "activation",
    },
  },
}

local function extend(base, extra)
  local keys = {}
  for k, v in pairs(base.keys) do keys[k] = v end
  for k, v in pairs(extra.keys) do keys[k] = v end
  return { family = base.family, keys = keys, defaults = extra.defaults, check = extra.check, derive = extra.derive }
end

-- model_type mistral: its preset (vramplan.presets) and the config keys it adds.
mappings.mistral = extend(mappings.llama, {
  keys = { sliding_window = "sliding_window" },
  defaults = presets.values("mistral"),
})

-- model_type gemma: its preset (vramplan.presets) and the config keys it adds.
mappings.gemma = extend(mappings.llama, {
  keys = { hidden_activation = "activation" },
  defaults = presets.values("gemma"),
})
mappings.gemma.keys.hidden_act = nil -- GemmaMLP reads hidden_activation (its GeLU has hidden_act's memory)

-- Gemma2ForCausalLM (Gemma 2) of transformers 4.50-4.52: Gemma's norms,
-- normalizer and tied head, four norms a layer (before and after the
-- attention and the MLP), every other layer sliding over sliding_window
-- keys through its own copy of the mask, the attention scores and the
-- logits soft-capped (Gemma2Config's defaults: 50 and 30; null: none).
-- query_pre_attn_scalar only sets the softmax scale.
local function gemma2_caps(config, values, origins, path)
  for key, field in pairs({ attn_logit_softcapping = "attn_softcap", final_logit_softcapping = "final_softcap" }) do
    if config[key] == json.null then
      values[field] = 0
      origins[field] = path .. ": " .. key .. " (null: none)"
    end
  end
end
mappings.gemma2 = extend(mappings.llama, {
  keys = { sliding_window = "sliding_window", attn_logit_softcapping = "attn_softcap",
           final_logit_softcapping = "final_softcap", hidden_activation = "activation" },
  defaults = presets.values("gemma2"),
  derive = gemma2_caps,
})
mappings.gemma2.keys.hidden_act = nil -- Gemma2MLP reads hidden_activation (gemma3_text's keys extend these)

-- model_type gemma3_text: its preset (vramplan.presets) and the config keys it
-- adds. rope_scaling only changes the rotary tables' values. The multimodal
-- Gemma3ForConditionalGeneration (model_type gemma3, with a vision tower)
-- is not modelled.
mappings.gemma3_text = extend(mappings.gemma2, {
  keys = { sliding_window_pattern = "sliding_pattern" },
  defaults = presets.values("gemma3_text"),
  derive = gemma2_caps,
})
mappings.gemma3 = {
  family = "llama", keys = {},
  check = function()
    return "model_type", "gemma3 is Gemma 3's multimodal model (a vision tower beside the text model), not modelled; "
      .. "its text_config, saved as a config.json of its own (model_type gemma3_text), describes the text model"
  end,
}

-- model_type olmo2: its preset (vramplan.presets) and the config keys it adds.
mappings.olmo2 = extend(mappings.llama, {
  keys = {},
  defaults = presets.values("olmo2"),
})

-- model_type granite: its preset (vramplan.presets) and the config keys it
-- adds; attention_multiplier is the softmax scale (nothing to allocate).
mappings.granite = extend(mappings.llama, {
  keys = {},
  defaults = presets.values("granite"),
})

-- Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4) of transformers 4.49-4.52: fused
-- qkv_proj and gate_up_proj, MistralModel's mask, a partial rotary factor
-- (Phi-4-mini). resid_pdrop and embd_pdrop are 0.0 in the published configs
-- and refused otherwise.
mappings.phi3 = extend(mappings.llama, {
  keys = { sliding_window = "sliding_window", partial_rotary_factor = "partial_rotary_factor" },
  defaults = presets.values("phi3"),
  check = function(config)
    for _, key in ipairs({ "resid_pdrop", "embd_pdrop" }) do
      if type(config[key]) == "number" and config[key] ~= 0 then
        return key, "Phi-3's residual and embedding dropouts are not modelled yet (the published configs have 0.0)"
      end
    end
  end,
})

-- Qwen's models are MistralModel's (Qwen2Model, Qwen3Model, and the MoE
-- ones): its eager mask, and sliding_window once use_sliding_window is on
-- (the mask narrows every layer's keys; max_window_layers only tells
-- FlashAttention-2's layers, where the window allocates nothing).
local function qwen_window(config, values, origins, path)
  if config.use_sliding_window == true and type(config.sliding_window) == "number" then
    values.sliding_window = config.sliding_window
    origins.sliding_window = path .. ": sliding_window (use_sliding_window)"
  end
end

-- model_type qwen2: its preset (vramplan.presets) and the config keys it adds.
mappings.qwen2 = extend(mappings.llama, {
  keys = {},
  defaults = presets.values("qwen2"),
  derive = qwen_window,
})

-- model_type qwen3: its preset (vramplan.presets) and the config keys it
-- adds; its configs give head_dim.
mappings.qwen3 = extend(mappings.llama, {
  keys = {},
  defaults = presets.values("qwen3"),
  derive = qwen_window,
})

-- PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has no entry
-- for olmo2, granite, phi3, qwen2_moe, qwen3_moe, deepseek, deepseek_v2 or deepseek_v3:
-- LoRA on those needs named targets (peft_lora_defaults = false).

-- The HF mixtures compute the router's load-balancing loss only with
-- output_router_logits (false in the published configs; true in many
-- fine-tuning recipes): router_aux_loss.

-- model_type mixtral: its preset (vramplan.presets) and the config keys it
-- adds; intermediate_size is each expert's width, and router_jitter_noise
-- perturbs the logits in place only.
mappings.mixtral = extend(mappings.llama, {
  keys = { num_local_experts = "experts", num_experts_per_tok = "experts_per_token", sliding_window = "sliding_window",
           output_router_logits = "router_aux_loss" },
  defaults = presets.values("mixtral"),
})

-- Qwen2MoeForCausalLM: biases on q/k/v only, fine-grained experts beside a
-- gated shared expert, top-k weights not renormalized by default.
mappings.qwen2_moe = extend(mappings.llama, {
  keys = {
    num_experts = "experts", num_experts_per_tok = "experts_per_token", moe_intermediate_size = "moe_intermediate",
    shared_expert_intermediate_size = "shared_intermediate", norm_topk_prob = "norm_topk",
    output_router_logits = "router_aux_loss",
  },
  defaults = presets.values("qwen2_moe"),
  derive = qwen_window,
  check = function(config)
    -- dense layers among sparse ones would need per-layer groups
    local step = config.decoder_sparse_step
    if step ~= nil and step ~= 1 then
      return "decoder_sparse_step", "only 1 (every layer sparse) is supported"
    end
    local dense = config.mlp_only_layers
    if type(dense) == "table" and #dense > 0 then
      return "mlp_only_layers", "dense layers among sparse ones are not supported yet"
    end
  end,
})

-- Qwen3MoeForCausalLM (transformers 4.51-4.52): Qwen3's attention (q_norm,
-- k_norm) and Mixtral's token loop over fine-grained experts, no shared
-- expert.
mappings.qwen3_moe = extend(mappings.llama, {
  keys = {
    num_experts = "experts", num_experts_per_tok = "experts_per_token", moe_intermediate_size = "moe_intermediate",
    norm_topk_prob = "norm_topk", output_router_logits = "router_aux_loss",
  },
  defaults = presets.values("qwen3_moe"),
  derive = qwen_window,
  check = mappings.qwen2_moe.check,
})

local function read(path)
  local f, err = io.open(path, "r")
  if not f then error("cannot open " .. path .. ": " .. tostring(err), 0) end
  local text = f:read("a")
  f:close()
  return text
end

-- GPTNeoXForCausalLM (GPT-NeoX-20B, Pythia) of transformers 4.50-4.52.
-- rotary_emb_base is the older name of rope_theta.
mappings.gpt_neox = {
  family = "gpt_neox",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
    intermediate_size = "intermediate", vocab_size = "vocab", max_position_embeddings = "max_positions",
    rotary_pct = "rotary_pct", rotary_emb_base = "rope_theta", rope_theta = "rope_theta",
    layer_norm_eps = "norm_eps", use_parallel_residual = "parallel_residual", attention_dropout = "attn_dropout",
    hidden_dropout = "hidden_dropout", hidden_act = "activation", attention_bias = "attention_bias",
    tie_word_embeddings = "tie_embeddings",
  },
}

-- PhiForCausalLM (Phi-1, Phi-1.5, Phi-2) of transformers 4.50-4.52; a
-- config with qk_layernorm (norms over q and k) is refused.
mappings.phi = {
  family = "phi",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
    num_key_value_heads = "kv_heads", intermediate_size = "intermediate", vocab_size = "vocab",
    max_position_embeddings = "max_positions", partial_rotary_factor = "partial_rotary_factor",
    rope_theta = "rope_theta", layer_norm_eps = "norm_eps", resid_pdrop = "resid_dropout",
    embd_pdrop = "embed_dropout", attention_dropout = "attn_dropout", hidden_act = "activation",
    tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    if config.qk_layernorm == true then return "qk_layernorm", "Phi's q/k LayerNorms are not modelled" end
  end,
}

-- GPTJForCausalLM (GPT-J-6B) of transformers 4.5x (models/gptj,
-- commit 00b676f); n_inner null is 4 x n_embd (the arch's default).
-- rotary_dim null is refused: GPTJAttention's table is then n_embd wide,
-- which does not broadcast over a head of several.
mappings.gptj = {
  family = "gptj",
  keys = {
    n_embd = "hidden", n_layer = "layers", n_head = "heads", n_inner = "intermediate", vocab_size = "vocab",
    n_positions = "max_positions", rotary_dim = "rotary_dim", layer_norm_epsilon = "norm_eps",
    resid_pdrop = "resid_dropout", embd_pdrop = "embed_dropout", attn_pdrop = "attn_dropout",
    activation_function = "activation", tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    if config.rotary_dim == json.null then
      return "rotary_dim", "null (the whole hidden width rotated) is not modelled: give the rotated width of a head"
    end
  end,
}

-- FalconForCausalLM (Falcon-7B, -40B, -180B, Falcon2-11B) of transformers
-- 4.5x (models/falcon, commit 00dcc6d); defaults are FalconConfig's for the
-- keys a config.json leaves out (multi_query, no new_decoder_architecture,
-- num_kv_heads = the heads, the head tied). n_embed, n_layer, n_head and
-- n_head_kv are its older names. num_ln_in_parallel_attn null is 2 (two
-- norms) under new_decoder_architecture. attention_dropout only acts on
-- paths vramplan refuses or where it costs nothing (FlashAttention's
-- dropout); rope_scaling only changes the tables' values. The ALiBi path
-- (Falcon-RW: alibi), FalconLinear's separate bias add (bias) and the
-- sequential block (parallel_attn false) are refused.
mappings.falcon = {
  family = "falcon",
  keys = {
    hidden_size = "hidden", n_embed = "hidden", num_hidden_layers = "layers", n_layer = "layers",
    num_attention_heads = "heads", n_head = "heads", num_kv_heads = "kv_heads", n_head_kv = "kv_heads",
    multi_query = "multi_query", new_decoder_architecture = "new_decoder_architecture",
    num_ln_in_parallel_attn = "norms", ffn_hidden_size = "intermediate", vocab_size = "vocab",
    max_position_embeddings = "max_positions", rope_theta = "rope_theta", layer_norm_epsilon = "norm_eps",
    hidden_dropout = "hidden_dropout", activation = "activation", use_cache = "use_cache",
    tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    if config.alibi == true then return "alibi", "Falcon's ALiBi attention (Falcon-RW) is not modelled" end
    if config.bias == true then
      return "bias", "FalconLinear's bias, added apart from the matmul, is not modelled (Falcon-RW's)"
    end
    if config.parallel_attn == false then
      return "parallel_attn", "Falcon's sequential block (attention, then post_attention_layernorm and the MLP) " ..
        "is not modelled"
    end
  end,
}

-- CohereForCausalLM (Command R, Command R+, Aya 23) of transformers 4.5x
-- (models/cohere, commit 015bfeb); defaults are CohereConfig's for the keys
-- a config.json leaves out. logit_scale and rope_scaling only change
-- values (the logits are multiplied whatever the scale).
mappings.cohere = {
  family = "cohere",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
    num_key_value_heads = "kv_heads", intermediate_size = "intermediate", vocab_size = "vocab",
    max_position_embeddings = "max_positions", rope_theta = "rope_theta", layer_norm_eps = "norm_eps",
    attention_bias = "attention_bias", attention_dropout = "attn_dropout", hidden_act = "activation",
    use_qk_norm = "qk_norm", use_cache = "use_cache", tie_word_embeddings = "tie_embeddings",
  },
}

-- Cohere2ForCausalLM (Command R7B, Command A, Tiny Aya) at the same
-- commit: the cohere family with its sliding layers. Cohere2Config's
-- defaults for the keys a config.json leaves out: sliding_window 4096,
-- sliding_window_pattern 4. Later configs list layer_types instead
-- ("sliding_attention" / "full_attention", one per layer): read as the
-- pattern they follow, the last layer of each period global; other layouts
-- are refused.
local function cohere2_pattern(config, values, origins, path)
  local types = config.layer_types
  if type(types) ~= "table" then return end
  local period = nil
  for i, t in ipairs(types) do
    if t == "full_attention" then period = i break end
  end
  if not period then -- every layer slides: a pattern longer than the stack
    period = #types + 1
  end
  for i, t in ipairs(types) do
    local want = i % period == 0 and "full_attention" or "sliding_attention"
    if t ~= want then
      error(string.format("%s: layer_types: layer %d is %s where a pattern of %d makes it %s (only layer types "
        .. "repeating with the last layer of each period global are modelled)", path, i - 1, tostring(t), period,
        want), 0)
    end
  end
  values.sliding_pattern = period
  origins.sliding_pattern = path .. ": layer_types"
end

mappings.cohere2 = extend(mappings.cohere, {
  keys = { sliding_window = "sliding_window", sliding_window_pattern = "sliding_pattern" },
  defaults = { sliding_window = 4096, sliding_pattern = 4 },
  check = function(config)
    if config.use_qk_norm == true then return "use_qk_norm", "Cohere2 has no query/key norms" end
  end,
  derive = cohere2_pattern,
})
mappings.cohere2.keys.use_qk_norm = nil

-- Starcoder2ForCausalLM (StarCoder2) of transformers 4.50-4.52; defaults
-- are Starcoder2Config's for the keys a config.json leaves out (no window,
-- no dropouts, biases on, the head tied by PretrainedConfig's default).
-- norm_type and mlp_type name the only kinds transformers builds
-- (LayerNorm, the ungated c_fc/c_proj MLP): others are refused.
mappings.starcoder2 = {
  family = "starcoder2",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
    num_key_value_heads = "kv_heads", intermediate_size = "intermediate", vocab_size = "vocab",
    max_position_embeddings = "max_positions", rope_theta = "rope_theta", norm_epsilon = "norm_eps",
    use_bias = "use_bias", sliding_window = "sliding_window", attention_dropout = "attn_dropout",
    residual_dropout = "resid_dropout", embedding_dropout = "embed_dropout", hidden_act = "activation",
    tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    if config.norm_type ~= nil and config.norm_type ~= "layer_norm" then
      return "norm_type", "transformers' Starcoder2 builds LayerNorms only (layer_norm)"
    end
    if config.mlp_type ~= nil and config.mlp_type ~= "default" then
      return "mlp_type", "transformers' Starcoder2 builds the ungated c_fc/c_proj MLP only (default)"
    end
  end,
}

-- OPTForCausalLM (OPT 125M, 1.3B to 66B) of transformers 4.50-4.52:
-- OPT-350M's layout (norms after the blocks, word_embed_proj_dim 512 with
-- project_in and project_out) is refused, as are configs without the
-- LayerNorms' affine parameters or with the final norm removed.
mappings.opt = {
  family = "opt",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads", ffn_dim = "intermediate",
    vocab_size = "vocab", max_position_embeddings = "max_positions", dropout = "dropout",
    attention_dropout = "attn_dropout", activation_function = "activation", enable_bias = "enable_bias",
    tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    if config.do_layer_norm_before == false then
      return "do_layer_norm_before", "OPT-350M's norms after the blocks are not modelled"
    end
    local proj = config.word_embed_proj_dim
    if type(proj) == "number" and proj ~= config.hidden_size then
      return "word_embed_proj_dim", "OPT-350M's project_in and project_out are not modelled"
    end
    if config.layer_norm_elementwise_affine == false then
      return "layer_norm_elementwise_affine", "LayerNorms without weights are not modelled"
    end
    if config._remove_final_layer_norm == true then
      return "_remove_final_layer_norm", "a decoder without its final LayerNorm is not modelled"
    end
    local layerdrop = config.layerdrop
    if type(layerdrop) == "number" and layerdrop > 0 then
      return "layerdrop", "layers skipped at random in training are not modelled"
    end
  end,
}

-- BertForSequenceClassification: num_labels comes as id2label's size.
mappings.bert = {
  family = "bert",
  keys = {
    hidden_size = "hidden", num_hidden_layers = "layers", num_attention_heads = "heads",
    intermediate_size = "intermediate", vocab_size = "vocab", max_position_embeddings = "max_positions",
    type_vocab_size = "type_vocab", layer_norm_eps = "norm_eps", hidden_dropout_prob = "dropout",
    attention_probs_dropout_prob = "attn_dropout", hidden_act = "activation", num_labels = "labels",
  },
  derive = function(config, values, origins, path)
    if values.labels == nil and type(config.id2label) == "table" then
      local n = 0
      for _ in pairs(config.id2label) do n = n + 1 end
      values.labels = n
      origins.labels = path .. ": id2label"
    end
  end,
}

-- BloomForCausalLM: older configs name the width n_embed, newer ones
-- hidden_size; n_layer and n_head under either name.
mappings.bloom = {
  family = "bloom",
  keys = {
    hidden_size = "hidden", n_embed = "hidden", n_layer = "layers", num_hidden_layers = "layers", n_head = "heads",
    num_attention_heads = "heads", vocab_size = "vocab", layer_norm_epsilon = "norm_eps",
    hidden_dropout = "hidden_dropout", attention_dropout = "attn_dropout",
  },
  check = function(config)
    if config.apply_residual_connection_post_layernorm == true then
      return "apply_residual_connection_post_layernorm", "residuals after the norms are not modelled"
    end
    local tp = config.pretraining_tp
    if config.slow_but_exact == true and type(tp) == "number" and tp > 1 then
      return "slow_but_exact", "the sliced projections of pretraining_tp > 1 are not modelled"
    end
  end,
}

-- MptForCausalLM (MPT-7B, MPT-30B) of transformers 4.50-4.52: attn_pdrop
-- (in attn_config) is every dropout; MptModel builds ALiBi, LayerNorms
-- without biases, bias-free projections and a 4 x d_model MLP whatever
-- attn_config.alibi, no_bias and expansion_ratio say, and ignores qk_ln,
-- attn_impl and the position-embedding keys. clip_qkv (a clamped copy of
-- Wqkv's output that keeps it for backward) is refused.
mappings.mpt = {
  family = "mpt",
  keys = {
    d_model = "hidden", n_layers = "layers", n_heads = "heads", vocab_size = "vocab", max_seq_len = "max_positions",
    layer_norm_epsilon = "norm_eps", use_cache = "use_cache", tie_word_embeddings = "tie_embeddings",
  },
  check = function(config)
    local attn = config.attn_config
    if attn ~= nil and attn ~= json.null and type(attn) ~= "table" then return "attn_config", "a JSON object" end
    local clip = type(attn) == "table" and attn.clip_qkv
    if clip ~= nil and clip ~= json.null and clip ~= false then
      return "attn_config.clip_qkv", "the clamped copy of Wqkv's output is not modelled"
    end
  end,
  derive = function(config, values, origins, path)
    local attn = config.attn_config
    local p = type(attn) == "table" and attn.attn_pdrop
    if p ~= nil and p ~= json.null and p ~= false then
      values.dropout = p
      origins.dropout = path .. ": attn_config.attn_pdrop"
    end
  end,
}

-- T5ForConditionalGeneration (T5, T5 v1.1, Flan-T5, T0): defaults are
-- T5Config's, for the keys a config.json leaves out; mT5 (mT0) has
-- MT5Config's. Only the encoder-decoder is modelled: a config that says
-- is_encoder_decoder = false (T5EncoderModel) is refused.
local t5_keys = {
  d_model = "hidden", num_layers = "layers", num_decoder_layers = "decoder_layers", num_heads = "heads",
  d_kv = "head_dim", d_ff = "intermediate", vocab_size = "vocab", relative_attention_num_buckets = "buckets",
  dropout_rate = "dropout", layer_norm_epsilon = "norm_eps", feed_forward_proj = "feed_forward",
  tie_word_embeddings = "tie_embeddings",
}
local function t5_check(config)
  if config.is_encoder_decoder == false then
    return "is_encoder_decoder", "only the encoder-decoder (T5ForConditionalGeneration) is modelled"
  end
end
mappings.t5 = {
  family = "t5", keys = t5_keys, check = t5_check,
  defaults = { hidden = 512, layers = 6, heads = 8, head_dim = 64, intermediate = 2048, vocab = 32128,
               feed_forward = "relu", tie_embeddings = true },
}
mappings.mt5 = {
  family = "t5", keys = t5_keys, check = t5_check,
  defaults = { hidden = 512, layers = 8, heads = 6, head_dim = 64, intermediate = 1024, vocab = 250112,
               feed_forward = "gated-gelu", tie_embeddings = false },
}

-- DeepSeek's shared experts: n_shared_experts of moe_intermediate_size, one MLP
local function shared_experts(config, values, origins, path)
  local shared, width = config.n_shared_experts, config.moe_intermediate_size
  if type(shared) == "number" and type(width) == "number" then
    values.shared_intermediate = shared * width
    origins.shared_intermediate = path .. ": n_shared_experts x moe_intermediate_size"
  end
end

-- DeepSeekMoE (deepseek-ai/deepseek-moe-16b-base, model_type deepseek, its
-- own modeling code): routed experts after first_k_dense_replace dense
-- layers, n_shared_experts experts of moe_intermediate_size merged into one
-- ungated MLP, and a sequence-wise auxiliary loss in training.
mappings.deepseek = extend(mappings.llama, {
  keys = {
    n_routed_experts = "experts", num_experts_per_tok = "experts_per_token", moe_intermediate_size = "moe_intermediate",
    first_k_dense_replace = "dense_layers", norm_topk_prob = "norm_topk",
  },
  defaults = presets.values("deepseek"),
  check = function(config)
    local freq = config.moe_layer_freq
    if freq ~= nil and freq ~= 1 then return "moe_layer_freq", "only 1 (every layer after the dense ones) is supported" end
    local scoring = config.scoring_func
    if scoring ~= nil and scoring ~= "softmax" then return "scoring_func", "only softmax is supported" end
    if config.n_routed_experts == nil then return "n_routed_experts", "a DeepSeekMoE config names its routed experts" end
  end,
  -- fields made of several keys
  derive = function(config, values, origins, path)
    shared_experts(config, values, origins, path)
    local alpha = config.aux_loss_alpha
    values.aux_loss = type(alpha) == "number" and alpha > 0
    origins.aux_loss = path .. ": aux_loss_alpha"
  end,
})

-- The config keys DeepSeek-V2 and V3 share (multi-head latent attention,
-- routed experts after first_k_dense_replace dense layers), with `extra`.
local function latent_moe_keys(extra)
  local keys = {
    n_routed_experts = "experts", num_experts_per_tok = "experts_per_token", moe_intermediate_size = "moe_intermediate",
    first_k_dense_replace = "dense_layers", norm_topk_prob = "norm_topk", n_group = "expert_groups",
    topk_group = "topk_groups", q_lora_rank = "q_lora_rank", kv_lora_rank = "kv_lora_rank",
    qk_nope_head_dim = "qk_nope_head_dim", qk_rope_head_dim = "qk_rope_head_dim", v_head_dim = "v_head_dim",
  }
  for k, v in pairs(extra) do keys[k] = v end
  return keys
end

-- Their fields made of several keys: the shared experts, and q_lora_rank
-- null (one q_proj).
local function latent_moe_derive(config, values, origins, path)
  shared_experts(config, values, origins, path)
  if config.q_lora_rank == json.null then
    values.q_lora_rank = 0
    origins.q_lora_rank = path .. ": q_lora_rank (null: one q_proj)"
  end
end

-- DeepSeek-V2, V2-Lite, V2.5 and Coder-V2 (model_type deepseek_v2), as the
-- checkpoints' own modeling_deepseek.py runs them (auto_map,
-- trust_remote_code): multi-head latent attention (q_lora_rank null: one
-- q_proj), first_k_dense_replace dense layers, then routed experts behind a
-- softmax gate (topk_method greedy or group_limited_greedy over n_group
-- groups), n_shared_experts experts of moe_intermediate_size merged into one
-- MLP, and the sequence-wise auxiliary loss. rope_scaling (yarn) changes the
-- rotary caches' values, not their size.
-- A config.json without auto_map names no modeling file of its own: AutoModel
-- loads it with transformers' DeepseekV2ForCausalLM (4.54+; its
-- auto_factory uses remote code only where the config's auto_map names it),
-- as the deepseek_v2_hf preset describes, the route that trains in 16-bit.
local function remote_code(config) return config.auto_map ~= nil and config.auto_map ~= json.null end
mappings.deepseek_v2 = extend(mappings.llama, {
  keys = latent_moe_keys({}),
  defaults = presets.values("deepseek_v2"),
  check = function(config)
    if config.kv_lora_rank == nil then return "kv_lora_rank", "a DeepSeek-V2 config names its latent width" end
    if config.n_routed_experts == nil then return "n_routed_experts", "a DeepSeek-V2 config names its routed experts" end
    local freq = config.moe_layer_freq
    if freq ~= nil and freq ~= 1 then return "moe_layer_freq", "only 1 (every layer after the dense ones) is supported" end
    local scoring = config.scoring_func
    if scoring ~= nil and scoring ~= "softmax" then return "scoring_func", "only softmax is supported" end
    local method = config.topk_method
    if method ~= nil and method ~= "greedy" and method ~= "group_limited_greedy" then
      return "topk_method", "must be greedy or group_limited_greedy (DeepSeek-V2's gate in training)"
    end
    if not remote_code(config) then return end -- transformers' class reads neither
    if config.seq_aux == false then return "seq_aux", "only the sequence-wise auxiliary loss (true) is modelled" end
    -- AddAuxiliaryLoss.apply(y, aux_loss) runs in training whatever alpha is
    local alpha = config.aux_loss_alpha
    if alpha ~= nil and not (type(alpha) == "number" and alpha > 0) then
      return "aux_loss_alpha", "DeepSeek-V2's modeling code trains only with a positive alpha (no loss: AddAuxiliaryLoss fails)"
    end
  end,
  derive = function(config, values, origins, path)
    latent_moe_derive(config, values, origins, path)
    if not remote_code(config) then
      -- the preset's fields replace those of DeepSeek's own file
      for _, field in ipairs({ "layer_rotary", "rope_interleave", "aux_loss", "shifted_loss" }) do values[field] = false end
      for field, v in pairs(presets.values("deepseek_v2_hf")) do values[field] = v end
      for _, field in ipairs({ "layer_rotary", "rope_interleave", "aux_loss", "shifted_loss", "moe_block",
                               "complex_rotary", "masking_utils" }) do
        origins[field] = path .. ": no auto_map (transformers' DeepseekV2ForCausalLM)"
      end
    end
    values.group_limited = config.topk_method == "group_limited_greedy"
    origins.group_limited = path .. ": topk_method"
    if config.topk_method ~= "group_limited_greedy" then -- greedy ignores n_group and topk_group
      values.expert_groups, values.topk_groups = 1, 1
    end
  end,
})

-- DeepseekV3ForCausalLM (transformers 4.51+; DeepSeek-V3/R1, Kimi-K2):
-- multi-head latent attention, first_k_dense_replace dense layers, then
-- routed experts behind a sigmoid, group-limited router, n_shared_experts
-- experts of moe_intermediate_size merged into one MLP. The multi-token
-- prediction layers the checkpoints carry are not loaded by transformers.
mappings.deepseek_v3 = extend(mappings.llama, {
  keys = latent_moe_keys({ rope_interleave = "rope_interleave" }),
  defaults = presets.values("deepseek_v3"),
  check = function(config)
    if config.kv_lora_rank == nil then return "kv_lora_rank", "a DeepSeek-V3 config names its latent width" end
  end,
  derive = latent_moe_derive,
})

-- GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b; transformers 5): the preset
-- (vramplan.presets) and the keys it adds. layer_types, rope_scaling (YaRN)
-- and swiglu_limit change no tensor's size: both masks are made whatever
-- the layers' order.
mappings.gpt_oss = extend(mappings.llama, {
  keys = { num_local_experts = "experts", num_experts_per_tok = "experts_per_token", sliding_window = "sliding_window",
           output_router_logits = "router_aux_loss" },
  defaults = presets.values("gpt_oss"),
})

-- A checkpoint quantized by bitsandbytes (transformers' BitsAndBytesConfig,
-- saved as quantization_config): its weights are stored in that format, so
-- it fixes the recipe's quant and double_quant (compute_dtype is a default:
-- from_pretrained may set another) and only adapters train over it.
-- Returns { keys = recipe keys, fixed = { key = true }, origins = key -> origin }
-- or nil. Other quantization methods are refused, not estimated as if the
-- weights were in torch_dtype.
local compute_dtypes = { bfloat16 = "bf16", float16 = "fp16", float32 = "fp32" }
local function checkpoint_quantization(config, path)
  local q = config.quantization_config
  if q == nil or q == json.null then return nil end
  local where = path .. ": quantization_config"
  if type(q) ~= "table" then error(where .. ": a JSON object", 0) end
  -- gpt-oss's MXFP4 experts: fine-tuning loads them dequantized to
  -- torch_dtype (Mxfp4Config(dequantize=True), as OpenAI's fine-tuning
  -- recipe does; transformers' Mxfp4HfQuantizer does not train the packed
  -- weights), so the model is estimated in its torch_dtype, and the load's
  -- dequantization counts in the run's reservation (checkpoint_quant, a
  -- default: a recipe loading a dequantized copy says none)
  if q.quant_method == "mxfp4" and config.model_type == "gpt_oss" then
    return { keys = { checkpoint_quant = "mxfp4" }, fixed = {}, origins = { checkpoint_quant = where .. ".quant_method" },
             dequantized = true }
  end
  if q.quant_method ~= "bitsandbytes" then
    error(string.format("%s.quant_method: %s is not modelled (bitsandbytes 4-bit and 8-bit are); without " ..
      "quantization_config the model is estimated in its torch_dtype", where, tostring(q.quant_method)), 0)
  end
  local out = { keys = {}, fixed = {}, origins = {} }
  local function set(key, value, field, fixed)
    out.keys[key], out.origins[key], out.fixed[key] = value, where .. "." .. field, fixed
  end
  if q.load_in_8bit == true then
    set("quant", "int8", "load_in_8bit", true)
    local threshold = q.llm_int8_threshold
    if threshold ~= nil and threshold ~= json.null then
      if type(threshold) ~= "number" or threshold < 0 then
        error(where .. ".llm_int8_threshold: a number of 0 or more", 0)
      end
      set("llm_int8_threshold", threshold, "llm_int8_threshold", false)
    end
  elseif q.load_in_4bit == true then
    local kind = q.bnb_4bit_quant_type == nil and "fp4" or q.bnb_4bit_quant_type -- BitsAndBytesConfig's default
    if kind ~= "nf4" and kind ~= "fp4" then
      error(string.format("%s.bnb_4bit_quant_type: %s is not nf4 or fp4", where, tostring(kind)), 0)
    end
    set("quant", kind, "bnb_4bit_quant_type", true)
    local double = q.bnb_4bit_use_double_quant == true
    set("double_quant", double, "bnb_4bit_use_double_quant", true)
    local compute = q.bnb_4bit_compute_dtype
    if compute ~= nil and compute ~= json.null then
      if not compute_dtypes[compute] then
        error(string.format("%s.bnb_4bit_compute_dtype: %s is not bfloat16, float16 or float32", where,
          tostring(compute)), 0)
      end
      set("compute_dtype", compute_dtypes[compute], "bnb_4bit_compute_dtype", false)
    end
  else
    error(where .. ": a bitsandbytes config loads in 4 or 8 bits (load_in_4bit or load_in_8bit)", 0)
  end
  return out
end

-- transformers' activation names (ACT2FN in activations.py) -> the core's
-- mlp activation whose memory is the same. The core counts what autograd
-- keeps and what each op allocates, so one name stands for every function
-- that runs as one kernel and keeps the same tensor for backward.
local activation_aliases = {
  gelu = "gelu", gelu_pytorch_tanh = "gelu_pytorch_tanh", gelu_new = "gelu_new", gelu_fast = "gelu_fast",
  quick_gelu = "quick_gelu", relu2 = "relu2", relu = "relu", silu = "silu",
  swish = "silu",            -- nn.SiLU under its other name
  -- AccurateGELUActivation: NewGELUActivation's eight ops in the same order
  -- (pow, tanh, the final product); only its constant is computed otherwise
  gelu_accurate = "gelu_new",
  -- one kernel each whose backward keeps the input, as SiluBackward0 does:
  -- MishBackward0 (nn.Mish), LeakyReluBackward0 (nn.LeakyReLU, not in
  -- place), HardtanhBackward0 (nn.ReLU6 is hardtanh(0, 6))
  mish = "silu", leaky_relu = "silu", relu6 = "silu",
  -- one kernel each whose backward keeps the output, as relu's
  -- threshold_backward does: TanhBackward0, SigmoidBackward0
  tanh = "relu", sigmoid = "relu",
}
-- Names transformers accepts whose memory differs from every op the core has.
local refused_activations = {
  gelu_10 = "ClippedGELUActivation clips gelu's output with torch.clip, which keeps that output for backward " ..
    "besides gelu's input: not modelled",
  gelu_python = "GELUActivation(use_gelu_python) runs x * 0.5 * (1 + erf(x / sqrt(2))) as separate ops that keep " ..
    "three intermediate-sized tensors: not modelled",
  linear = "LinearActivation hands its input on unchanged (no tensor of its own): not modelled",
  laplace = "LaplaceActivation's chain of ops is not modelled",
  prelu = "nn.PReLU has a weight of its own: not modelled",
  xielu = "XIELUActivation has parameters of its own: not modelled",
}

-- The core's activation for a config's value of `key`, or an error naming it.
local function activation(v, key, path)
  if type(v) ~= "string" then return v end
  local name = activation_aliases[v]
  if name then return name end
  local why = refused_activations[v]
  if why then error(string.format("%s: %s: %s: %s", path, key, v, why), 0) end
  local known = {}
  for k in pairs(activation_aliases) do known[#known + 1] = k end
  table.sort(known)
  error(string.format("%s: %s: %s is not an activation transformers names (modelled: %s)", path, key,
    schema.shown(v), table.concat(known, ", ")), 0)
end

-- Returns family name, values (field -> value), origins and a display name,
-- and the checkpoint's quantization (see checkpoint_quantization) if any.
-- A model's name when its config.json does not say (_name_or_path): a
-- checkpoint folder's config.json is named by the folder (the working
-- folder for ./config.json), any other file by its own name.
local function checkpoint_name(path)
  local dir, file = path:match("^(.-)/*([^/]+)$")
  if file ~= "config.json" then return (file:gsub("%.json$", "")) end
  local folder = dir:match("([^/]+)/*$")
  if folder == nil or folder == "." or folder == ".." then
    local cwd = os.getenv("PWD") or ""
    folder = cwd:match("([^/]+)/*$")
  end
  return folder or file
end

function hf.load(path)
  local config, pos, err = json.decode(read(path), 1, json.null)
  if err then error(string.format("%s: invalid JSON: %s", path, err), 0) end
  if type(config) ~= "table" then error(path .. ": a config.json holds one JSON object", 0) end
  local model_type = config.model_type
  local mapping = type(model_type) == "string" and mappings[model_type]
  if not mapping then
    local known = {}
    for k in pairs(mappings) do known[#known + 1] = k end
    table.sort(known)
    error(string.format("%s: model_type: %s is not supported (supported: %s)", path,
      schema.shown(model_type), table.concat(known, ", ")), 0)
  end
  if mapping.check then
    local key, problem = mapping.check(config)
    if key then error(string.format("%s: %s: %s", path, key, problem), 0) end
  end
  local values, origins = {}, {}
  for field, v in pairs(mapping.defaults or {}) do
    values[field] = v
    origins[field] = path .. ": " .. model_type .. " default"
  end
  for key, field in pairs(mapping.keys) do
    local v = config[key]
    if v ~= nil and v ~= json.null then
      if field == "activation" then v = activation(v, key, path) end
      values[field] = v
      origins[field] = path .. ": " .. key
    end
  end
  if mapping.derive then mapping.derive(config, values, origins, path) end
  -- the weights' dtype (transformers 5 writes `dtype`, 4.x `torch_dtype`):
  -- what from_pretrained loads under dtype "auto"
  for _, key in ipairs({ "dtype", "torch_dtype" }) do
    local dtype = compute_dtypes[config[key]]
    if dtype and values.checkpoint_dtype == nil then
      values.checkpoint_dtype, origins.checkpoint_dtype = dtype, path .. ": " .. key
    end
  end
  local name = config._name_or_path
  if type(name) ~= "string" or name == "" then name = checkpoint_name(path) end
  values.name = name
  origins.name = path
  return mapping.family, values, origins, checkpoint_quantization(config, path)
end

return hf
