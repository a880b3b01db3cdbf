-- Cohere's Command R family (Command R, Command R+, Aya 23) as transformers
-- computes CohereForCausalLM (models/cohere/modeling_cohere.py,
-- huggingface/transformers commit 015bfeb of the 4.5x line): LLaMA's body,
-- mask, eager attention and SwiGLU MLP, with CohereLayerNorm (a bias-free
-- LayerNorm written out in fp32) for every norm, the rotary tables applied
-- to interleaved pairs in fp32 and cast back, with use_qk_norm a
-- CohereLayerNorm over each query and key head (a [heads, head_dim] weight,
-- after all three projections), attention and MLP side by side on one
-- input_layernorm and added to the residual one by one (residual +
-- attention + mlp), a head tied to the embeddings and the logits
-- multiplied by logit_scale (a new logits-sized tensor). With
-- sliding_pattern it is Cohere2ForCausalLM (Command R7B, Command A:
-- models/cohere2/modeling_cohere2.py at the same commit): layer i slides
-- over sliding_window keys unless (i + 1) is a multiple of the pattern, the
-- sliding layer narrowing the model's mask itself (ones_like, tril, where,
-- then a slice: both kept until the layer returns) and rotating q and k,
-- the global ones with no position embedding at all; Gemma 2's model mask
-- (_update_causal_mask, HybridCache's), and no cache in training
-- (Cohere2Model makes its HybridCache only when not training).
return architecture {
  name = "cohere",
  doc = "Cohere's Command R as HF's CohereForCausalLM computes it",
  fields = {
    { "hidden", "int", default = 8192, doc = "hidden_size (CohereConfig's default)" },
    { "layers", "int", default = 40, max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", default = 64, doc = "num_attention_heads" },
    { "kv_heads", "int", default = function(c) return c.heads end, doc = "num_key_value_heads (default: the heads)" },
    { "intermediate", "int", default = 22528, doc = "intermediate_size of the SwiGLU MLP" },
    { "vocab", "int", default = 256000, doc = "vocab_size" },
    { "max_positions", "int", default = 8192, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_eps" },
    { "attention_bias", "bool", default = false, doc = "attention_bias: biases on q/k/v/o" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "activation", "string", default = "silu", options = op_options("mlp", "activation"), doc = "hidden_act" },
    { "qk_norm", "bool", default = false, doc = "use_qk_norm: CohereLayerNorm over each query and key head" },
    { "use_cache", "bool", default = true,
      doc = "use_cache (CohereConfig's default true): with the recipe's use_cache, the outputs keep every layer's keys and values" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
    { "sliding_window", "int", default = 0, min = 0,
      doc = "Cohere2's sliding_window: keys a sliding layer's query sees at most (0: Cohere's, no window)" },
    { "sliding_pattern", "int", default = 0, min = 0,
      doc = "Cohere2's sliding_window_pattern: layer i slides (with rotary) unless (i + 1) is a multiple of this, "
            .. "the others global without position embeddings (0: Cohere's, every layer global with rotary)" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    if c.heads % c.kv_heads ~= 0 then return "kv_heads", string.format("must divide heads (%d)", c.heads) end
    if c.sliding_pattern > 0 and c.sliding_window == 0 then
      return "sliding_pattern", "needs a sliding_window for the sliding layers"
    end
    if c.sliding_pattern > 0 and c.qk_norm then
      return "sliding_pattern", "is Cohere2's, which has no query/key norms (qk_norm)"
    end
  end,
  build = function(c)
    local function norm(local_) -- CohereLayerNorm
      return layernorm { hidden = c.hidden, eps = c.norm_eps, bias = false, style = "cohere", layer_local = local_ }
    end
    local hybrid = c.sliding_pattern > 0 -- Cohere2
    local layer = {
      residual {
        adds_branches = true, -- residual + hidden_states_attention + hidden_states_mlp
        norm(true), -- input_layernorm: its output is hidden_states until the sum rebinds it
        parallel {
          attention {
            hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, qkv_bias = c.attention_bias,
            out_bias = c.attention_bias, rotary = true, rotary_style = "cohere", qk_norm = c.qk_norm,
            qk_norm_style = "cohere", dropout = c.attn_dropout, upcast_softmax = true,
            caches = c.use_cache and not hybrid, keeps_weights = true,
            mask = hybrid and "additive-hybrid" or "additive", rotary_pattern = c.sliding_pattern,
            peft_defaults = false, -- PEFT has no default LoRA targets for cohere
          },
          mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, gated = true },
        },
      },
    }
    -- Cohere2DecoderLayer narrows the mask before its input_layernorm
    if hybrid then
      table.insert(layer, 1, sliding_mask { window = c.sliding_window, pattern = c.sliding_pattern, narrow = "slice" })
    end
    return decoder {
      -- CohereDecoderLayer registers self_attn and mlp before input_layernorm
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true }, -- embed_tokens
        rotary_embedding { head_dim = c.hidden // c.heads, theta = c.rope_theta },
      },
      layer = layer,
      layers = c.layers,
      final = {
        norm(false), -- norm
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, scale_logits = true }, -- logit_scale
        cross_entropy {},
      },
    }
  end,
}
