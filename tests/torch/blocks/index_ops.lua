-- An MLP that exercises the block vocabulary's one-dimensional indices,
-- index_select, index_add, amax and amin (scripts/lib/vramplan/
-- block_index.lua, block.lua), for the llama family (lua_blocks =
-- "index_ops"): a wide projection's row maximum and minimum, a top-k
-- router whose indices, flattened, pick rows of an expert table
-- (index_select) and add the weighted rows into another (index_add, out
-- of place), read back per token, and a per-token gate picked from a
-- vocabulary table by the flattened input_ids. Not a published
-- architecture: compare.py's cases of what each primitive keeps, mirrored
-- line by line by tests/torch/models/indexing.py's IndexOpsMLP.
return {
  build = function(c)
    local experts, k = 8, 2
    local function mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        inputs = { "input_ids" },
        params = {
          { "router", linear = { c.hidden, experts } },
          { "wide", linear = { c.hidden, c.intermediate } },
          { "expert_emb", embedding = { experts, c.hidden } },
          { "expert_acc", embedding = { experts, c.hidden } },
          { "token_gate", embedding = { c.vocab, c.hidden } },
        },
        forward = function(x, p, input_ids)
          -- r = self.wide(x)
          local r = F.keep(p.wide(x), "r")
          -- top = r.amax(-1, keepdim=True); low = r.amin(-1, keepdim=True)
          local top = F.keep(r:amax(-1), "top")
          local low = F.keep(r:amin(-1), "low")
          -- w, idx = torch.topk(self.router(x), 2, dim=-1)
          local w, idx = F.topk(p.router(x), k, -1)
          F.keep(w, "w")
          F.keep(idx, "idx")
          -- flat = idx.view(-1)
          local flat = F.keep(idx:view(-1), "flat")
          -- rows = self.expert_emb.weight.index_select(0, flat)
          local rows = F.keep(F.index_select(p.expert_emb, 0, flat), "rows")
          -- acc = self.expert_acc.weight.index_add(0, flat, rows * w.flatten().unsqueeze(1))
          local acc = F.keep(F.index_add(p.expert_acc, 0, flat, rows * w:flatten():unsqueeze(1)), "acc")
          -- back = acc[idx].sum(-2)
          local back = F.keep(F.index(acc, idx):sum(-2), "back")
          -- gate = self.token_gate.weight.index_select(0, input_ids.view(-1)).view(x.shape)
          local gate = F.keep(F.index_select(p.token_gate, 0, input_ids:view(-1)):view(x:size()), "gate")
          -- return x * back * gate * (top - low)
          local out = x * back * gate * (top - low)
          return out
        end,
      }
    end
    return { mlp = mlp }
  end,
}
