-- OPT (Meta 2022) as transformers 4.50-4.52 computes OPTForCausalLM with
-- do_layer_norm_before (every size but 350M) and word_embed_proj_dim equal
-- to hidden_size: learned positions counted from the decoder's own all-ones
-- attention mask (a [b, s] lookup, offset by 2 into a table of
-- max_position_embeddings + 2 rows), that mask merged into a [b, 1, s, s]
-- causal mask, separate q/k/v projections with biases (the queries scaled
-- into a new tensor), an out_proj the layer follows with its dropout,
-- LayerNorms with biases, a ReLU MLP of fc1 and fc2, and a head tied to the
-- token embeddings.
return architecture {
  name = "opt",
  doc = "OPT as HF's OPTForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end, doc = "ffn_dim" },
    { "vocab", "int", default = 50272, doc = "vocab_size" },
    { "max_positions", "int", default = 2048, doc = "max_position_embeddings: the learned table (plus 2 rows)" },
    { "dropout", "number", default = 0.1, min = 0, max = 0.999,
      doc = "dropout: on the attention's and the MLP's outputs, in the layer" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "activation", "string", default = "relu", options = op_options("mlp", "activation"),
      doc = "activation_function" },
    { "enable_bias", "bool", default = true, doc = "enable_bias: biases on q/k/v/out_proj, fc1 and fc2" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
  end,
  build = function(c)
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        position_embedding { positions = c.max_positions, hidden = c.hidden, offset = 2, from_mask = true },
      },
      layer = {
        residual {
          layernorm { hidden = c.hidden }, -- self_attn_layer_norm
          attention {
            hidden = c.hidden, heads = c.heads, qkv_bias = c.enable_bias, out_bias = c.enable_bias,
            dropout = c.attn_dropout, upcast_softmax = true, caches = true, mask = "additive-padded",
          },
          dropout { p = c.dropout },
        },
        residual {
          layernorm { hidden = c.hidden }, -- final_layer_norm
          mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = c.enable_bias,
                module_names = "phi" }, -- fc1, fc2
          dropout { p = c.dropout },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden }, -- final_layer_norm
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
