"""Mixtral's, Qwen2-MoE's and Qwen3-MoE's sparse blocks, with the routing
pinned to even shares (RoundRobinTopk), the count vramplan assumes."""
import torch
import torch.nn as nn

from . import liger
from .common import add, mul
from .linear import linear
from .llama_blocks import LlamaMLP
from .param_lora import call_wrapped, wrapped_names


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


class GroupedMm(torch.autograd.Function):
    """torch._grouped_mm(x, mat2, offs) with mat2 = w.transpose(-2, -1), as
    transformers calls it and PyTorch 2.9+ runs it (PyTorch 1.13 has none):
    one output of x's rows, group g's rows through mat2[g]; saved as
    derivatives.yaml's _grouped_mm saves them, x for mat2's gradient and
    mat2 (the weight's transposed view, made outside in grad mode) for x's,
    and offs: what save_on_cpu's and a non-reentrant checkpoint's hooks
    see. Backward as _grouped_mm_mat1_backward then _mat2_backward
    (FunctionsManual.cpp): x's gradient, then mat2's whole, each one new
    tensor, mat2's made in the weight's layout (groups with no rows get
    zeros), so that TransposeBackward hands AccumulateGrad the weight's own
    layout."""

    @staticmethod
    def forward(ctx, x, mat2, offs):
        ctx.save_for_backward(x if mat2.requires_grad else None, mat2 if x.requires_grad else None, offs)
        ctx.mat2_shape, ctx.mat2_dtype = mat2.shape, mat2.dtype
        # a row-major mat2 (GPT-OSS's weight itself, is_transposed) gets its gradient row-major
        ctx.row_major = mat2.stride(-1) == 1
        out = torch.empty(x.shape[0], mat2.shape[2], dtype=x.dtype, device=x.device)
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                torch.mm(x[start:end], mat2[g], out=out[start:end])
            start = end
        return out

    @staticmethod
    def backward(ctx, grad):
        x, mat2, offs = ctx.saved_tensors
        grad_x = grad_mat2 = None
        bounds = offs.tolist()
        experts, k, n = ctx.mat2_shape
        if ctx.needs_input_grad[0]:
            grad_x = torch.empty(grad.shape[0], k, dtype=grad.dtype, device=grad.device)
            start = 0
            for g, end in enumerate(bounds):
                if end > start:
                    torch.mm(grad[start:end], mat2[g].t(), out=grad_x[start:end])
                start = end
        if ctx.needs_input_grad[1] and ctx.row_major:
            grad_mat2 = torch.zeros(experts, k, n, dtype=ctx.mat2_dtype, device=grad.device)
            start = 0
            for g, end in enumerate(bounds):
                if end > start:
                    torch.mm(x[start:end].t(), grad[start:end], out=grad_mat2[g])
                start = end
        elif ctx.needs_input_grad[1]:
            grad_w = torch.zeros(experts, n, k, dtype=ctx.mat2_dtype, device=grad.device)
            start = 0
            for g, end in enumerate(bounds):
                if end > start:
                    torch.mm(grad[start:end].t(), x[start:end], out=grad_w[g])
                start = end
            grad_mat2 = grad_w.transpose(-2, -1)
        return grad_x, grad_mat2, None


def grouped_mm(x, w, offs):
    """torch._grouped_mm(x, w.transpose(-2, -1), offs), its kernel where
    the GPU check's PyTorch has it, else GroupedMm written out."""
    mat2 = w.transpose(-2, -1)
    if x.is_cuda and hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(x, mat2, offs=offs)
    return GroupedMm.apply(x, mat2, offs)


class Sorted:
    """grouped_mm_experts_forward's locals from the assignments sorted by
    expert: every one a local until the function returns."""


def sorted_by_expert(hidden_states, top_k_index, top_k_weights):
    """grouped_mm_experts_forward up to the sorted rows: the token of each
    assignment (an arange expanded to k and reshaped: a copy), the rows
    gathered, argsort and its inverse scattered from an arange, the ids,
    weights and rows in the sorted order."""
    g = Sorted()
    num_top_k = top_k_index.size(-1)
    device = hidden_states.device
    g.token_idx = torch.arange(hidden_states.size(0), device=device).unsqueeze(1).expand(-1, num_top_k).reshape(-1)
    sample_weights = top_k_weights.reshape(-1)
    expert_ids = top_k_index.reshape(-1)
    g.selected_hidden_states = hidden_states[g.token_idx]
    g.perm = torch.argsort(expert_ids)
    g.inv_perm = torch.empty_like(g.perm)
    g.inv_perm[g.perm] = torch.arange(g.perm.size(0), device=device)
    g.expert_ids_g = expert_ids[g.perm]
    g.sample_weights_g = sample_weights[g.perm]
    g.selected_hidden_states_g = g.selected_hidden_states[g.perm]
    return g


