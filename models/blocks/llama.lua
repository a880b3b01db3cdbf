-- LLaMA's attention, MLP and RMSNorm (HF's LlamaForCausalLM, transformers
-- 4.4x-4.5x) written as Lua blocks (vramplan.block), which the llama family
-- runs in place of the core's attention, mlp and rmsnorm ops when a model
-- sets lua_blocks = "llama" (models/examples/llama2-7b-blocks.lua): the same
-- model step for step. tests/lua/block_spec.lua compares their timelines
-- byte for byte, and bench/blocks.lua their speed.
return {
  -- what these blocks model of the llama family: LLaMA's and Phi-3's dense
  -- layers (Phi-3's attention stays the core's)
  check = function(c)
    local plain = { norm_style = "llama", norm_position = "pre", activation = "silu", qkv_bias = false,
                    attention_bias = false, attn_dropout = 0, sliding_window = 0, kv_lora_rank = 0,
                    qk_norm = false, multipliers = false, embed_scale = false, partial_rotary_factor = 1 }
    for _, k in ipairs({ "norm_style", "norm_position", "activation", "qkv_bias", "attention_bias", "attn_dropout",
                         "sliding_window", "kv_lora_rank", "qk_norm", "multipliers", "embed_scale",
                         "partial_rotary_factor" }) do
      if c[k] ~= plain[k] then return k, "is not what the llama Lua blocks model (LLaMA's and Phi-3's layers)" end
    end
  end,
  build = function(c)
    -- Megatron-LM's fused kernels, declared from their autograd Functions
    local swiglu = F.kernel {
      name = "swiglu",
      source = "Megatron-LM megatron/core/fusions/fused_bias_swiglu.py: SwiGLUFunction.forward saves its input "
        .. "(ctx.save_for_backward(input)) and returns silu(first half) * second half",
      inputs = 1,
      output = { width = function(x) return x.width // 2 end },
      saves = { 1 },
    }
    local fused_rms_norm = F.kernel {
      name = "rmsnorm",
      source = "apex apex/normalization/fused_layer_norm.py: FusedRMSNormAffineFunction.forward "
        .. "ctx.save_for_backward(input_, weight_, invvar), invvar one fp32 per row (Transformer Engine's RMSNorm "
        .. "keeps the same: input, weight, rsigma)",
      inputs = 2,
      saves = { 1, 2 },
      keeps = { { width = 1, dtype = "float32" } },
    }
    -- LlamaMLP.forward: self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)).
    -- Declared in the order the core's mlp op makes its leaves (up, gate,
    -- down), so that the two are the same model byte for byte.
    -- Phi3MLP.forward:
    --   up_states = self.gate_up_proj(hidden_states)
    --   gate, up_states = up_states.chunk(2, dim=-1)
    --   up_states = up_states * self.activation_fn(gate)
    --   return self.down_proj(up_states)
    -- the local `gate` (a view) keeps the whole projection until it returns
    local function phi3_mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        params = {
          { "gate_up_proj", linear = { c.hidden, 2 * c.intermediate }, split = "column", bias = c.mlp_bias },
          { "down_proj", linear = { c.intermediate, c.hidden }, split = "row", bias = c.mlp_bias },
        },
        forward = function(x, p)
          local gate, up = F.chunk(p.gate_up_proj(x), 2, -1)
          gate = F.keep(gate, "gate")
          return p.down_proj(F.mul(up, F.silu(gate), { label = "gate_mul" }))
        end,
        megatron = function(x, p) return p.down_proj(swiglu(p.gate_up_proj(x, { label = "linear_fc1" }))) end,
      }
    end
    local function mlp()
      if c.fused_projections then return phi3_mlp() end
      return block {
        name = "mlp",
        width = c.hidden,
        params = {
          { "up_proj", linear = { c.hidden, c.intermediate }, split = "column", bias = c.mlp_bias },
          { "gate_proj", linear = { c.hidden, c.intermediate }, split = "column", bias = c.mlp_bias },
          { "down_proj", linear = { c.intermediate, c.hidden }, split = "row", bias = c.mlp_bias },
        },
        forward = function(x, p)
          return p.down_proj(F.mul(F.silu(p.gate_proj(x)), p.up_proj(x), { label = "gate_mul" }))
        end,
        -- Megatron-LM's MLP (megatron/core/transformer/mlp.py): one linear_fc1
        -- GEMM makes gate and up side by side, the fused bias_swiglu keeps it
        megatron = function(x, p)
          local fc1 = { label = "linear_fc1" }
          return p.down_proj(swiglu(F.cat({ p.gate_proj(x, fc1), p.up_proj(x, fc1) }, -1, fc1)))
        end,
      }
    end
    -- LlamaRMSNorm.forward:
    --   input_dtype = hidden_states.dtype
    --   hidden_states = hidden_states.to(torch.float32)
    --   variance = hidden_states.pow(2).mean(-1, keepdim=True)
    --   hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    --   return self.weight * hidden_states.to(input_dtype)
    -- hidden_states and variance are locals until it returns.
    local function rmsnorm()
      return block {
        name = "rmsnorm",
        width = c.hidden,
        norm = true,
        params = { { "weight", size = c.hidden, module = "norm" } },
        forward = function(x, p)
          local h = F.keep(x:to("float32", { label = "upcast" }), "hidden_states")
          local variance = F.keep(h:pow(2):mean(-1), "variance")
          h = F.keep(F.mul(h, F.rsqrt(F.add(variance, c.norm_eps, { label = "add_eps" })), { label = "mul" }),
            "hidden_states")
          return F.mul(p.weight, h:to(x.dtype, { label = "downcast" }), { label = "weight" })
        end,
        -- Megatron-LM runs a fused kernel (Transformer Engine's RMSNorm, or apex's)
        megatron = function(x, p) return fused_rms_norm(x, p.weight, { label = "" }) end,
      }
    end
    -- LlamaAttention.forward (transformers 4.48-4.52):
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
    -- the decoder layer keeps attn_weights (self_attn_weights) until it returns
    local function attention_block()
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
          local out = F.sdpa(q, k, v, { is_causal = true, keeps_weights = true })
          return p.o_proj(out:reshape(-1))
        end,
      }
    end
    return { mlp = mlp, rmsnorm = rmsnorm, attention = not c.fused_projections and attention_block or nil }
  end,
}
