-- LLaMA (HF's LlamaForCausalLM, transformers 4.4x-4.5x) with its
-- attention, MLP and RMSNorms written as Lua blocks (vramplan.block)
-- instead of the core's attention, mlp and rmsnorm ops. The same model
-- as the llama family's plain configurations, step for step:
-- tests/lua/block_spec.lua compares their timelines byte for byte, and
-- bench/blocks.lua their speed.
return architecture {
  name = "llama_blocks",
  doc = "LLaMA-style decoder whose MLP and RMSNorms are Lua blocks",
  fields = {
    { "hidden", "int", doc = "hidden_size" },
    { "layers", "int", max = 100000, doc = "num_hidden_layers" },
    { "heads", "int", doc = "num_attention_heads" },
    { "kv_heads", "int", default = function(c) return c.heads end, doc = "num_key_value_heads" },
    { "diff_attention", "bool", default = false,
      doc = "differential attention (Ye et al. 2024, DIFF Transformer) in place of LLaMA's: heads is then its "
        .. "num_heads (half a Transformer's), each a pair of softmax maps of head_dim = hidden / heads / 2" },
    { "head_dim", "int",
      default = function(c) return c.heads and c.hidden and c.hidden // c.heads // (c.diff_attention and 2 or 1) end,
      doc = "head_dim (default hidden / heads; with diff_attention hidden / heads / 2)" },
    { "intermediate", "int", doc = "intermediate_size of the SwiGLU MLP" },
    { "vocab", "int", doc = "vocab_size" },
    { "max_positions", "int", default = 4096, doc = "max_position_embeddings (no memory of its own)" },
    { "rope_theta", "number", default = 10000.0, min = 1, doc = "rope_theta" },
    { "norm_eps", "number", default = 1e-6, min = 0, doc = "rms_norm_eps" },
    { "tie_embeddings", "bool", default = false, doc = "tie_word_embeddings" },
    { "mlp_bias", "bool", default = false, doc = "biases on the MLP projections" },
    { "lua_attention", "bool", default = true,
      doc = "the attention too is a Lua block (not with fused_projections: Phi-3's attention stays the core's)" },
    { "fused_projections", "bool", default = false,
      doc = "Phi-3 (Phi3ForCausalLM): one qkv_proj and one gate_up_proj, whose output is chunked in two views" },
  },
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
    -- Differential attention (Ye et al. 2024, arXiv 2410.05258, section 2.1)
    -- as its authors' MultiheadFlashDiff2 computes it (microsoft/unilm
    -- Diff-Transformer/multihead_flashdiff_2.py): each of `heads` heads holds
    -- two query/key heads of head_dim = hidden / heads / 2 and a value twice
    -- as wide; four flash_attn_func calls (causal) make the two maps' outputs,
    -- attn1 - lambda * attn2 with lambda = exp(lambda_q1 . lambda_k1) -
    -- exp(lambda_q2 . lambda_k2) + lambda_init, then a per-head RMSNorm over
    -- 2 * head_dim (subln: the paper's GroupNorm) and the fixed multiplier
    -- (1 - lambda_init). lambda_init = 0.8 - 0.6 * exp(-0.3 * depth) varies
    -- with the layer, a Python number that changes no memory (a product with
    -- a number keeps nothing): layer 0's is written. The rotary embedding
    -- is LLaMA's apply_rotary_pos_emb on the model's tables, as the harness
    -- runs it; the reference's Triton kernel (flash_attn's apply_rotary_emb,
    -- interleaved) is not modelled. Every Python local lives until the
    -- forward returns (F.keep).
    local function diff_attention_block()
      local d, kv = c.head_dim, c.kv_heads
      local lambda_init = 0.8 - 0.6 * math.exp(-0.3 * 0)
      -- rms_norm.py RMSNorm(2 * head_dim, eps=1e-5).forward (the fallback
      -- without apex): output = self._norm(x.float()).type_as(x); output * weight
      local function subln(x, weight)
        local xf = x:float({ label = "subln.float" })
        local normed = F.mul(xf, F.rsqrt(F.add(xf:pow(2, { label = "subln.pow" }):mean(-1, { label = "subln.mean" }),
          1e-5, { label = "subln.add_eps" }), { label = "subln.rsqrt" }), { label = "subln.mul" })
        local output = F.keep(normed:to(x.dtype, { label = "subln.type_as" }), "output")
        return F.mul(output, weight, { label = "subln.weight" })
      end
      local function lambda(pq, pk, label)
        local dot = F.sum(F.mul(pq, pk, { label = label .. ".mul" }), -1, { label = label .. ".sum", keepdim = false })
        return F.exp(dot:float({ label = label .. ".float" }), { label = label .. ".exp" })
      end
      return block {
        name = "attention",
        width = c.hidden,
        params = {
          { "q_proj", linear = { c.hidden, c.hidden }, split = "column" },
          { "k_proj", linear = { c.hidden, 2 * kv * d }, split = "column" },
          { "v_proj", linear = { c.hidden, 2 * kv * d }, split = "column" },
          { "out_proj", linear = { c.hidden, c.hidden }, split = "row", module = "o_proj" }, -- recipes name it o_proj or out_proj
          { "lambda_q1", size = d },
          { "lambda_k1", size = d },
          { "lambda_q2", size = d },
          { "lambda_k2", size = d },
          { "subln", size = 2 * d, module = "norm" },
        },
        forward = function(x, p)
          local q = F.keep(p.q_proj(x), "q")
          local k = F.keep(p.k_proj(x), "k")
          local v = F.keep(p.v_proj(x), "v")
          q = F.keep(q:view(-1, d), "q") -- [b, s, 2 * heads, d]
          k = F.keep(k:view(-1, d), "k")
          v = F.keep(v:view(-1, d), "v") -- [b, s, kv_heads, 2, d]
          q = F.keep(F.rotary(q, { label = "rotary_q" }), "q")
          k = F.keep(F.rotary(k, { label = "rotary_k" }), "k")
          -- q.reshape(b, s, heads, 2, d)[:, :, :, 0] and [..., 1], likewise k; v's halves
          local q1, q2 = F.keep(q:select(0, 2), "q1"), F.keep(q:select(1, 2), "q2")
          local k1, k2 = F.keep(k:select(0, 2), "k1"), F.keep(k:select(1, 2), "k2")
          local v1, v2 = F.keep(v:select(0, 2), "v1"), F.keep(v:select(1, 2), "v2")
          local causal = { is_causal = true }
          local attn11 = F.keep(F.sdpa(q1, k1, v1, causal), "attn11")
          local attn12 = F.keep(F.sdpa(q1, k1, v2, causal), "attn12")
          local attn1 = F.keep(F.cat({ attn11, attn12 }, -1, { label = "cat1" }), "attn1")
          local attn21 = F.keep(F.sdpa(q2, k2, v1, causal), "attn21")
          local attn22 = F.keep(F.sdpa(q2, k2, v2, causal), "attn22")
          local attn2 = F.keep(F.cat({ attn21, attn22 }, -1, { label = "cat2" }), "attn2")
          local lambda_1 = F.keep(lambda(p.lambda_q1, p.lambda_k1, "lambda_1"):to(q.dtype, { label = "lambda_1.type_as" }),
            "lambda_1")
          local lambda_2 = F.keep(lambda(p.lambda_q2, p.lambda_k2, "lambda_2"):to(q.dtype, { label = "lambda_2.type_as" }),
            "lambda_2")
          local lambda_full = F.keep(F.add(F.sub(lambda_1, lambda_2, { label = "lambda_sub" }), lambda_init,
            { label = "lambda_init" }), "lambda_full")
          local attn = F.keep(F.sub(attn1, F.mul(lambda_full, attn2, { label = "lambda_mul" }), { label = "diff" }),
            "attn")
          attn = F.keep(F.call(subln, attn, p.subln), "attn")
          attn = F.keep(F.mul(attn, 1 - lambda_init, { label = "scale" }), "attn")
          attn = F.keep(attn:reshape(-1), "attn") -- [b, s, heads * 2 * d]
          return p.out_proj(attn)
        end,
      }
    end
    return decoder {
      norms_registered = "last",
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden, model_local = true },
        rotary_embedding { head_dim = c.head_dim, theta = c.rope_theta },
      },
      layer = {
        residual {
          rmsnorm(),
          c.diff_attention and diff_attention_block() or
          c.lua_attention and not c.fused_projections and attention_block() or attention {
            hidden = c.hidden, heads = c.heads, kv_heads = c.kv_heads, head_dim = c.head_dim, rotary = true,
            upcast_softmax = true, caches = true, keeps_weights = true,
            mask = c.fused_projections and "additive-mistral" or "additive", fused_qkv = c.fused_projections,
            rotary_cat = c.fused_projections, module_names = c.fused_projections and "phi3" or nil,
          },
        },
        residual { rmsnorm(), mlp() },
      },
      layers = c.layers,
      final = {
        rmsnorm(),
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = c.tie_embeddings },
        cross_entropy {},
      },
    }
  end,
}
