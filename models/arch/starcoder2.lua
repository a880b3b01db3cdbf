-- StarCoder2 (BigCode 2024) as transformers 4.50-4.52 computes
-- Starcoder2ForCausalLM, a MistralModel with its own modules: LayerNorms
-- with biases where Mistral has RMSNorms, q/k/v/o projections with biases
-- (use_bias), grouped-query attention with rotary positions and
-- MistralModel's mask narrowed to sliding_window, an ungated MLP of c_fc,
-- a tanh GELU and c_proj, residual_dropout on the attention's and the MLP's
-- outputs inside their modules, embedding_dropout after the embeddings, and
-- a head tied to the embeddings unless the config unties it.
return architecture {
  name = "starcoder2",
  doc = "StarCoder2 as HF's Starcoder2ForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "kv_heads", "int", default = function(c) return c.heads end, doc = "num_key_value_heads (GQA)" },
    { "intermediate", "int", doc = "intermediate_size" },
    { "vocab", "int", default = 49152, doc = "vocab_size" },
    { "max_positions", "int", default = 4096, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "norm_epsilon" },
    { "use_bias", "bool", default = true, doc = "use_bias: biases on q/k/v/o, c_fc and c_proj" },
    { "sliding_window", "int", default = 0, min = 0, doc = "sliding_window: keys a query sees at most (0: none)" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "resid_dropout", "number", default = 0.0, min = 0, max = 0.999,
      doc = "residual_dropout: on the attention's and the MLP's outputs, inside each module" },
    { "embed_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "embedding_dropout" },
    { "activation", "string", default = "gelu_pytorch_tanh", options = op_options("mlp", "activation"),
      doc = "hidden_act" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    if c.heads % c.kv_heads ~= 0 then return "kv_heads", string.format("must divide heads (%d)", c.heads) end
  end,
  build = function(c)
    return decoder {
      -- Starcoder2DecoderLayer (MistralDecoderLayer's order) registers
      -- self_attn, mlp, then its two norms
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        rotary_embedding { head_dim = c.hidden // c.heads, theta = c.rope_theta },
        dropout { p = c.embed_dropout }, -- embedding_dropout
      },
      layer = {
        residual {
          layernorm { hidden = c.hidden, eps = c.norm_eps }, -- input_layernorm
          attention {
            hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, qkv_bias = c.use_bias,
            out_bias = c.use_bias, rotary = true, dropout = c.attn_dropout, resid_dropout = c.resid_dropout,
            upcast_softmax = true, caches = true, keeps_weights = true, mask = "additive-mistral",
            sliding_window = c.sliding_window,
            peft_defaults = false, -- PEFT has no default LoRA targets for starcoder2
          },
        },
        residual {
          layernorm { hidden = c.hidden, eps = c.norm_eps }, -- post_attention_layernorm
          -- c_fc and c_proj: the names an ungated mlp has
          mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = c.use_bias,
                resid_dropout = c.resid_dropout },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- norm
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
