-- GPT-NeoX decoders (EleutherAI's GPT-NeoX-20B and the Pythia suite) as
-- transformers 4.50-4.52 computes GPTNeoXForCausalLM: a fused
-- query_key_value projection viewed per head and chunked into q, k and v
-- (views that keep the whole projection), rotary embeddings on the first
-- rotary_pct of each head joined back with torch.cat, LayerNorms with
-- biases, a 4h GELU MLP, and with use_parallel_residual the attention and
-- the MLP both fed from the layer's input (x + attn(ln1(x)) + mlp(ln2(x))).
-- The head (embed_out) is untied.
return architecture {
  name = "gpt_neox",
  doc = "GPT-NeoX as HF's GPTNeoXForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 10000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end,
      doc = "intermediate_size (default 4 x hidden)" },
    { "vocab", "int", default = 50432, doc = "vocab_size" },
    { "max_positions", "int", default = 2048, doc = "max_position_embeddings (no memory of its own)" },
    { "rotary_pct", "number", default = 0.25, min = 0, max = 1, doc = "rotary_pct: the share of each head rotated" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rotary_emb_base" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_eps" },
    { "parallel_residual", "bool", default = true, doc = "use_parallel_residual" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attention_dropout" },
    { "hidden_dropout", "number", default = 0.0, min = 0, max = 0.999,
      doc = "hidden_dropout: after the embeddings and on each branch's output" },
    { "activation", "string", default = "gelu", options = op_options("mlp", "activation"), doc = "hidden_act" },
    { "attention_bias", "bool", default = true, doc = "attention_bias: biases on query_key_value and dense" },
    { "tie_embeddings", "bool", default = false, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    local rotary_dim = math.floor(c.hidden // c.heads * c.rotary_pct)
    if rotary_dim == 0 or rotary_dim % 2 ~= 0 then
      return "rotary_pct", "must leave an even, nonzero rotated width of each head"
    end
  end,
  build = function(c)
    local head_dim = c.hidden // c.heads
    local rotary_dim = math.floor(head_dim * c.rotary_pct)
    local function attention_branch()
      return sequence {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- input_layernorm
        attention {
          hidden = c.hidden, heads = c.heads, qkv_bias = c.attention_bias, out_bias = c.attention_bias,
          fused_qkv = true, module_names = "bloom", rotary = true, rotary_cat = true,
          rotary_dim = rotary_dim < head_dim and rotary_dim or 0, dropout = c.attn_dropout,
          upcast_softmax = true, caches = true, mask = "additive", keeps_weights = true,
        },
        dropout { p = c.hidden_dropout }, -- post_attention_dropout
      }
    end
    local function mlp_branch()
      return sequence {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- post_attention_layernorm
        mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = true,
              module_names = "bloom" },
        dropout { p = c.hidden_dropout }, -- post_mlp_dropout
      }
    end
    local layer
    if c.parallel_residual then
      layer = { residual { parallel { attention_branch(), mlp_branch() } } }
    else
      layer = { residual { attention_branch() }, residual { mlp_branch() } }
    end
    return decoder {
      -- GPTNeoXLayer registers its two norms before attention and mlp
      norms_registered = "first",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden }, -- embed_in
        rotary_embedding { head_dim = rotary_dim, theta = c.rope_theta },
        dropout { p = c.hidden_dropout }, -- emb_dropout
      },
      layer = layer,
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- final_layer_norm
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings }, -- embed_out
        cross_entropy {},
      },
    }
  end,
}
