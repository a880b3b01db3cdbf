-- GPT-J (EleutherAI 2021) as transformers computes GPTJForCausalLM
-- (models/gptj/modeling_gptj.py, huggingface/transformers commit 00b676f,
-- the 4.5x line): every layer owns an fp32 sin/cos table of n_positions
-- rows (create_sinusoidal_positions, a plain attribute that model.to(dtype)
-- leaves fp32), repeats it over the batch and gathers the positions' rows
-- each step; q and k are rotated every other element (rotate_every_two) on
-- their first rotary_dim of each head, the fp32 tables promoting a 16-bit
-- q and k to fp32, and joined back with torch.cat; _attn makes q and k fp32
-- before the scores. One ln_1 feeds the attention and the MLP
-- (x + attn(ln_1(x)) + mlp(ln_1(x))); separate bias-free q, k, v and
-- out_proj; an fc_in/fc_out MLP with biases; ln_f; an untied lm_head with
-- a bias whose logits are made fp32 (lm_logits.to(torch.float32)).
return architecture {
  name = "gptj",
  doc = "GPT-J as HF's GPTJForCausalLM computes it",
  fields = {
    { "hidden", "int", doc = "n_embd" },
    { "layers", "int", max = 10000, doc = "n_layer" },
    { "heads", "int", doc = "n_head" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end,
      doc = "n_inner (default 4 x n_embd)" },
    { "vocab", "int", default = 50400, doc = "vocab_size (GPTJConfig's default)" },
    { "max_positions", "int", default = 2048, doc = "n_positions: the rows of every layer's sin/cos table" },
    { "rotary_dim", "int", default = 64,
      doc = "rotary_dim: the rotated width of each head (GPTJConfig's default)" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
    { "resid_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "resid_pdrop: on both branches' outputs" },
    { "embed_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "embd_pdrop" },
    { "attn_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "attn_pdrop" },
    { "activation", "string", default = "gelu_new", options = op_options("mlp", "activation"),
      doc = "activation_function" },
    { "tie_embeddings", "bool", default = false, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    if c.rotary_dim == 0 or c.rotary_dim % 2 ~= 0 or c.rotary_dim > c.hidden // c.heads then
      return "rotary_dim", "must be even, nonzero and no wider than a head"
    end
  end,
  build = function(c)
    return decoder {
      -- GPTJBlock registers ln_1 before attn and mlp
      norms_registered = "first",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden }, -- wte
        dropout { p = c.embed_dropout }, -- drop
      },
      layer = {
        residual {
          -- ln_1: its output is hidden_states until the final add rebinds it
          layernorm { hidden = c.hidden, eps = c.norm_eps, layer_local = true },
          parallel {
            attention {
              hidden = c.hidden, heads = c.heads, rotary = true, rotary_style = "gptj",
              rotary_dim = c.rotary_dim, positions = c.max_positions,
              dropout = c.attn_dropout, resid_dropout = c.resid_dropout, upcast_softmax = false, caches = true,
              mask = "additive", keeps_weights = true,
            },
            mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation, bias = true,
                  resid_dropout = c.resid_dropout, module_names = "phi" }, -- fc_in, fc_out
          },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- ln_f
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings, bias = true, float_logits = true },
        cross_entropy {},
      },
    }
  end,
}
