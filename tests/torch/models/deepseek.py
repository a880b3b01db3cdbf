"""DeepSeek: DeepSeek-V3's multi-head latent attention and router, the
first DeepSeek-MoE's gate with its auxiliary loss, and DeepSeek-V2's
attention and gate as its own modeling_deepseek.py computes them."""
import math

import torch
import torch.nn as nn

from .common import Mean2x, add, mul
from .linear import linear
from .llama_blocks import (LlamaAttention, LlamaRMSNorm, apply_rotary_pos_emb, apply_rotary_pos_emb_interleave,
                           rotate_half)
from .moe import RoundRobinTopk, expert_mlp, expert_mlps


class DeepseekV3Attention(nn.Module):
    """Multi-head latent attention, DeepseekV3Attention of transformers
    4.51-4.52 with eager attention."""

    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.num_heads = cfg["num_attention_heads"]
        self.num_key_value_groups = 1
        self.q_lora_rank = cfg.get("q_lora_rank")
        self.kv_lora_rank = cfg["kv_lora_rank"]
        self.qk_nope, self.qk_rope, self.v_head_dim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.qk_head_dim = self.qk_nope + self.qk_rope
        self.interleave = cfg.get("rope_interleave", True)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("attention_bias", False)
        eps = cfg.get("rms_norm_eps", 1e-6)
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(h, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, self.q_lora_rank, bias=bias)
            self.q_a_layernorm = LlamaRMSNorm(self.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(self.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kv_lora_rank + self.qk_rope, bias=bias)
        self.kv_a_layernorm = LlamaRMSNorm(self.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.num_heads * (self.qk_nope + self.v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, h, bias=bias)
        self.scaling = self.qk_head_dim ** -0.5
        self.softcap = None

    eager = LlamaAttention.eager

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        batch_size, seq_length = hidden_states.shape[:-1]
        if self.q_lora_rank is None:
            q_states = linear(ac, hidden_states, self.q_proj.weight)
        else:
            q_down = linear(ac, hidden_states, self.q_a_proj.weight, self.q_a_proj.bias)
            q_states = linear(ac, self.q_a_layernorm(q_down), self.q_b_proj.weight)
            del q_down
        q_states = q_states.view(batch_size, seq_length, -1, self.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope, self.qk_rope], dim=-1)
        compressed_kv = linear(ac, hidden_states, self.kv_a_proj_with_mqa.weight, self.kv_a_proj_with_mqa.bias)
        k_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope], dim=-1)
        k_pass = linear(ac, self.kv_a_layernorm(k_pass), self.kv_b_proj.weight)
        k_pass = k_pass.view(batch_size, seq_length, -1, self.qk_nope + self.v_head_dim).transpose(1, 2)
        k_pass, value_states = torch.split(k_pass, [self.qk_nope, self.v_head_dim], dim=-1)
        k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope)
        cos, sin = position_embeddings
        rotary = apply_rotary_pos_emb_interleave if self.interleave else apply_rotary_pos_emb
        q_rot, k_rot = rotary(q_rot, k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states = torch.cat((k_pass, k_rot), dim=-1)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class AddAuxiliaryLoss(torch.autograd.Function):
    """DeepSeek's: returns x; in backward the loss gets ones(1)."""

    @staticmethod
    def forward(ctx, x, loss):
        ctx.dtype = loss.dtype
        ctx.required_aux_loss = loss.requires_grad
        return x

    @staticmethod
    def backward(ctx, grad_output):
        grad_loss = torch.ones(1, dtype=ctx.dtype) if ctx.required_aux_loss else None
        return grad_output, grad_loss


class DeepseekMoE(nn.Module):
    """MoEGate and DeepseekMoE of deepseek-ai/deepseek-moe-16b-base's
    modeling_deepseek.py, in training."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.n_routed_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg.get("norm_topk_prob", False)
        self.alpha = cfg.get("aux_loss_alpha", 0.001)
        f = cfg["moe_intermediate_size"]
        self.experts = expert_mlps(cfg, f, self.n_routed_experts)
        self.gate_weight = nn.Parameter(torch.empty(self.n_routed_experts, h).normal_(std=0.02))
        shared = cfg.get("n_shared_experts")
        self.shared_experts = expert_mlp(cfg, f * shared) if shared else None

    def gate(self, ac, hidden_states):
        bsz, seq_len, h = hidden_states.shape
        hidden_states = hidden_states.view(-1, h)
        logits = linear(ac, hidden_states, self.gate_weight)
        scores = ac.up(logits).softmax(dim=-1)  # softmax is on autocast's fp32 list
        topk_weight, topk_idx = RoundRobinTopk.apply(scores, self.top_k)
        if self.top_k > 1 and self.norm_topk_prob:
            denominator = topk_weight.sum(dim=-1, keepdim=True) + 1e-20
            topk_weight = topk_weight / denominator
        aux_loss = None
        if self.training and self.alpha > 0.0:
            topk_idx_for_aux_loss = topk_idx.view(bsz, -1)
            scores_for_seq_aux = scores.view(bsz, seq_len, -1)
            ce = torch.zeros(bsz, self.n_routed_experts)
            ce.scatter_add_(1, topk_idx_for_aux_loss, torch.ones(bsz, seq_len * self.top_k)).div_(
                seq_len * self.top_k / self.n_routed_experts)
            aux_loss = (ce * Mean2x.apply(scores_for_seq_aux, 1, False)).sum(dim=1).mean() * self.alpha
        return topk_idx, topk_weight, aux_loss

    def forward(self, ac, hidden_states):
        identity = hidden_states
        orig_shape = hidden_states.shape
        topk_idx, topk_weight, aux_loss = self.gate(ac, hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        flat_topk_idx = topk_idx.view(-1)
        hidden_states = hidden_states.repeat_interleave(self.top_k, dim=0)
        y = torch.empty_like(hidden_states)
        for i, expert in enumerate(self.experts):
            y[flat_topk_idx == i] = expert(ac, hidden_states[flat_topk_idx == i])
        y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1)
        y = y.view(*orig_shape)
        if aux_loss is not None:
            y = AddAuxiliaryLoss.apply(y, aux_loss)
        if self.shared_experts is not None:
            y = y + self.shared_experts(ac, identity)
        return y


class DeepseekV3MoE(nn.Module):
    """DeepseekV3TopkRouter and DeepseekV3MoE of transformers 4.51-4.52:
    an fp32 router with sigmoid scores, group-limited top-k chosen without
    grad (the choice pinned to even shares, as RoundRobinTopk does), the
    expert loop into an fp32 accumulator, the shared experts on the input."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.hidden = h
        self.n_routed_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.n_group, self.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.norm_topk_prob = cfg.get("norm_topk_prob", True)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 2.5)
        f = cfg["moe_intermediate_size"]
        self.experts = expert_mlps(cfg, f, self.n_routed_experts)
        self.gate_weight = nn.Parameter(torch.empty(self.n_routed_experts, h).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.n_routed_experts))
        self.shared_experts = expert_mlp(cfg, f * cfg.get("n_shared_experts", 1))

    @torch.no_grad()
    def get_topk_indices(self, scores):
        e = self.n_routed_experts
        scores_for_choice = scores.view(-1, e) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = scores_for_choice.view(-1, self.n_group, e // self.n_group).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.n_group, e // self.n_group).reshape(-1, e)
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        # the same tensor, the choice pinned: token t's j-th expert is (t*k + j) % E
        topk_indices.copy_(torch.arange(topk_indices.numel()).remainder_(e).view_as(topk_indices))
        return topk_indices

    def gate(self, ac, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden)
        router_logits = linear(ac, hidden_states.type(torch.float32), self.gate_weight.type(torch.float32))
        scores = router_logits.sigmoid()
        topk_indices = self.get_topk_indices(scores)
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights

    def moe(self, ac, hidden_states, topk_indices, topk_weights):
        final_hidden_states = torch.zeros_like(hidden_states, dtype=topk_weights.dtype)
        expert_mask = torch.nn.functional.one_hot(topk_indices, num_classes=len(self.experts))
        expert_mask = expert_mask.permute(2, 0, 1)
        for expert_idx in range(len(self.experts)):
            expert = self.experts[expert_idx]
            mask = expert_mask[expert_idx]
            token_indices, weight_indices = torch.where(mask)
            if token_indices.numel() > 0:
                expert_weights = topk_weights[token_indices, weight_indices]
                expert_input = hidden_states[token_indices]
                expert_output = expert(ac, expert_input)
                weighted_output = mul(expert_output, expert_weights.unsqueeze(-1))
                final_hidden_states.index_add_(0, token_indices, weighted_output)
        return final_hidden_states.type(hidden_states.dtype)

    def forward(self, ac, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        topk_indices, topk_weights = self.gate(ac, hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.moe(ac, hidden_states, topk_indices, topk_weights).view(*orig_shape)
        # the fp32 routed sum and the shared experts' 16-bit output under autocast: CUDA's add
        hidden_states = add(hidden_states, self.shared_experts(ac, residuals))
        return hidden_states


# ---- DeepSeek-V2: deepseek-ai/DeepSeek-V2(-Lite)'s modeling_deepseek.py
# (the hub's trust_remote_code file, 2024; model_type deepseek_v2) ----


def yarn_get_mscale(scale=1, mscale=1):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


class DeepseekV2RotaryEmbedding(nn.Module):
    """DeepseekV2RotaryEmbedding and DeepseekV2YarnRotaryEmbedding: each
    attention layer's own. __init__ fills cos_cached and sin_cached for
    max_position_embeddings, then sets max_seq_len_cached = None, so the
    first forward refills them for its sequence in the activations' dtype:
    from then on every layer keeps [s, rope] tables of its own (buffers)."""

    def __init__(self, dim, max_position_embeddings, base, yarn=None):
        super().__init__()
        self.dim, self.base, self.yarn = dim, base, yarn
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings, torch.get_default_dtype())
        self.max_seq_len_cached = None

    def _set_cos_sin_cache(self, seq_len, dtype):
        self.max_seq_len_cached = seq_len
        mscale = 1.0
        if self.yarn is None:
            inv_freq = self.inv_freq
            t = torch.arange(seq_len, dtype=inv_freq.dtype)
        else:  # DeepseekV2YarnRotaryEmbedding._set_cos_sin_cache: inv_freq re-registered in fp32
            dim, y = self.dim, self.yarn
            freq_extra = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
            freq_inter = 1.0 / (y["factor"] * self.base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))

            def correction(rot):
                return dim * math.log(y.get("original_max_position_embeddings", 4096) / (rot * 2 * math.pi)) / (
                    2 * math.log(self.base))
            low = max(math.floor(correction(y.get("beta_fast", 32))), 0)
            high = min(math.ceil(correction(y.get("beta_slow", 1))), dim - 1)
            if low == high:
                high += 0.001
            ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
            inv_freq_mask = 1.0 - ramp
            inv_freq = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            t = torch.arange(seq_len, dtype=torch.float32)
            mscale = float(yarn_get_mscale(y["factor"], y.get("mscale", 1))
                           / yarn_get_mscale(y["factor"], y.get("mscale_all_dim", 0)))
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", (emb.cos() * mscale).to(dtype), persistent=False)
        self.register_buffer("sin_cached", (emb.sin() * mscale).to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        if self.max_seq_len_cached is None or seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len, x.dtype)
        return self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(dtype=x.dtype)


def apply_rotary_pos_emb_deepseek_v2(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    # the layer's tables gathered at the positions (new tensors, kept by the
    # products' backward), the interleaved halves regrouped (copies)
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class DeepseekV2Attention(DeepseekV3Attention):
    """DeepseekV2Attention.forward (eager) of DeepSeek's modeling_deepseek.py:
    V3's modules in the same order, then the layer's own rotary tables; the
    query and key states made by new_empty and two slice assignments each
    (CopySlices)."""

    def __init__(self, cfg, layer_idx=0):
        super().__init__(cfg, layer_idx)
        scaling = cfg.get("rope_scaling")
        yarn = scaling if scaling is not None and scaling.get("type") == "yarn" else None
        self.rotary_emb = DeepseekV2RotaryEmbedding(self.qk_rope, cfg.get("max_position_embeddings", 2048),
                                                    cfg.get("rope_theta", 10000.0), yarn)

    def forward(self, ac, hidden_states, position_ids, attention_mask, past_key_value=None):
        bsz, q_len, _ = hidden_states.size()
        if self.q_lora_rank is None:
            q = linear(ac, hidden_states, self.q_proj.weight)
        else:
            q = linear(ac, self.q_a_layernorm(linear(ac, hidden_states, self.q_a_proj.weight, self.q_a_proj.bias)),
                       self.q_b_proj.weight)
        q = q.view(bsz, q_len, self.num_heads, self.qk_head_dim).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.qk_nope, self.qk_rope], dim=-1)
        compressed_kv = linear(ac, hidden_states, self.kv_a_proj_with_mqa.weight, self.kv_a_proj_with_mqa.bias)
        compressed_kv, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope], dim=-1)
        k_pe = k_pe.view(bsz, q_len, 1, self.qk_rope).transpose(1, 2)
        kv = (linear(ac, self.kv_a_layernorm(compressed_kv), self.kv_b_proj.weight)
              .view(bsz, q_len, self.num_heads, self.qk_nope + self.v_head_dim).transpose(1, 2))
        k_nope, value_states = torch.split(kv, [self.qk_nope, self.v_head_dim], dim=-1)
        kv_seq_len = value_states.shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        q_pe, k_pe = apply_rotary_pos_emb_deepseek_v2(q_pe, k_pe, cos, sin, position_ids)
        query_states = k_pe.new_empty(bsz, self.num_heads, q_len, self.qk_head_dim)
        query_states[:, :, :, : self.qk_nope] = q_nope
        query_states[:, :, :, self.qk_nope:] = q_pe
        key_states = k_pe.new_empty(bsz, self.num_heads, q_len, self.qk_head_dim)
        key_states[:, :, :, : self.qk_nope] = k_nope
        key_states[:, :, :, self.qk_nope:] = k_pe
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.v_head_dim)
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        attn_weights = None  # output_attentions is off
        return attn_output, attn_weights


