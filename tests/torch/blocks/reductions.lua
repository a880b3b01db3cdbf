-- An MLP that exercises the block vocabulary's reductions beyond mean and
-- sum (logsumexp, var, std, max with indices), for the llama family
-- (lua_blocks = "reductions"): LLaMA's MLP scaled per token by each of
-- them. Not a published architecture: compare.py's cases of what each
-- keeps and makes, mirrored line by line by tests/torch/models/indexing.py's
-- ReductionsMLP.
return {
  build = function(c)
    -- declared in the order ReductionsMLP registers them
    local params = {
      { "router", linear = { c.hidden, 8 } },
      { "gate_proj", linear = { c.hidden, c.intermediate }, split = "column" },
      { "up_proj", linear = { c.hidden, c.intermediate }, split = "column" },
      { "down_proj", linear = { c.intermediate, c.hidden }, split = "row" },
    }
    local function mlp()
      return block {
        name = "mlp", width = c.hidden, params = params,
        forward = function(x, p)
          -- lse = self.router(x).logsumexp(-1, keepdim=True)
          local lse = F.keep(p.router(x):logsumexp(-1), "lse")
          -- v = x.var(-1, keepdim=True); sd = x.std(-1, keepdim=True)
          local v = F.keep(x:var(-1), "v")
          local sd = F.keep(x:std(-1), "sd")
          -- m, i = x.max(-1, keepdim=True)
          local m, i = F.max(x, -1)
          F.keep(m, "m")
          F.keep(i, "i")
          -- y = self.down_proj(silu(self.gate_proj(x)) * self.up_proj(x))
          local y = F.keep(p.down_proj(F.silu(p.gate_proj(x)) * p.up_proj(x)), "y")
          -- return y * lse * v * sd * m
          local out = y * lse * v * sd * m
          return out
        end,
      }
    end
    return { mlp = mlp }
  end,
}
