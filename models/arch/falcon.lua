-- Falcon (TII 2023) as transformers computes FalconForCausalLM
-- (models/falcon/modeling_falcon.py, huggingface/transformers commit
-- 00dcc6d of the 4.5x line), rotary path (alibi false): one fused
-- query_key_value split by _split_heads (falcon-7b's multi_query: the
-- queries a view, the one key and value head copies indexed with a list;
-- new_decoder_architecture, Falcon-40B/180B and Falcon2-11B: keys and
-- values indexed per group, broadcast and copied to every query head, the
-- queries copied too), LLaMA's rotary tables and rotate_half, eager scores
-- divided in place and a softmax in the input's dtype, no dropout on them;
-- an exact-GELU MLP (dense_h_to_4h, dense_4h_to_h); attention and MLP side
-- by side, the MLP's output taking the attention's in place
-- (mlp_output += attention_output), then dropout_add onto the residual;
-- one input_layernorm, or with new_decoder_architecture and
-- num_ln_in_parallel_attn 2 (its default there) ln_attn and ln_mlp, both
-- made before the attention; LayerNorms with biases, projections without
-- (bias false: FalconLinear's separate bias add is not modelled), a head
-- tied to the word embeddings.
return architecture {
  name = "falcon",
  doc = "Falcon as HF's FalconForCausalLM computes it (rotary, parallel attention)",
  fields = {
    { "hidden", "int", default = 4544, doc = "hidden_size (FalconConfig's default)" },
    { "layers", "int", default = 32, max = 10000, doc = "num_hidden_layers (n_layer)" },
    { "heads", "int", default = 71, doc = "num_attention_heads (n_head)" },
    { "multi_query", "bool", default = true, doc = "multi_query: one key/value head (without new_decoder_architecture)" },
    { "new_decoder_architecture", "bool", default = false,
      doc = "new_decoder_architecture: kv_heads key/value groups, and two norms unless norms = 1" },
    { "kv_heads", "int",
      default = function(c) return (c.multi_query and not c.new_decoder_architecture) and 1 or c.heads end,
      doc = "num_kv_heads (n_head_kv): the groups of new_decoder_architecture (multi_query: 1)" },
    { "norms", "int", default = 2, min = 1, max = 2,
      doc = "num_ln_in_parallel_attn with new_decoder_architecture (null: 2): ln_attn and ln_mlp, or one input_layernorm" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end,
      doc = "ffn_hidden_size (default 4 x hidden_size)" },
    { "vocab", "int", default = 65024, doc = "vocab_size (FalconConfig's default)" },
    { "max_positions", "int", default = 2048, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
    { "hidden_dropout", "number", default = 0.0, min = 0, max = 0.999, doc = "hidden_dropout: dropout_add's" },
    { "activation", "string", default = "gelu", options = op_options("mlp", "activation"), doc = "activation" },
    { "use_cache", "bool", default = true,
      doc = "use_cache (FalconConfig's default true): with the recipe's use_cache, the outputs keep every layer's keys and values" },
    { "tie_embeddings", "bool", default = true, doc = "tie_word_embeddings" },
  },
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", string.format("must divide hidden (%d)", c.hidden) end
    if (c.hidden // c.heads) % 2 ~= 0 then return "heads", "must leave an even head width (rotary)" end
    if c.new_decoder_architecture then
      if c.heads % c.kv_heads ~= 0 then return "kv_heads", string.format("must divide heads (%d)", c.heads) end
      if c.kv_heads == 1 and c.heads > 1 then
        return "kv_heads", "one group of several heads under new_decoder_architecture is not modelled"
      end
    elseif not c.multi_query and c.kv_heads ~= c.heads then
      return "kv_heads", "without multi_query or new_decoder_architecture every head has its own key and value"
    end
  end,
  build = function(c)
    local head_dim = c.hidden // c.heads
    local split, kv_heads = "falcon-heads", c.heads
    if c.new_decoder_architecture then
      split, kv_heads = "falcon-grouped", c.kv_heads
    elseif c.multi_query then
      split, kv_heads = "falcon-multi-query", 1
    end
    local function norm() return layernorm { hidden = c.hidden, eps = c.norm_eps, layer_local = true } end
    local attention_op = attention {
      hidden = c.hidden, heads = c.heads, kv_heads = kv_heads, fused_qkv = true, split = split,
      module_names = "bloom", rotary = true, mask = "additive-keys", scale_in_place = true,
      upcast_softmax = false, cast_probs = false, probs_local = true, caches = c.use_cache,
    }
    local mlp_op = mlp { hidden = c.hidden, intermediate = c.intermediate, activation = c.activation,
                         module_names = "bloom" }
    local branches
    if c.new_decoder_architecture and c.norms == 2 then
      -- ln_attn(hidden_states) and ln_mlp(hidden_states), then the attention and the MLP
      branches = parallel { in_place = true, inputs_first = true,
                            sequence { norm(), attention_op }, sequence { norm(), mlp_op } }
    else
      -- input_layernorm's output feeds both
      branches = { norm(), parallel { in_place = true, attention_op, mlp_op } }
    end
    local layer_ops = c.new_decoder_architecture and c.norms == 2 and { branches } or branches
    layer_ops.names_last_input = true -- mlp_output lives through dropout_add
    layer_ops[#layer_ops + 1] = dropout { p = c.hidden_dropout }
    return decoder {
      -- FalconDecoderLayer registers self_attention and mlp before its norms
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true }, -- word_embeddings
        rotary_embedding { head_dim = head_dim, theta = c.rope_theta },
      },
      layer = { residual(layer_ops) },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps }, -- ln_f
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
