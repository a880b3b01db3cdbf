-- Pieces of LLaMA's decoder layer (transformers' modeling_llama.py,
-- 4.48-4.52) for blocks written in Lua, shared by the scripts that use
-- them (docs/writing-blocks.md, "Libraries of block pieces"):
--   local llama_layers = library "llama_layers"
-- models/blocks/llama.lua, models/examples/arch/{mamba2,jamba,deepseek_v3_mtp}.lua
-- and tests/torch/blocks/prefix_lm.lua use it.
local layers = {}

-- LlamaRMSNorm.forward (Mamba2RMSNorm, JambaRMSNorm and DeepseekV3RMSNorm
-- are its code):
--   input_dtype = hidden_states.dtype
--   hidden_states = hidden_states.to(torch.float32)
--   variance = hidden_states.pow(2).mean(-1, keepdim=True)
--   hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
--   return self.weight * hidden_states.to(input_dtype)
-- hidden_states and variance are locals until it returns: the body of a
-- block's forward, or of a frame of its own (F.call). `labels` names the
-- ops (upcast, add_eps, mul, downcast, weight; layers.rms_norm_labels);
-- without it each has its primitive's name.
function layers.rms_norm(x, weight, eps, labels)
  local function named(step) return labels and labels[step] and { label = labels[step] } or nil end
  local h = F.keep(x:to("float32", named("upcast")), "hidden_states")
  local variance = F.keep(h:pow(2):mean(-1), "variance")
  h = F.keep(F.mul(h, F.rsqrt(F.add(variance, eps, named("add_eps"))), named("mul")), "hidden_states")
  return F.mul(weight, h:to(x.dtype, named("downcast")), named("weight"))
end
-- the labels of the core's own rmsnorm op (engine/ops/op_norm.c), which
-- models/blocks/llama.lua matches event for event
layers.rms_norm_labels = { upcast = "upcast", add_eps = "add_eps", mul = "mul", downcast = "downcast", weight = "weight" }

-- LlamaAttention (transformers 4.48-4.52):
--   hidden_shape = (*input_shape, -1, self.head_dim)
--   query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
--   key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
--   value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
--   query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
--   key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx, ...)
--   attn_output, attn_weights = attention_interface(self, query_states, key_states, value_states,
--       attention_mask, dropout=0.0, scaling=self.scaling)
--   attn_output = attn_output.reshape(*input_shape, -1).contiguous()
--   return self.o_proj(attn_output), attn_weights
-- as a block of the model's fields c (hidden, heads, kv_heads, head_dim);
-- core(q, k, v) is attention_interface: F.sdpa, or layers.eager_attention.
function layers.attention(c, core)
  local q_out, kv_out = c.heads * c.head_dim, c.kv_heads * c.head_dim
  return block {
    name = "attention",
    width = c.hidden,
    param_labels = "", -- the core's attention names them q_proj.weight, ...
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
      local out = core(q, k, v)
      return p.o_proj(out:reshape(-1))
    end,
  }
end

-- eager_attention_forward(module, query, key, value, attention_mask,
-- scaling, dropout) (transformers 4.48-4.52 modeling_llama.py), a frame of
-- its own, with the mask F.mask(mask, mask_opts) builds: a core for
-- layers.attention. The decoder layer keeps the probabilities
-- (self_attn_weights) until it returns.
function layers.eager_attention(c, mask, mask_opts)
  local n_rep = c.heads // c.kv_heads
  local function forward(query, key, value)
    local key_states = F.keep(F.repeat_kv(key, n_rep), "key_states")
    local value_states = F.keep(F.repeat_kv(value, n_rep), "value_states")
    local w = F.keep(F.mul(F.matmul(query, key_states:transpose(2, 3), { label = "scores", operands = { "q", "k" } }),
      c.head_dim ^ -0.5, { label = "scale" }), "attn_weights")
    w = F.keep(F.add(w, F.mask(mask, mask_opts), { label = "mask" }), "attn_weights")
    w = F.keep(F.softmax(w, -1, { dtype = "float32" }):to(query.dtype, { label = "softmax_downcast" }), "attn_weights")
    w = F.keep_in_layer(F.keep(F.dropout(w, 0.0, { label = "dropout" }), "attn_weights"))
    local o = F.keep(F.matmul(w, value_states, { label = "context", operands = { "probs", "v" } }), "attn_output")
    return F.keep(o:transpose(1, 2):contiguous({ label = "merge_heads" }), "attn_output")
  end
  return function(q, k, v) return F.call(forward, q, k, v) end
end

return layers
