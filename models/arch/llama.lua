-- LLaMA-style decoders (Llama 2, Llama 3, Mistral): pre-norm RMSNorm, rotary
-- positions, SwiGLU MLP, grouped-query attention, no biases, untied head.
-- Field names follow vramplan; HF config.json keys map onto them (hf.lua).
return architecture {
  name = "llama",
  doc = "LLaMA-style decoder as HF's LlamaForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 100000, doc = "num_hidden_layers" },
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
    { "mlp_bias", "bool", default = false, doc = "biases on the MLP projections" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "activation", "string", default = "silu", doc = "hidden_act" },
  },
  check = function(c)
    if c.head_dim == c.hidden // c.heads and c.hidden % c.heads ~= 0 then
      return "heads", string.format("must divide hidden (%d) unless head_dim is given", c.hidden)
    end
    if c.heads % c.kv_heads ~= 0 then
      return "kv_heads", string.format("must divide heads (%d)", c.heads)
    end
  end,
  build = function(c)
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        rotary_embedding { head_dim = c.head_dim, theta = c.rope_theta },
      },
      layer = {
        residual {
          rmsnorm { hidden = c.hidden, eps = c.norm_eps },
          attention {
            hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim,
            qkv_bias = c.attention_bias, out_bias = c.attention_bias, rotary = true,
            dropout = c.attn_dropout, mask = "additive", upcast_softmax = true,
          },
        },
        residual {
          rmsnorm { hidden = c.hidden, eps = c.norm_eps },
          mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation,
                gated = true, bias = c.mlp_bias },
        },
      },
      layers = c.layers,
      final = {
        rmsnorm { hidden = c.hidden, eps = c.norm_eps },
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
