-- An MLP that exercises the block vocabulary's in-place writes
-- (scripts/lib/vramplan/block_inplace.lua), for the llama family
-- (lua_blocks = "inplace_ops"): a projection of expert scores into which
-- a top-k router's weights are scattered (scatter_) and added
-- (scatter_add_) in place, a zero table into which the weighted rows of
-- an expert table are added (index_add_) and another table's rows copied
-- (index_copy_) by the router's flattened indices, read back per token,
-- and a transposed copy of a wide projection, seen as 8 x 8 squares,
-- whose upper triangles are zeroed in place (masked_fill_). Not a published architecture:
-- compare.py's cases of what each in-place primitive keeps and does not
-- make, mirrored line by line by tests/torch/models/indexing.py's
-- InplaceOpsMLP. The intermediate size must be a multiple of 64. The
-- in-place writes come last, while the most is alive: a copy there would
-- raise the wide cases' peak.
return {
  build = function(c)
    local experts, k = c.intermediate, 2 -- as many experts as the intermediate size: wide tables
    local function mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        params = {
          { "router", linear = { c.hidden, experts } },
          { "scores", linear = { c.hidden, experts } },
          { "square", linear = { c.hidden, c.intermediate } },
          { "expert_emb", embedding = { experts, c.hidden } },
          { "expert_copy", embedding = { experts, c.hidden } },
        },
        forward = function(x, p)
          local b, n = x:size(0), x:size(1)
          -- w, idx = torch.topk(self.router(x), 2, dim=-1)
          local w, idx = F.topk(p.router(x), k, -1)
          F.keep(w, "w")
          F.keep(idx, "idx")
          -- flat = idx.view(-1)
          local flat = F.keep(idx:view(-1), "flat")
          -- rows = self.expert_emb.weight.index_select(0, flat)
          local rows = F.keep(F.index_select(p.expert_emb, 0, flat), "rows")
          -- v = self.square(x).view(b, n, -1, 8, 8)
          local v = F.keep(p.square(x):view(b, n, -1, 8, 8), "v")
          -- mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
          local mask = F.keep(F.tril_ones(v, 0), "mask")
          -- t = v.transpose(-1, -2).contiguous()
          local t = F.keep(v:transpose(-1, -2):contiguous(), "t")
          -- s = self.scores(x); s.scatter_(-1, idx, w); s.scatter_add_(-1, idx, w)
          local s = F.keep(p.scores(x), "s")
          s:scatter_(-1, idx, w)
          s:scatter_add_(-1, idx, w)
          -- acc = torch.zeros_like(self.expert_emb.weight)
          local acc = F.keep(F.zeros_like(p.expert_emb), "acc")
          -- acc.index_add_(0, flat, rows * w.flatten().unsqueeze(1))
          acc:index_add_(0, flat, rows * w:flatten():unsqueeze(1))
          -- acc.index_copy_(0, flat, self.expert_copy.weight.index_select(0, flat))
          acc:index_copy_(0, flat, F.index_select(p.expert_copy, 0, flat))
          -- t.masked_fill_(~mask, 0.0)
          t:masked_fill_(F.logical_not(mask), 0.0)
          -- back = acc[idx].sum(-2)
          local back = F.keep(F.index(acc, idx):sum(-2), "back")
          -- return x * back * (t.view(b, n, -1).sum(-1, keepdim=True) * s.sum(-1, keepdim=True))
          local out = x * back * (t:view(b, n, -1):sum(-1, { keepdim = true }) * s:sum(-1))
          return out
        end,
      }
    end
    return { mlp = mlp }
  end,
}