def expert_offsets(expert_ids_g, num_experts):
    """The per-expert counts (histc of a 4-byte copy of the ids: float on
    the CPU, int32 on CUDA) and their int32 offsets."""
    histc_input = expert_ids_g.float() if expert_ids_g.device.type == "cpu" else expert_ids_g.int()
    tokens_per_expert = torch.histc(histc_input, bins=num_experts, min=0, max=num_experts - 1)
    return histc_input, tokens_per_expert, torch.cumsum(tokens_per_expert, dim=0, dtype=torch.int32)


def grouped_mm_transposed(x, w, offs):
    """torch._grouped_mm(x, w, offs) of a weight stored [experts, in, out]
    (_grouped_linear with is_transposed: GPT-OSS), the weight itself as
    mat2; its gradient made in its own layout, as _grouped_mm_mat2_backward
    makes it."""
    if x.is_cuda and hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(x, w, offs=offs)
    return GroupedMm.apply(x, w, offs)


def weighted_sum(g, out_per_sample_g, hidden_states):
    """grouped_mm_experts_forward's end, from the down projection's sorted
    rows (taken over: the name is rebound to their product, as there): the
    routing weights (fp32 promote the product), the order restored, each
    token's k rows summed by a view and cast back."""
    out_per_sample_g = mul(out_per_sample_g, g.sample_weights_g.unsqueeze(-1))
    out_per_sample = out_per_sample_g[g.inv_perm]
    num_tokens, hidden_dim = hidden_states.shape
    final_hidden_states = out_per_sample.view(num_tokens, -1, hidden_dim).sum(dim=1)
    return final_hidden_states.to(hidden_states.dtype)


def experts_3d(count, intermediate_size, hidden_size):
    """transformers 5's experts module (MixtralExperts and the classes made
    from it): gate_up_proj [experts, 2 x intermediate, hidden] and
    down_proj [experts, hidden, intermediate], two bare parameters."""
    experts = nn.Module()
    experts.gate_up_proj = nn.Parameter(torch.empty(count, 2 * intermediate_size, hidden_size).normal_(std=0.02))
    experts.down_proj = nn.Parameter(torch.empty(count, hidden_size, intermediate_size).normal_(std=0.02))
    experts.is_transposed = False  # [experts, out, in]: PEFT's ParamWrapper swaps in and out
    return experts


