-- GPT-2-style decoders: learned positions, pre-norm LayerNorm with biases,
-- a GELU MLP, fused q/k/v projection (Conv1D), dropout everywhere, and a head
-- tied to the token embedding.
return architecture {
  name = "gpt2",
  doc = "GPT-2 as HF's GPT2LMHeadModel computes it",
  fields = {
    { "hidden", "int", doc = "n_embd" },
    { "layers", "int", max = 10000, doc = "n_layer" },
    { "heads", "int", doc = "n_head" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end, doc = "n_inner (default 4 x hidden)" },
    { "vocab", "int", default = 50257, doc = "vocab_size" },
    { "max_positions", "int", default = 1024, doc = "n_positions: the position table and the per-layer causal-mask buffer" },
    { "activation", "string", default = "gelu_new", options = op_options("mlp", "activation"), doc = "activation_function" },
    { "resid_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "resid_pdrop" },
    { "embed_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "embd_pdrop" },
    { "attn_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "attn_pdrop" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
    { "lua_blocks", "string", default = "",
      doc = "a blocks script whose Lua blocks (mlp) replace the core's ops: gpt2 (GPT-2's MLP, "
            .. "models/blocks/gpt2.lua), or one of your own (blocks/NAME.lua beside the model)" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
  end,
  build = function(c, lua) -- lua: the lua_blocks script's constructors, or nil
    lua = lua or {}
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        position_embedding { positions = c.max_positions, hidden = c.hidden },
        dropout { p = c.embed_dropout },
      },
      layer = {
        residual {
          keeps_branch = true, -- attn_output, a local of GPT2Block.forward
          layernorm { hidden = c.hidden, eps = c.norm_eps },
          attention {
            hidden = c.hidden, heads = c.heads, qkv_bias = true, out_bias = true, fused_qkv = true,
            dropout = c.attn_dropout, resid_dropout = c.resid_dropout, mask = "bool-buffer",
            positions = c.max_positions, upcast_softmax = false, conv1d = true, caches = true, keeps_weights = true,
            cache_tuples = true, -- GPT2Model's presents: a tuple of (key, value) per layer
          },
        },
        residual {
          layernorm { hidden = c.hidden, eps = c.norm_eps },
          lua.mlp and lua.mlp() or mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation,
                                         bias = true, resid_dropout = c.resid_dropout, conv1d = true },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps },
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
