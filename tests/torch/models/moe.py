"""Mixtral's, Qwen2-MoE's and Qwen3-MoE's sparse blocks, with the routing
pinned to even shares (RoundRobinTopk), the count vramplan assumes."""
import torch
import torch.nn as nn

from .common import add, mul
from .linear import linear
from .llama_blocks import LlamaMLP


def expert_mlp(cfg, intermediate_size):
    """One expert, or a mixture's shared experts as one MLP: LLaMA's gated MLP
    at the mixture's width, without biases (MixtralBlockSparseTop2MLP,
    Qwen2MoeMLP, Qwen3MoeMLP, DeepseekMLP, DeepseekV3MLP)."""
    return LlamaMLP(dict(cfg, intermediate_size=intermediate_size, mlp_bias=False))


def expert_mlps(cfg, intermediate_size, count):
    """The routed experts, registered in their order (their parameters' order
    is a for-loop optimizer's)."""
    return nn.ModuleList([expert_mlp(cfg, intermediate_size) for _ in range(count)])


class RoundRobinTopk(torch.autograd.Function):
    """torch.topk(probs, k, dim=-1) with the routing pinned: token t's j-th
    choice is expert (t*k + j) % E, so every expert gets its even share, the
    count vramplan assumes. Memory as topk: a values and an int64 indices
    output, the indices saved, a zero-filled input-sized gradient."""

    @staticmethod
    def forward(ctx, probs, k):
        n, experts = probs.shape
        # (the device named: inside a Function's forward the GPU check's
        # default device is not in force)
        indices = torch.arange(n * k, device=probs.device)
        indices.remainder_(experts)
        indices = indices.view(n, k)
        values = probs.gather(1, indices)
        ctx.save_for_backward(indices)
        ctx.mark_non_differentiable(indices)
        ctx.shape = probs.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad, _):
        (indices,) = ctx.saved_tensors
        return torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device).scatter_(1, indices, grad), None


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock, with a shared expert Qwen2MoeSparseMoeBlock,
    without one Qwen3MoeSparseMoeBlock."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        qwen = cfg["model_type"] in ("qwen2_moe", "qwen3_moe")
        self.num_experts = cfg["num_experts"] if qwen else cfg["num_local_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg.get("norm_topk_prob", False) if qwen else True
        f = cfg["moe_intermediate_size"] if qwen else cfg["intermediate_size"]
        self.gate = nn.Linear(h, self.num_experts, bias=False)
        self.experts = expert_mlps(cfg, f, self.num_experts)
        shared = cfg.get("shared_expert_intermediate_size", 0) if qwen else 0
        self.shared_expert = expert_mlp(cfg, shared) if shared else None
        self.shared_expert_gate = nn.Linear(h, 1, bias=False) if shared else None

    def forward(self, ac, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = linear(ac, hidden_states, self.gate.weight)
        routing_weights = nn.functional.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = RoundRobinTopk.apply(routing_weights, self.top_k)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            # under autocast a 16-bit expert output times fp32 weights: CUDA's mixed mul
            current_hidden_states = mul(expert_layer(ac, current_state), routing_weights[top_x, idx, None])
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        if self.shared_expert is not None:
            shared_expert_output = self.shared_expert(ac, hidden_states)
            shared_expert_output = (nn.functional.sigmoid(linear(ac, hidden_states, self.shared_expert_gate.weight))
                                    * shared_expert_output)
            final_hidden_states = add(final_hidden_states, shared_expert_output)
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits
