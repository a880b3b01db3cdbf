-- BERT encoders for sequence classification (BertForSequenceClassification,
-- transformers 4.26-4.4x, eager attention): word, position and token-type
-- embeddings summed, LayerNorm and dropout; post-norm layers (attention,
-- then LayerNorm of the sum; GELU MLP, then LayerNorm of the sum) with no
-- causal mask, only the additive padding mask; the pooler on the first token
-- and a classifier over the labels, cross-entropy per sequence.
return architecture {
  name = "bert",
  doc = "BERT encoder with a sequence-classification head, as HF's BertForSequenceClassification computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "intermediate", "int", doc = "intermediate_size" },
    { "vocab", "int", doc = "vocab_size" },
    { "max_positions", "int", default = 512, doc = "max_position_embeddings" },
    { "type_vocab", "int", default = 2, doc = "type_vocab_size" },
    { "norm_eps", "number", default = 1e-12, min = 0, doc = "layer_norm_eps" },
    { "dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "hidden_dropout_prob" },
    { "attn_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "attention_probs_dropout_prob" },
    { "activation", "string", default = "gelu", options = op_options("mlp", "activation"), doc = "hidden_act" },
    { "labels", "int", default = 2, doc = "num_labels" },
    { "lua_blocks", "string", default = "",
      doc = "a blocks script whose Lua blocks (attention: BertAttention with its LayerNorm) replace the core's ops: "
            .. "bert (models/blocks/bert.lua), or one of your own (blocks/NAME.lua beside the model)" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then
      return "heads", string.format("must divide hidden (%d)", c.hidden)
    end
  end,
  build = function(c, lua) -- lua: the lua_blocks script's constructors, or nil
    lua = lua or {}
    -- BertAttention: BertSelfAttention, then BertSelfOutput's dense, dropout
    -- and LayerNorm of the sum with the layer's input. BertSelfOutput and
    -- BertOutput end with the norm: what the blocks name lives until it
    -- returns (post_norm, holds_context, holds_activation)
    local layer = lua.attention and { lua.attention() } or {
      residual {
        post_norm = true,
        attention {
          hidden = c.hidden, heads = c.heads, qkv_bias = true, out_bias = true,
          dropout = c.attn_dropout, resid_dropout = c.dropout, mask = "padding",
          upcast_softmax = false, cast_probs = false, module_names = "bert", holds_context = true,
          scores_local = true, probs_local = true, returns_before_out_proj = true,
        },
      },
      layernorm { hidden = c.hidden, eps = c.norm_eps },
    }
    layer[#layer + 1] = residual {
      post_norm = true,
      mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = true,
            resid_dropout = c.dropout, module_names = "bert", holds_activation = true },
    }
    layer[#layer + 1] = layernorm { hidden = c.hidden, eps = c.norm_eps }
    return decoder {
      -- BertEmbeddings' lookups are its own locals, gone when it returns;
      -- BertModel's embedding_output is layer 0's input
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = false },
        token_type_embedding { types = c.type_vocab, hidden = c.hidden, ids_buffer = c.max_positions },
        position_embedding { positions = c.max_positions, hidden = c.hidden, in_place = true, model_local = false,
                             ids_buffer = true },
        layernorm { hidden = c.hidden, eps = c.norm_eps },
        dropout { p = c.dropout, model_local = true }, -- BertModel's embedding_output
      },
      layer = layer,
      layers = c.layers,
      -- BertEmbeddings registers word, position, token type, LayerNorm
      -- (a for-loop optimizer's order); its forward adds the token types first
      embed_registered = { 1, 3, 2, 4, 5 },
      final = {
        pooler { hidden = c.hidden },
        classifier { hidden = c.hidden, labels = c.labels, dropout = c.dropout },
        cross_entropy { upcast = false, per_sequence = true },
      },
    }
  end,
}
