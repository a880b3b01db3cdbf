"""The MLPs of tests/torch/blocks/indexing.lua and reductions.lua written
plainly in PyTorch, line by line as the Lua blocks read (their locals are
the blocks' F.keep names). IndexingMLP: a LayerNorm, a top-k router whose
logits are gathered and scattered back, a per-token gate looked up from
the batch's input_ids, and per-expert scales indexed by the router's
choice. ReductionsMLP: its input scaled by the logsumexp, var, std and
max of a wide projection. IndexOpsMLP: amax and amin of a wide
projection, index_select and index_add by the router's flattened indices,
index_select by the flattened input_ids. InplaceOpsMLP: scatter_,
scatter_add_, index_add_, index_copy_ and masked_fill_ in place.
Not published architectures: they check what the block vocabulary's
embedding, topk, gather, scatter, scatter_add, index, layer_norm,
logsumexp, var, std, max, amax, amin, index_select and index_add keep and
make, and what the in-place writes keep and do not make."""
import weakref

import torch
import torch.nn as nn

from .common import activation, layer_norm, mul
from .linear import linear

EXPERTS, TOP_K = 8, 2


class IndexingMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.norm = nn.LayerNorm(h)
        self.router = nn.Linear(h, EXPERTS, bias=False)
        self.expert_scale = nn.Embedding(EXPERTS, h)
        self.token_gate = nn.Embedding(cfg["vocab_size"], f)
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)
        # the batch's input_ids (the block's named input), set by the model's
        # forward: a weak reference, so that the module does not keep one
        # step's batch into the next (the training loop holds it)
        self.input_ids = None

    def forward(self, ac, x):
        input_ids = self.input_ids()
        h = layer_norm(ac, self.norm, x)
        logits = linear(ac, h, self.router.weight)
        # softmax is on autocast's fp32 list
        probs, idx = torch.topk(torch.softmax(ac.up(logits), -1), TOP_K, dim=-1)
        mixed = logits.scatter_add(-1, idx, logits.gather(-1, idx))
        marks = logits.scatter(-1, idx, 1.0)
        gate = self.token_gate(input_ids)
        y = linear(ac, mul(activation(ac, "silu", linear(ac, h, self.gate_proj.weight))
                           * linear(ac, h, self.up_proj.weight), gate), self.down_proj.weight)
        scale = self.expert_scale.weight[idx].sum(-2)
        return mul(mul(mul(y, scale), (mixed * marks).sum(-1, keepdim=True)), probs.sum(-1, keepdim=True))


class ReductionsMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.router = nn.Linear(h, f, bias=False)

    def forward(self, ac, x):
        r = linear(ac, x, self.router.weight)
        # logsumexp is on autocast's fp32 list
        lse = torch.logsumexp(ac.up(r), -1, keepdim=True)
        v = r.var(-1, keepdim=True)
        sd = r.std(-1, keepdim=True)
        m, i = r.max(-1, keepdim=True)
        return mul(mul(mul(mul(x, lse), v), sd), m)


class IndexOpsMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.router = nn.Linear(h, EXPERTS, bias=False)
        self.wide = nn.Linear(h, f, bias=False)
        self.expert_emb = nn.Embedding(EXPERTS, h)
        self.expert_acc = nn.Embedding(EXPERTS, h)
        self.token_gate = nn.Embedding(cfg["vocab_size"], h)
        self.input_ids = None  # as IndexingMLP's

    def forward(self, ac, x):
        input_ids = self.input_ids()
        r = linear(ac, x, self.wide.weight)
        top = r.amax(-1, keepdim=True)
        low = r.amin(-1, keepdim=True)
        w, idx = torch.topk(linear(ac, x, self.router.weight), TOP_K, dim=-1)
        flat = idx.view(-1)
        rows = self.expert_emb.weight.index_select(0, flat)
        acc = self.expert_acc.weight.index_add(0, flat, mul(rows, w.flatten().unsqueeze(1)))
        back = acc[idx].sum(-2)
        gate = self.token_gate.weight.index_select(0, input_ids.view(-1)).view(x.shape)
        return mul(mul(mul(x, back), gate), top - low)


class InplaceOpsMLP(nn.Module):
    """tests/torch/blocks/inplace_ops.lua: scatter_, scatter_add_,
    index_add_, index_copy_ and masked_fill_, each writing a tensor the
    forward made and no op read before (the vocabulary's rule)."""

    def __init__(self, cfg):
        super().__init__()
        h, experts = cfg["hidden_size"], cfg["intermediate_size"]  # wide tables
        self.router = nn.Linear(h, experts, bias=False)
        self.scores = nn.Linear(h, experts, bias=False)
        self.square = nn.Linear(h, experts, bias=False)
        self.expert_emb = nn.Embedding(experts, h)
        self.expert_copy = nn.Embedding(experts, h)

    def forward(self, ac, x):
        b, n = x.shape[0], x.shape[1]
        w, idx = torch.topk(linear(ac, x, self.router.weight), TOP_K, dim=-1)
        flat = idx.view(-1)
        rows = self.expert_emb.weight.index_select(0, flat)
        v = linear(ac, x, self.square.weight).view(b, n, -1, 8, 8)
        mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
        t = v.transpose(-1, -2).contiguous()
        s = linear(ac, x, self.scores.weight)
        s.scatter_(-1, idx, w)
        s.scatter_add_(-1, idx, w)
        acc = torch.zeros_like(self.expert_emb.weight)
        acc.index_add_(0, flat, mul(rows, w.flatten().unsqueeze(1)))
        acc.index_copy_(0, flat, self.expert_copy.weight.index_select(0, flat))
        t.masked_fill_(~mask, 0.0)
        back = acc[idx].sum(-2)
        return mul(mul(x, back), mul(t.view(b, n, -1).sum(-1, keepdim=True), s.sum(-1, keepdim=True)))


# lua_blocks -> the MLP that mirrors it (compare.py's block vocabulary cases)
MLP_BLOCKS = {"indexing": IndexingMLP, "reductions": ReductionsMLP, "index_ops": IndexOpsMLP,
              "inplace_ops": InplaceOpsMLP}
