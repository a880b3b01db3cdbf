-- LLaMA's attention with eager_attention_forward written out (transformers
-- 4.48-4.52 modeling_llama.py) and PaliGemma's prefix-LM mask in place of
-- the causal one (F.mask("prefix"): PaliGemmaModel._update_causal_mask in
-- training, transformers 4.50-4.52), for the llama family (lua_blocks =
-- "prefix_lm"): compare.py's prefix-LM cases, mirrored by
-- tests/torch/models/llama.py's prefix_lm_mask. The rest of the layer is
-- the core's.
return {
  build = function(c)
    local function attention()
      local q_out, kv_out = c.heads * c.head_dim, c.kv_heads * c.head_dim
      return block {
        name = "attention",
        width = c.hidden,
        param_labels = "",
        params = {
          { "q_proj", linear = { c.hidden, q_out }, split = "column" },
          { "k_proj", linear = { c.hidden, kv_out }, split = "column" },
          { "v_proj", linear = { c.hidden, kv_out }, split = "column" },
          { "o_proj", linear = { q_out, c.hidden }, split = "row" },
        },
        forward = function(x, p)
          local q = F.keep(p.q_proj(x):view(-1, c.head_dim):transpose(1, 2), "query_states")
          local k = F.keep(p.k_proj(x):view(-1, c.head_dim):transpose(1, 2), "key_states")
          local v = F.keep(p.v_proj(x):view(-1, c.head_dim):transpose(1, 2), "value_states")
          local q_rotated, k_rotated = F.rotary(q, { label = "rotary_q" }), F.rotary(k, { label = "rotary_k" })
          q, k = F.keep(q_rotated, "query_states"), F.keep(k_rotated, "key_states")
          local k_cached, v_cached = F.cache(k, v)
          k, v = F.keep(k_cached, "key_states"), F.keep(v_cached, "value_states")
          -- eager_attention_forward(self, query, key, value, attention_mask, scaling, dropout)
          local out = F.call(function(query, key, value)
            local key_states = F.keep(F.repeat_kv(key, c.heads // c.kv_heads), "key_states")
            local value_states = F.keep(F.repeat_kv(value, c.heads // c.kv_heads), "value_states")
            local w = F.keep(F.mul(F.matmul(query, key_states:transpose(2, 3), { label = "scores", operands = { "q", "k" } }),
              c.head_dim ^ -0.5, { label = "scale" }), "attn_weights")
            w = F.keep(F.add(w, F.mask("prefix"), { label = "mask" }), "attn_weights")
            w = F.keep(F.softmax(w, -1, { dtype = "float32" }):to(query.dtype, { label = "softmax_downcast" }),
              "attn_weights")
            w = F.keep_in_layer(F.keep(F.dropout(w, 0.0, { label = "dropout" }), "attn_weights"))
            local o = F.keep(F.matmul(w, value_states, { label = "context", operands = { "probs", "v" } }), "attn_output")
            return F.keep(o:transpose(1, 2):contiguous({ label = "merge_heads" }), "attn_output")
          end, q, k, v)
          return p.o_proj(out:reshape(-1))
        end,
      }
    end
    return { attention = attention }
  end,
}
