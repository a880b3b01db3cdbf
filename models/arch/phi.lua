-- Phi-1, Phi-1.5 and Phi-2 (Microsoft) as transformers 4.50-4.52 computes
-- PhiForCausalLM: one LayerNorm a layer whose output feeds both the
-- attention and the MLP (x + attn(ln(x)) + mlp(ln(x))), separate q, k, v
-- projections with biases and an output projection named dense, rotary
-- embeddings on partial_rotary_factor of each head joined back with
-- torch.cat, a GELU MLP of fc1 and fc2, resid_pdrop dropout on both
-- branches, a final LayerNorm and an untied head with a bias.
return architecture {
  name = "phi",
  doc = "Phi-1/Phi-2 as HF's PhiForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "kv_heads", "int", default = function(c) return c.heads end, doc = "num_key_value_heads" },
    { "intermediate", "int", doc = "intermediate_size" },
    { "vocab", "int", default = 51200, doc = "vocab_size" },
    { "max_positions", "int", default = 2048, doc = "max_position_embeddings (no memory of its own)" },
    { "partial_rotary_factor", "number", default = 0.5, min = 0, max = 1,
      doc = "partial_rotary_factor: the share of each head rotated" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_eps" },
    { "resid_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "resid_pdrop: on both branches' outputs" },
    { "embed_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "embd_pdrop" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "activation", "string", default = "gelu_new", options = op_options("mlp", "activation"), doc = "hidden_act" },
    { "tie_embeddings", "bool", default = false, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    if c.heads % c.kv_heads ~= 0 then return "kv_heads", string.format("must divide heads (%d)", c.heads) end
    local rotary_dim = math.floor(c.hidden // c.heads * c.partial_rotary_factor)
    if rotary_dim == 0 or rotary_dim % 2 ~= 0 then
      return "partial_rotary_factor", "must leave an even, nonzero rotated width of each head"
    end
  end,
  build = function(c)
    local head_dim = c.hidden // c.heads
    local rotary_dim = math.floor(head_dim * c.partial_rotary_factor)
    return decoder {
      -- PhiDecoderLayer registers self_attn, mlp, then input_layernorm
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        rotary_embedding { head_dim = rotary_dim, theta = c.rope_theta },
        dropout { p = c.embed_dropout },
      },
      layer = {
        residual {
          -- input_layernorm: its output is hidden_states until the final add rebinds it
          layernorm { hidden = c.hidden, eps = c.norm_eps, layer_local = true },
          parallel {
            attention {
              hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, qkv_bias = true, out_bias = true,
              module_names = "phi", rotary = true, rotary_cat = true, rotary_locals = true,
              rotary_dim = rotary_dim < head_dim and rotary_dim or 0, dropout = c.attn_dropout,
              resid_dropout = c.resid_dropout, upcast_softmax = true, caches = true, mask = "additive",
              keeps_weights = true,
            },
            mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = true,
                  resid_dropout = c.resid_dropout, module_names = "phi" },
          },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- final_layernorm
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, bias = true },
        cross_entropy {},
      },
    }
  end,
}
