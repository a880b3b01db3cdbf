-- LLaMA's attention, MLP and RMSNorm (HF's LlamaForCausalLM, transformers
-- 4.4x-4.5x) written as Lua blocks (vramplan.block), which the llama family
-- runs in place of the core's attention, mlp and rmsnorm ops when a model
-- sets lua_blocks = "llama" (models/examples/llama2-7b-blocks.lua): the same
-- model step for step. tests/lua/block_spec.lua compares their timelines
-- byte for byte, and bench/blocks.lua their speed. The RMSNorm's and the
-- attention's forwards are models/lib/llama_layers.lua's.
local llama_layers = library "llama_layers"
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
    -- LlamaRMSNorm (llama_layers.rms_norm), with the core's rmsnorm's labels
    local function rmsnorm()
      return block {
        name = "rmsnorm",
        width = c.hidden,
        norm = true,
        params = { { "weight", size = c.hidden, module = "norm" } },
        forward = function(x, p)
          return llama_layers.rms_norm(x, p.weight, c.norm_eps, llama_layers.rms_norm_labels)
        end,
        -- Megatron-LM runs a fused kernel (Transformer Engine's RMSNorm, or apex's)
        megatron = function(x, p) return fused_rms_norm(x, p.weight, { label = "" }) end,
      }
    end
    -- LlamaAttention (llama_layers.attention) with SDPA's or the recipe's
    -- kernel (F.sdpa); the decoder layer keeps attn_weights
    -- (self_attn_weights) until it returns
    local function attention_block()
      return llama_layers.attention(c, function(q, k, v)
        local out = F.sdpa(q, k, v, { is_causal = true, keeps_weights = true })
        return out
      end)
    end
    return { mlp = mlp, rmsnorm = rmsnorm, attention = not c.fused_projections and attention_block or nil }
  end,
}