class DeepseekV2MoE(DeepseekMoE):
    """MoEGate and DeepseekV2MoE of DeepSeek's modeling_deepseek.py in
    training: DeepSeekMoE's path (repeat_interleave, y[mask] = expert(...),
    AddAuxiliaryLoss) behind a gate that casts its input and weight to fp32,
    takes an fp32 softmax, chooses greedily or within topk_group of n_group
    groups (the choice pinned to even shares, as RoundRobinTopk does), and
    scales the weights by routed_scaling_factor unless it renormalizes them."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.group_limited = cfg.get("topk_method", "greedy") == "group_limited_greedy"
        self.n_group, self.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 1.0)

    def gate(self, ac, hidden_states, plain=False):
        bsz, seq_len, h = hidden_states.shape
        e = self.n_routed_experts
        hidden_states = hidden_states.view(-1, h)
        logits = linear(ac, hidden_states.type(torch.float32), self.gate_weight.type(torch.float32))
        scores = logits.softmax(dim=-1, dtype=torch.float32)
        if self.group_limited:
            group_scores = scores.view(bsz * seq_len, self.n_group, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = (group_mask.unsqueeze(-1).expand(bsz * seq_len, self.n_group, e // self.n_group)
                          .reshape(bsz * seq_len, -1))
            tmp_scores = scores.masked_fill(~score_mask.bool(), 0.0)
            topk_weight, topk_idx = RoundRobinTopk.apply(tmp_scores, self.top_k)
        else:
            topk_weight, topk_idx = RoundRobinTopk.apply(scores, self.top_k)
        if self.top_k > 1 and self.norm_topk_prob and not plain:
            denominator = topk_weight.sum(dim=-1, keepdim=True) + 1e-20
            topk_weight = topk_weight / denominator
        else:  # transformers' DeepseekV2MoEGate: always, norm_topk_prob unread
            topk_weight = topk_weight * self.routed_scaling_factor
        aux_loss = None
        if self.training and self.alpha > 0.0 and not plain:  # seq_aux
            topk_idx_for_aux_loss = topk_idx.view(bsz, -1)
            scores_for_seq_aux = scores.view(bsz, seq_len, -1)
            ce = torch.zeros(bsz, e)
            ce.scatter_add_(1, topk_idx_for_aux_loss, torch.ones(bsz, seq_len * self.top_k)).div_(
                seq_len * self.top_k / e)
            aux_loss = (ce * Mean2x.apply(scores_for_seq_aux, 1, False)).sum(dim=1).mean() * self.alpha
        return topk_idx, topk_weight, aux_loss


# ---- DeepSeek-V2 as transformers' own class: DeepseekV2ForCausalLM of
# transformers 4.56-4.57 (src/transformers/models/deepseek_v2/
# modeling_deepseek_v2.py at commit 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d),
# the class a config.json without auto_map loads ----


def remote_code(cfg):
    """A deepseek_v2 config.json with auto_map runs DeepSeek's own
    modeling_deepseek.py (trust_remote_code); without one, AutoModel has
    only transformers' DeepseekV2ForCausalLM to load it with."""
    return cfg["model_type"] == "deepseek_v2" and "auto_map" in cfg


