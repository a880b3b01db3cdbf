"""GPT-OSS (GptOssForCausalLM) as transformers 5 runs it
(models/gpt_oss/modular_gpt_oss.py; integrations/moe.py for the experts'
grouped_mm path): attention with biases and a sink logit per head (eager),
half-width rotary tables applied by chunk and cat, GptOssRMSNorm (OLMo 2's:
the weight applied to the fp32 rows), a full and a sliding-window mask made
once by masking_utils, and GptOssMLP: a biased router softmaxing its top-k
logits, 3-D experts with biases, interleaved gate and up columns, clamped.
The routing is pinned as RoundRobinTopk pins it (every expert its even
share), the cache is 4.x's DynamicCache (the same bytes kept as 5.x's, whose
first update copies them)."""
import torch
import torch.nn as nn

from .common import add, chunks, dropout, mul, sub
from .linear import linear
from .llama import Llama, eager_mask
from . import liger
from .llama_blocks import LlamaRotaryEmbedding, Olmo2RMSNorm, repeat_kv
from .moe import RoundRobinTopk, expert_offsets, grouped_mm_transposed, sorted_by_expert, weighted_sum
from .param_lora import call_wrapped, wrapped_names


def apply_rotary_emb(x, cos, sin):
    """_apply_rotary_emb; under autocast the 16-bit halves times the fp32
    tables are CUDA's mixed products (mul)."""
    first_half, second_half = torch.chunk(x, 2, dim=-1)
    first_ = mul(first_half, cos) - mul(second_half, sin)
    second_ = mul(second_half, cos) + mul(first_half, sin)
    return torch.cat((first_, second_), dim=-1)



def gpt_oss_norm(cfg, h, eps):
    # GptOssRMSNorm, or LigerRMSNorm where apply_liger_kernel_to_gpt_oss swaps it in
    if liger.patches(cfg, "liger_rms_norm"):
        return liger.LigerRMSNorm(h, eps)
    return Olmo2RMSNorm(h, eps)

class GptOssAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.head_dim = cfg["head_dim"]
        self.num_heads = cfg["num_attention_heads"]
        self.num_key_value_groups = self.num_heads // cfg["num_key_value_heads"]
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, cfg["num_key_value_heads"] * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, cfg["num_key_value_heads"] * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=True)
        self.sinks = nn.Parameter(torch.empty(self.num_heads).normal_(std=0.02))

    def eager(self, ac, query, key, value, attention_mask):
        # modeling_gpt_oss.eager_attention_forward
        key_states = repeat_kv(key, self.num_key_value_groups)
        value_states = repeat_kv(value, self.num_key_value_groups)
        attn_weights = torch.matmul(ac.down(query), ac.down(key_states).transpose(2, 3)) * self.scaling
        if attention_mask is not None:
            attn_weights = add(attn_weights, attention_mask)
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
        combined_logits = torch.cat([attn_weights, sinks], dim=-1)
        combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
        probs = nn.functional.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
        scores = probs[..., :-1]
        attn_weights = dropout(scores, self.attention_dropout, self.training).to(value_states.dtype)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape).transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query_states = apply_rotary_emb(query_states, cos, sin)
        key_states = apply_rotary_emb(key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class GptOssExperts(nn.Module):
    """GptOssExperts: gate_up_proj [E, h, 2f], down_proj [E, f, h] (is_transposed) and their biases."""

    def __init__(self, cfg):
        super().__init__()
        e, h, f = cfg["num_local_experts"], cfg["hidden_size"], cfg["intermediate_size"]
        self.num_experts = e
        self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * f).normal_(std=0.02))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * f))
        self.down_proj = nn.Parameter(torch.empty(e, f, h).normal_(std=0.02))
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha = 1.702
        self.limit = 7.0
        self.impl = cfg.get("experts_implementation", "eager")
        self.is_transposed = True

    def _apply_gate(self, gate_up):
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        gated_output = (up + 1) * glu
        return gated_output

    def eager(self, ac, hidden_states, router_indices, routing_weights):
        next_states = torch.zeros_like(hidden_states, dtype=hidden_states.dtype, device=hidden_states.device)
        with torch.no_grad():
            expert_mask = nn.functional.one_hot(router_indices, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            # `current_state @ self.gate_up_proj[expert_idx] + ...`: the select made before
            # autocast casts the operands inside the matmul; the 16-bit product plus the
            # fp32 bias is CUDA's mixed add
            weight = self.gate_up_proj[expert_idx]
            gate_up = add(torch.matmul(ac.down(current_state), ac.down(weight)), self.gate_up_proj_bias[expert_idx])
            gated_output = self._apply_gate(gate_up)
            weight = self.down_proj[expert_idx]
            out = add(torch.matmul(ac.down(gated_output), ac.down(weight)), self.down_proj_bias[expert_idx])
            weighted_output = mul(out, routing_weights[token_idx, top_k_pos, None])
            next_states.index_add_(0, token_idx, weighted_output.to(hidden_states.dtype))
        return next_states

    def grouped_mm(self, ac, hidden_states, top_k_index, top_k_weights):
        # grouped_mm_experts_forward (has_bias, is_transposed), the release
        # SparseMoeBlockV5.grouped_mm mirrors: each row's expert's biases
        # gathered before the counts
        g = sorted_by_expert(hidden_states, top_k_index, top_k_weights)
        selected_gate_up_bias = self.gate_up_proj_bias[g.expert_ids_g]
        selected_down_bias = self.down_proj_bias[g.expert_ids_g]
        histc_input, tokens_per_expert, offsets = expert_offsets(g.expert_ids_g, self.num_experts)
        gate_up_out = grouped_linear(g.selected_hidden_states_g, self.gate_up_proj, offsets, selected_gate_up_bias)
        gated_out = self._apply_gate(gate_up_out)
        return weighted_sum(g, grouped_linear(gated_out, self.down_proj, offsets, selected_down_bias), hidden_states)

    def forward(self, ac, hidden_states, router_indices, routing_weights):
        run = self.grouped_mm if self.impl == "grouped_mm" else self.eager
        # PEFT's ParamWrappers around the module where target_parameters name its parameters
        return call_wrapped(self, ac, wrapped_names(self, ac),
                            lambda: run(ac, hidden_states, router_indices, routing_weights))


def grouped_linear(x, w, offsets, bias):
    """_grouped_linear with is_transposed: the grouped GEMM on w itself
    ([E, in, out]), then `out + bias`."""
    out = grouped_mm_transposed(x, w, offsets)
    return add(out, bias)


class GptOssMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        e, h = cfg["num_local_experts"], cfg["hidden_size"]
        self.top_k = cfg["num_experts_per_tok"]
        self.router = nn.Module()
        self.router.weight = nn.Parameter(torch.empty(e, h).normal_(std=0.02))
        self.router.bias = nn.Parameter(torch.zeros(e))
        self.experts = GptOssExperts(cfg)

    def route(self, ac, hidden_states):
        # GptOssTopKRouter.forward
        router_logits = linear(ac, hidden_states, self.router.weight, self.router.bias)
        router_top_value, router_indices = RoundRobinTopk.apply(router_logits, self.top_k)
        router_scores = nn.functional.softmax(router_top_value, dim=1, dtype=router_top_value.dtype)
        return router_logits, router_scores, router_indices

    def forward(self, ac, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_dim)
        _, router_scores, router_indices = self.route(ac, hidden_states)
        hidden_states = self.experts(ac, hidden_states, router_indices, router_scores)
        hidden_states = hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return hidden_states, router_scores


class GptOssDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-5)
        self.self_attn = GptOssAttention(cfg, layer_idx)
        self.mlp = GptOssMLP(cfg)
        self.input_layernorm = gpt_oss_norm(cfg, h, eps)
        self.post_attention_layernorm = gpt_oss_norm(cfg, h, eps)
        # layer_types: sliding_attention first, then full, alternating
        self.attention_type = "sliding_attention" if layer_idx % 2 == 0 else "full_attention"

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, past_key_value=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(ac, hidden_states, position_embeddings, attention_mask, past_key_value)
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, _ = self.mlp(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states


def sliding_eager_mask(batch_size, cache_position, kv_length, dtype, window):
    """create_sliding_window_causal_mask for eager attention: and_masks of
    the window's overlay (kv_idx > q_idx - window) and the causal function,
    from a 0-dim True, then torch.where as eager_mask does."""
    kv_arange = torch.arange(kv_length)
    q_idx, kv_idx = cache_position[None, None, :, None], kv_arange[None, None, None, :]
    result = q_idx.new_ones((), dtype=torch.bool)
    result = result & (kv_idx > q_idx - window)
    result = result & (kv_idx <= q_idx)
    mask = result.expand(batch_size, -1, cache_position.shape[0], kv_length)
    return torch.where(mask, torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min)


class GptOss(Llama):
    """GptOssModel (transformers 5) with its head: no tied embeddings."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([GptOssDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = gpt_oss_norm(cfg, h, cfg.get("rms_norm_eps", 1e-5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg, half=True)  # GptOssRotaryEmbedding
        self.mtp = None
        self.tied = False
        self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        keys = past_seen_tokens + inputs_embeds.shape[1]
        batch, dtype = inputs_embeds.shape[0], inputs_embeds.dtype
        causal_mask_mapping = {
            "full_attention": eager_mask(batch, cache_position, keys, dtype),
            "sliding_attention": sliding_eager_mask(batch, cache_position, keys, dtype, self.cfg["sliding_window"]),
        }
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        self.all_router_logits = ()
        for chunk in chunks(self.layers, checkpoint):
            mask = causal_mask_mapping[chunk[0].attention_type]
            if checkpoint:  # the call's tensors as the engine's other families pass them: the mask, the positions
                hidden_states = checkpoint(
                    lambda x, m, p, cp, c=chunk: run_chunk(ac, c, x, m, position_embeddings), hidden_states, mask,
                    position_ids, cache_position)
            else:
                hidden_states = run_chunk(ac, chunk, hidden_states, mask, position_embeddings, past_key_values)
        return self.norm(hidden_states)


def run_chunk(ac, chunk, x, mask, position_embeddings, past_key_values=None):
    for layer in chunk:
        x = layer(ac, x, mask, position_embeddings, past_key_values)
    return x
