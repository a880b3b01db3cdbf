-- Differential attention (DIFF Transformer, Ye et al. 2024) as a Lua block
-- the llama family runs in place of its attention when a model sets
-- lua_blocks = "diff_transformer" (models/examples/diff-transformer-7b.lua):
-- LLaMA's layer, pre-RMSNorm and SwiGLU, with this attention; heads is then
-- the DIFF Transformer's num_heads (half a Transformer's) and head_dim
-- hidden / heads / 2, which the model sets. tests/torch/models/diff.py
-- mirrors it for the PyTorch harness.
return {
  check = function(c)
    if c.head_dim * c.heads * 2 ~= c.hidden then
      return "head_dim", "must be hidden / heads / 2 for differential attention (each head a pair of maps)"
    end
    if c.fused_projections or c.kv_lora_rank > 0 or c.qkv_bias or c.attention_bias then
      return "lua_blocks", "differential attention replaces LLaMA's plain attention (no fused, latent or biased one)"
    end
  end,
  build = function(c)
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
    return { attention = diff_attention_block }
  end,
}