def transformers_v2(cfg):
    return cfg["model_type"] == "deepseek_v2" and "auto_map" not in cfg


class DeepseekV2HFRotaryEmbedding(nn.Module):
    """DeepseekV2RotaryEmbedding (default rope type): the model's one
    module; under no_grad inv_freq times the positions, then torch.polar of
    ones_like and the angles, times attention_scaling: a complex64
    freqs_cis [1, s, rope / 2]."""

    def __init__(self, cfg):
        super().__init__()
        dim, base = cfg["qk_rope_head_dim"], cfg.get("rope_theta", 10000.0)
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
        freqs_cis = freqs_cis * self.attention_scaling
        return freqs_cis


def apply_rotary_emb(xq, xk, freqs_cis):
    # each part made fp32 (a copy unless it is), viewed as complex pairs,
    # times the table, viewed back and cast to its dtype (a copy unless fp32)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.unsqueeze(1)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk)
    return xq_out, xk_out


class DeepseekV2HFAttention(DeepseekV3Attention):
    """DeepseekV2Attention.forward with eager attention: V3's modules in the
    same order; q_pe and the one k_pe rotated by apply_rotary_emb, k_pe
    expanded to every head, the states joined by torch.cat."""

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        batch_size, seq_length = hidden_states.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)
        key_shape = (batch_size, seq_length, -1, self.qk_nope + self.v_head_dim)
        if self.q_lora_rank is None:
            q = linear(ac, hidden_states, self.q_proj.weight)
        else:
            q = linear(ac, self.q_a_layernorm(linear(ac, hidden_states, self.q_a_proj.weight, self.q_a_proj.bias)),
                       self.q_b_proj.weight)
        q = q.view(query_shape).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [self.qk_nope, self.qk_rope], dim=-1)
        compressed_kv = linear(ac, hidden_states, self.kv_a_proj_with_mqa.weight, self.kv_a_proj_with_mqa.bias)
        k_nope, k_pe = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope], dim=-1)
        k_nope = linear(ac, self.kv_a_layernorm(k_nope), self.kv_b_proj.weight).view(key_shape).transpose(1, 2)
        k_nope, value_states = torch.split(k_nope, [self.qk_nope, self.v_head_dim], dim=-1)
        k_pe = k_pe.view(batch_size, 1, seq_length, self.qk_rope)
        q_pe, k_pe = apply_rotary_emb(q_pe, k_pe, position_embeddings[0])
        k_pe = k_pe.expand(*k_nope.shape[:-1], -1)
        query_states = torch.cat((q_nope, q_pe), dim=-1)
        key_states = torch.cat((k_nope, k_pe), dim=-1)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class DeepseekV2HFMoE(DeepseekV2MoE):
    """DeepseekV2MoEGate and DeepseekV2MoE: the gate as DeepSeek's (fp32
    input and weight, fp32 softmax, greedy or group-limited top-k pinned to
    even shares) but always times routed_scaling_factor and without the
    auxiliary loss; moe() sorts the assignments by expert (argsort), gathers
    the tokens once, runs each expert on its slice, joins the outputs
    (torch.cat), scatters them back by index, weighs them in the weights'
    dtype (a copy unless it is theirs; mul_ in place) and sums over k."""

    def gate(self, ac, hidden_states):
        topk_idx, topk_weight, _ = super().gate(ac, hidden_states, plain=True)
        return topk_idx, topk_weight

    def moe(self, ac, hidden_states, topk_ids, topk_weight):
        cnts = topk_ids.new_zeros((topk_ids.shape[0], len(self.experts)))
        cnts.scatter_(1, topk_ids, 1)
        tokens_per_expert = cnts.sum(dim=0)
        indices = topk_ids.view(-1).argsort()
        sorted_tokens = hidden_states[indices // topk_ids.shape[1]]
        outputs = []
        start_idx = 0
        for i, num_tokens in enumerate(tokens_per_expert):
            if num_tokens == 0:
                continue
            end_idx = start_idx + num_tokens
            tokens_for_this_expert = sorted_tokens[start_idx:end_idx]
            expert_out = self.experts[i](ac, tokens_for_this_expert)
            outputs.append(expert_out)
            start_idx = end_idx
        outs = torch.cat(outputs, dim=0) if outputs else sorted_tokens.new_empty(0)
        new_x = torch.empty_like(outs)
        new_x[indices] = outs
        return (new_x.view(*topk_ids.shape, -1).type(topk_weight.dtype).mul_(topk_weight.unsqueeze(dim=-1))
                .sum(dim=1).type(new_x.dtype))

    def forward(self, ac, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        topk_indices, topk_weights = self.gate(ac, hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.moe(ac, hidden_states, topk_indices, topk_weights).view(*orig_shape)
        return add(hidden_states, self.shared_experts(ac, residuals))
