-- MPT (MosaicML 2023) as transformers 4.50-4.52 computes MptForCausalLM
-- (models/mpt/modeling_mpt.py): no position embeddings but an ALiBi table
-- of max_seq_len columns made once per step in fp32 (and never cast), the
-- eager mask of _prepare_4d_causal_attention_mask made bool, LayerNorms
-- without biases (the module's bias set to None), one Wqkv projection
-- chunked into q, k and v views, no biases anywhere, the scores scaled,
-- then summed with the table in fp32, an out_proj whose dropout comes in
-- the block, an exact-GELU MLP of up_proj and down_proj (4 x d_model, as
-- MptMLP fixes it) with its dropout and residual add inside, and a head
-- tied to the token embeddings. Every dropout is attn_config.attn_pdrop.
-- MptBlock keeps the attention's probabilities and its past_key_value
-- (views of Wqkv's output) until it returns, use_cache or not.
return architecture {
  name = "mpt",
  doc = "MPT as HF's MptForCausalLM (transformers 4.50-4.52) computes it",
  fields = {
    { "hidden", "int", doc = "d_model" },
    { "layers", "int", max = 10000, doc = "n_layers" },
    { "heads", "int", doc = "n_heads" },
    { "vocab", "int", default = 50368, doc = "vocab_size (MptConfig's default)" },
    { "max_positions", "int", default = 2048, doc = "max_seq_len: the ALiBi table's width and the longest sequence" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
    { "dropout", "number", default = 0.0, min = 0, max = 0.999,
      doc = "attn_config.attn_pdrop: on the probabilities, the attention's output and the MLP's" },
    { "use_cache", "bool", default = false,
      doc = "use_cache (MptConfig's default false): with the recipe's use_cache, the outputs keep every layer's keys and values" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
  end,
  build = function(c)
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden }, -- wte
      },
      layer = {
        residual {
          keeps_branch = true, -- attn_outputs, a local of MptBlock.forward
          layernorm { hidden = c.hidden, eps = c.norm_eps, bias = false }, -- norm_1
          attention {
            hidden = c.hidden, heads = c.heads, fused_qkv = true, alibi = true, alibi_style = "mpt",
            positions = c.max_positions, mask = "bool-4d", upcast_softmax = true, dropout = c.dropout,
            caches = c.use_cache, returns_kv = true, keeps_weights = true, module_names = "mpt",
          },
          dropout { p = c.dropout }, -- resid_attn_dropout
        },
        residual {
          -- norm_2's layernorm_output, a local of MptBlock.forward
          layernorm { hidden = c.hidden, eps = c.norm_eps, bias = false, layer_local = true },
          -- MptMLP's hidden_states and intermediate_output live through its residual add
          mlp { hidden = c.hidden, intermediate = 4 * c.hidden, activation = "gelu", resid_dropout = c.dropout,
                module_names = "mpt", holds_activation = true, holds_output = true },
        },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps, bias = false }, -- norm_f
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