class SparseMoeBlockV5(nn.Module):
    """transformers 5's MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock and
    Qwen2MoeSparseMoeBlock (models/mixtral, qwen3_moe, qwen2_moe;
    integrations/moe.py, 2026): a TopKRouter with a bare weight (Mixtral's
    and Qwen3-MoE's fp32 top-k values are the routing weights, Qwen2-MoE's
    are cast to the logits' dtype), the experts as 3-D gate_up_proj and
    down_proj run by the loop (`eager`) or grouped_mm_experts_forward
    (`grouped_mm`: the release with _grouped_linear, which sums each
    token's rows where the first 5.x ones index_add_ed them), and
    Qwen2-MoE's gated shared expert, run first; the routing pinned as
    RoundRobinTopk pins it."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.qwen2 = cfg["model_type"] == "qwen2_moe"
        qwen = cfg["model_type"] in ("qwen2_moe", "qwen3_moe")
        self.num_experts = cfg["num_experts"] if qwen else cfg["num_local_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg.get("norm_topk_prob", False) if qwen else True
        f = cfg["moe_intermediate_size"] if qwen else cfg["intermediate_size"]
        self.impl = cfg["experts_implementation"]
        self.liger = liger.patches(cfg, "liger_swiglu")  # Liger's LigerExperts (Mixtral, Qwen3-MoE)
        self.gate = nn.Module()
        self.gate.weight = nn.Parameter(torch.empty(self.num_experts, h).normal_(std=0.02))
        self.experts = experts_3d(self.num_experts, f, h)
        shared = cfg.get("shared_expert_intermediate_size", 0) if self.qwen2 else 0
        self.shared_expert = expert_mlp(cfg, shared) if shared else None
        self.shared_expert_gate = nn.Linear(h, 1, bias=False) if shared else None

    def router(self, ac, hidden_states):
        router_logits = linear(ac, hidden_states, self.gate.weight)
        if self.qwen2:  # Qwen2MoeTopKRouter
            router_probs = nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
        else:
            router_probs = nn.functional.softmax(router_logits.float(), dim=-1)
        router_top_value, router_indices = RoundRobinTopk.apply(router_probs, self.top_k)
        if self.norm_topk_prob:
            router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        if self.qwen2:
            router_top_value = router_top_value.to(router_logits.dtype)
        return router_logits, router_top_value, router_indices

    def eager(self, ac, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = linear(ac, current_state, self.experts.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = nn.functional.silu(gate) * up
            current_hidden_states = linear(ac, current_hidden_states, self.experts.down_proj[expert_idx])
            current_hidden_states = mul(current_hidden_states, top_k_weights[token_idx, top_k_pos, None])
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states

    def grouped_mm(self, ac, hidden_states, top_k_index, top_k_weights):
        # grouped_mm_experts_forward as the release with _grouped_linear and the deterministic sum has it
        g = sorted_by_expert(hidden_states, top_k_index, top_k_weights)
        histc_input, tokens_per_expert, offsets = expert_offsets(g.expert_ids_g, self.num_experts)
        gate_up_out = grouped_mm(g.selected_hidden_states_g, self.experts.gate_up_proj, offsets)
        gated_out = self.apply_gate(gate_up_out)
        return weighted_sum(g, grouped_mm(gated_out, self.experts.down_proj, offsets), hidden_states)

    def liger_experts(self, ac, hidden_states, top_k_index, top_k_weights):
        # LigerExperts.forward, bound to the experts module by Liger's patch
        orig_shape = hidden_states.shape
        x = hidden_states.view(-1, orig_shape[-1])
        index = top_k_index.view(-1, top_k_index.shape[-1]).to(torch.int32)
        weights = top_k_weights.view(-1, top_k_weights.shape[-1])
        out = liger.LigerFusedMoEFunction.apply(x, self.experts.gate_up_proj, self.experts.down_proj, index, weights)
        return out.view(orig_shape)

    def run_experts(self, ac, hidden_states, top_k_index, top_k_weights):
        """The experts module called: inside PEFT's ParamWrappers where
        target_parameters name its parameters."""
        if self.liger:
            return self.liger_experts(ac, hidden_states, top_k_index, top_k_weights)
        run = self.grouped_mm if self.impl == "grouped_mm" else self.eager
        return call_wrapped(self.experts, ac, wrapped_names(self.experts, ac),
                            lambda: run(ac, hidden_states, top_k_index, top_k_weights))

    @staticmethod
    def apply_gate(gate_up_out):
        # _default_apply_gate
        gate, up = gate_up_out.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up

    def forward(self, ac, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        experts = self.run_experts
        if self.shared_expert is not None:  # Qwen2MoeSparseMoeBlock.forward
            hidden_states_reshaped = hidden_states.view(-1, hidden_dim)
            shared_expert_output = self.shared_expert(ac, hidden_states_reshaped)
            router_logits, routing_weights, selected_experts = self.router(ac, hidden_states_reshaped)
            expert_output = experts(ac, hidden_states_reshaped, selected_experts, routing_weights)
            shared_expert_output = (nn.functional.sigmoid(linear(ac, hidden_states_reshaped,
                                                                 self.shared_expert_gate.weight))
                                    * shared_expert_output)
            expert_output = add(expert_output, shared_expert_output)
            expert_output = expert_output.reshape(batch_size, sequence_length, hidden_dim)
            return expert_output, router_logits
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits, top_k_weights, top_k_index = self.router(ac, hidden_states)
        hidden_states = experts(ac, hidden_states, top_k_index, top_k_weights)
        # (the logits are the block's local `_` until it returns)
        hidden_states = hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return hidden_states, router_logits


class DeepseekV3MoEV5(SparseMoeBlockV5):
    """transformers 5's DeepseekV3MoE (models/deepseek_v3, the release of
    SparseMoeBlockV5's blocks): DeepseekV3NaiveMoe's 3-D experts run as
    SparseMoeBlockV5 runs them; DeepseekV3TopkRouter returns the fp32
    logits, which stay forward's local; route_tokens_to_experts makes the
    group-limited choice in the block with grad (no get_topk_indices under
    no_grad any more), the choice pinned as 4.x's DeepseekV3MoE pins it;
    the shared experts run last, on the block's input."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        h = cfg["hidden_size"]
        self.hidden = h
        self.num_experts = self.n_routed_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.n_group, self.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.norm_topk_prob = cfg.get("norm_topk_prob", True)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 2.5)
        self.impl = cfg["experts_implementation"]
        self.liger = False  # Liger has no patch for DeepSeek's model types
        f = cfg["moe_intermediate_size"]
        # registered as DeepseekV3MoE.__init__ does: experts, gate, shared_experts
        self.experts = experts_3d(self.num_experts, f, h)
        self.gate = nn.Module()
        self.gate.weight = nn.Parameter(torch.empty(self.num_experts, h).normal_(std=0.02))
        self.gate.register_buffer("e_score_correction_bias", torch.zeros(self.num_experts))
        self.shared_experts = expert_mlp(cfg, f * cfg.get("n_shared_experts", 1))

    def router_forward(self, ac, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden)
        return linear(ac, hidden_states.type(torch.float32), self.gate.weight.type(torch.float32))

    def route_tokens_to_experts(self, router_logits):
        e = self.n_routed_experts
        router_logits = router_logits.sigmoid()
        router_logits_for_choice = router_logits + self.gate.e_score_correction_bias
        group_scores = (router_logits_for_choice.view(-1, self.n_group, e // self.n_group)
                        .topk(2, dim=-1)[0].sum(dim=-1))
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.n_group, e // self.n_group).reshape(-1, e)
        scores_for_choice = router_logits_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        with torch.no_grad():  # the same tensor, the choice pinned: token t's j-th expert is (t*k + j) % E
            topk_indices.copy_(torch.arange(topk_indices.numel()).remainder_(e).view_as(topk_indices))
        topk_weights = router_logits.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights

    def forward(self, ac, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        router_logits = self.router_forward(ac, hidden_states)
        topk_indices, topk_weights = self.route_tokens_to_experts(router_logits)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        experts = self.run_experts
        hidden_states = experts(ac, hidden_states, topk_indices, topk_weights).view(*orig_shape)
        # the routed sum in the stream's dtype and the shared experts' output: CUDA's add under autocast
        hidden_states = add(hidden_states, self.shared_experts(ac, residuals))
        return hidden_states


class DeepseekV2MoEV5(DeepseekV3MoEV5):
    """transformers 5's DeepseekV2Moe (models/deepseek_v2, the same
    release): DeepseekV2Experts (Qwen2MoeExperts' 3-D experts, run as
    SparseMoeBlockV5 runs them); the router an nn.Linear whose weight
    forward takes by F.linear on the input as it is (fp32 copies), the
    logits forward's local; route_tokens_to_experts views them flat, takes
    an fp32 softmax and the greedy or group-limited top-k with grad (pinned
    as RoundRobinTopk pins it), times routed_scaling_factor; the shared
    experts last, on the block's input (DeepseekV3MoEV5's forward)."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        h = cfg["hidden_size"]
        self.num_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.topk_method = cfg.get("topk_method", "greedy")
        self.num_group, self.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 1.0)
        self.impl = cfg["experts_implementation"]
        self.liger = False  # Liger has no patch for DeepSeek's model types
        f = cfg["moe_intermediate_size"]
        # registered as DeepseekV2Moe.__init__ does: experts, gate, shared_experts
        self.experts = experts_3d(self.num_experts, f, h)
        self.gate = nn.Linear(h, self.num_experts, bias=False)
        self.shared_experts = expert_mlp(cfg, f * cfg["n_shared_experts"])

    def route_tokens_to_experts(self, router_logits):
        batch_size, seq_len, hidden_dim = router_logits.shape
        router_logits = router_logits.view(-1, hidden_dim)
        router_logits = router_logits.softmax(dim=-1, dtype=torch.float32)
        if self.topk_method == "greedy":
            topk_weight, topk_idx = RoundRobinTopk.apply(router_logits, self.top_k)
        else:  # group_limited_greedy
            group_scores = router_logits.view(batch_size * seq_len, self.num_group, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = (group_mask.unsqueeze(-1)
                          .expand(batch_size * seq_len, self.num_group, self.num_experts // self.num_group)
                          .reshape(batch_size * seq_len, -1))
            tmp_scores = router_logits.masked_fill(~score_mask.bool(), 0.0)
            topk_weight, topk_idx = RoundRobinTopk.apply(tmp_scores, self.top_k)
        topk_weight = topk_weight * self.routed_scaling_factor
        return topk_idx, topk_weight

    def router_forward(self, ac, hidden_states):
        # forward's own F.linear on the gate's weight, of the input as it is (no view)
        return linear(ac, hidden_states.type(torch.float32), self.gate.weight.type(torch.float32))
