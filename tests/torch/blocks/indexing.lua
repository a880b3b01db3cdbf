-- An MLP that exercises the block vocabulary's tables, indices and
-- LayerNorm (scripts/lib/vramplan/block_index.lua), for the llama family
-- (lua_blocks = "indexing"): a LayerNorm, a top-k router over eight
-- experts whose logits are gathered and scattered back, a per-token gate
-- looked up from the batch's input_ids (an nn.Embedding per layer, as
-- Gemma 3n's per-layer embeddings), and per-expert scales indexed by the
-- router's choice. Not a published architecture: compare.py's cases of
-- what each primitive keeps, mirrored line by line by
-- tests/torch/models/indexing.py's IndexingMLP.
return {
  build = function(c)
    local experts, k = 8, 2
    local function mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        inputs = { "input_ids" },
        params = {
          { "norm_weight", size = c.hidden, module = "norm" },
          { "norm_bias", size = c.hidden, module = "norm" },
          { "router", linear = { c.hidden, experts } },
          { "expert_scale", embedding = { experts, c.hidden } },
          { "token_gate", embedding = { c.vocab, c.intermediate }, split = "column" },
          { "gate_proj", linear = { c.hidden, c.intermediate }, split = "column" },
          { "up_proj", linear = { c.hidden, c.intermediate }, split = "column" },
          { "down_proj", linear = { c.intermediate, c.hidden }, split = "row" },
        },
        forward = function(x, p, input_ids)
          -- h = layer_norm(ac, self.norm, x)
          local h = F.keep(F.layer_norm(x, p.norm_weight, p.norm_bias), "h")
          -- logits = self.router(h)
          local logits = F.keep(p.router(h), "logits")
          -- probs, idx = torch.topk(logits.softmax(-1), 2, dim=-1)
          local probs, idx = F.topk(F.softmax(logits, -1), k, -1)
          F.keep(probs, "probs")
          F.keep(idx, "idx")
          -- mixed = logits.scatter_add(-1, idx, logits.gather(-1, idx))
          local mixed = F.keep(F.scatter_add(logits, -1, idx, F.gather(logits, -1, idx)), "mixed")
          -- marks = logits.scatter(-1, idx, 1.0)
          local marks = F.keep(F.scatter(logits, -1, idx, 1.0), "marks")
          -- gate = self.token_gate(input_ids)
          local gate = F.keep(F.embedding(input_ids, p.token_gate), "gate")
          -- y = self.down_proj(silu(self.gate_proj(h)) * self.up_proj(h) * gate)
          local y = F.keep(p.down_proj(F.silu(p.gate_proj(h)) * p.up_proj(h) * gate), "y")
          -- scale = self.expert_scale.weight[idx].sum(-2)
          local scale = F.keep(F.index(p.expert_scale, idx):sum(-2), "scale")
          -- return y * scale * (mixed * marks).sum(-1, keepdim=True) * probs.sum(-1, keepdim=True)
          local out = y * scale * (mixed * marks):sum(-1) * probs:sum(-1)
          return out
        end,
      }
    end
    return { mlp = mlp }
  end,
}
