-- T5 (Raffel et al. 2020) and its descendants (T5 v1.1, mT5, T0, mT0,
-- Flan-T5): an encoder-decoder as HF's T5ForConditionalGeneration computes
-- it (transformers 4.46-4.52). Pre-norm blocks with T5's RMSNorm, relative
-- position biases made once per stack (by its first layer's
-- relative_attention_bias) and added, masks included, to every layer's
-- unscaled scores; the decoder's blocks add cross-attention over the
-- encoder's output. One embedding is shared by the encoder, the decoder and,
-- when tied (T5 v1.0), the head, whose input is then scaled by d_model^-0.5.
-- The decoder runs on the labels' length (the recipe's target_len), fed the
-- labels shifted right. transformers has T5 in eager attention only.
local activation_names = op_options("mlp", "activation") -- the activations the core counts
local activations = {}
for _, name in ipairs(activation_names) do activations[name] = true end

-- feed_forward_proj as T5Config reads it: "act" or "gated-act";
-- "gated-gelu" means gelu_new.
local function feed_forward(name)
  if name == "gated-gelu" then return true, "gelu_new" end
  local gated, act = name:match("^(gated)%-(.+)$")
  return gated ~= nil, act or name
end

return architecture {
  name = "t5",
  doc = "T5-style encoder-decoder as HF's T5ForConditionalGeneration (transformers 4.46-4.52) computes it",
  fields = {
    { "hidden", "int", doc = "d_model" },
    -- encoder and decoder together within the core's 10,000 layers (model.h)
    { "layers", "int", max = 5000, doc = "num_layers (the encoder's blocks)" },
    { "decoder_layers", "int", default = function(c) return c.layers end, max = 5000,
      doc = "num_decoder_layers (default: as many as the encoder)" },
    { "heads", "int", doc = "num_heads" },
    { "head_dim", "int", default = 64, doc = "d_kv (heads x d_kv need not be d_model)" },
    { "intermediate", "int", doc = "d_ff" },
    { "vocab", "int", default = 32128, doc = "vocab_size" },
    { "buckets", "int", default = 32, doc = "relative_attention_num_buckets" },
    { "dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "dropout_rate (every dropout of the model)" },
    { "norm_eps", "number", default = 1e-6, min = 0, doc = "layer_norm_epsilon" },
    { "feed_forward", "string", default = "relu",
      doc = "feed_forward_proj: relu (T5), gated-gelu (T5 v1.1, mT5, T0), gated-silu, ..." },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings (T5 v1.0: true; v1.1 and mT5: false)" },
  },
  check = function(c)
    local _, act = feed_forward(c.feed_forward)
    if not activations[act] then
      return "feed_forward", string.format("unknown activation %q (%s)", act, table.concat(activation_names, ", "))
    end
  end,
  build = function(c)
    local gated, act = feed_forward(c.feed_forward)
    local p = c.dropout
    local function norm() return rmsnorm { hidden = c.hidden, eps = c.norm_eps, style = "t5" } end
    local function attention_layer(extra)
      local fields = {
        hidden = c.hidden, heads = c.heads, head_dim = c.head_dim, mask = "none", position_bias = true,
        dropout = p, module_names = "t5", probs_local = true,
      }
      for k, v in pairs(extra) do fields[k] = v end
      -- T5LayerSelfAttention / T5LayerCrossAttention: x + dropout(attention(norm(x))),
      -- the attention's outputs a local (attention_output) until the sub-layer returns
      return residual { names_last_input = true, norm(), attention(fields), dropout { p = p } }
    end
    local function feed_forward_layer()
      -- T5LayerFF: x + dropout(DenseReluDense(norm(x))), DenseReluDense's
      -- output a local (forwarded_states) until the sub-layer returns
      return residual {
        names_last_input = true,
        norm(),
        mlp { hidden = c.hidden, intermediate = c.intermediate, gated = gated, activation = act,
              inner_dropout = p, module_names = "t5" },
        dropout { p = p },
      }
    end
    return decoder {
      -- each T5Layer* registers its module (SelfAttention, DenseReluDense) before its layer_norm
      norms_registered = "after_branch",
      embed = {
        -- T5Stack (encoder): inputs_embeds a local of the stack, its dropout,
        -- the padding mask and the encoder's bidirectional position bias
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true },
        dropout { p = p },
        position_bias { heads = c.heads, buckets = c.buckets, kind = "encoder" },
      },
      -- T5Block clamps fp16 hidden states after each of its layers
      first_layer = { attention_layer {}, fp16_clamp {}, feed_forward_layer(), fp16_clamp {} },
      first_layers = c.layers,
      bridge = {
        norm(), -- the encoder's final_layer_norm
        dropout { p = p },
        decoder_start { hidden = c.hidden },
        position_bias { heads = c.heads, buckets = c.buckets, kind = "decoder" },
        position_bias { heads = c.heads, buckets = c.buckets, kind = "cross" },
        dropout { p = p },
      },
      layer = {
        attention_layer { caches = true },
        fp16_clamp {},
        attention_layer { caches = true, cross = true },
        fp16_clamp {},
        feed_forward_layer(),
        fp16_clamp {},
      },
      layers = c.layers + c.decoder_layers,
      final = {
        norm(), -- the decoder's final_layer_norm
        dropout { p = p },
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, scale_input = c.tie_embeddings },
        cross_entropy { upcast = false, shift = "none" },
      },
    }
  end,
}
