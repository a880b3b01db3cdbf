-- BLOOM (BigScience 2022): a decoder with ALiBi instead of position
-- embeddings, a LayerNorm right after the token embedding, a fused
-- query_key_value projection, biases everywhere, a 4h GELU MLP (BLOOM's own
-- autograd function) and a head tied to the embedding. Modelled as
-- transformers 4.26-4.27 runs BloomForCausalLM (the release PEFT's published
-- BLOOM runs used): eager attention only, a [b, 1, s, s] bool mask per step,
-- the model's own shifted loss without an fp32 upcast.
return architecture {
  name = "bloom",
  doc = "BLOOM as HF's BloomForCausalLM (transformers 4.26-4.27) computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size (n_embed)" },
    { "layers", "int", max = 10000, doc = "n_layer" },
    { "heads", "int", doc = "n_head" },
    { "vocab", "int", default = 250880, doc = "vocab_size" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
    { "hidden_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "hidden_dropout (in dropout_add)" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
  end,
  build = function(c)
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- word_embeddings_layernorm
      },
      layer = {
        residual {
          layernorm { hidden = c.hidden, eps = c.norm_eps },
          attention {
            hidden = c.hidden, heads = c.heads, qkv_bias = true, out_bias = true, fused_qkv = true,
            alibi = true, mask = "bool", upcast_softmax = true, dropout = c.attn_dropout,
            resid_dropout = c.hidden_dropout, caches = true, module_names = "bloom", probs_local = true,
            cache_tuples = true, -- BloomModel's presents: a tuple of (key, value) per layer
          },
        },
        residual {
          layernorm { hidden = c.hidden, eps = c.norm_eps },
          -- BloomMLP's hidden_states (the GeLU's output) and intermediate_output
          -- live through its dropout_add, as MptMLP's do
          mlp { hidden = c.hidden, intermediate = 4 * c.hidden, activation = "bloom_gelu", bias = true,
                resid_dropout = c.hidden_dropout, module_names = "bloom", holds_activation = true, holds_output = true },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- ln_f
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = true },
        cross_entropy { upcast = false, shift = "logits" },
      },
    }
  end,
}
