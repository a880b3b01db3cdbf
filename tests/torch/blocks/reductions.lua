-- An MLP that exercises the block vocabulary's reductions beyond mean and
-- sum (logsumexp, var, std, max with indices), for the llama family
-- (lua_blocks = "reductions"): its input scaled per token by each of
-- them over a projection as wide as the model's intermediate size. Not a published architecture: compare.py's cases of what each
-- keeps and makes, mirrored line by line by tests/torch/models/indexing.py's
-- ReductionsMLP.
return {
  build = function(c)
    -- declared in the order ReductionsMLP registers them
    local params = {
      { "router", linear = { c.hidden, c.intermediate } },
    }
    local function mlp()
      return block {
        name = "mlp", width = c.hidden, params = params,
        forward = function(x, p)
          -- r = self.router(x)
          local r = F.keep(p.router(x), "r")
          -- lse = r.logsumexp(-1, keepdim=True)
          local lse = F.keep(r:logsumexp(-1), "lse")
          -- v = r.var(-1, keepdim=True); sd = r.std(-1, keepdim=True)
          local v = F.keep(r:var(-1), "v")
          local sd = F.keep(r:std(-1), "sd")
          -- m, i = r.max(-1, keepdim=True)
          local m, i = F.max(r, -1)
          F.keep(m, "m")
          F.keep(i, "i")
          -- return x * lse * v * sd * m
          local out = x * lse * v * sd * m
          return out
        end,
      }
    end
    return { mlp = mlp }
  end,
}
