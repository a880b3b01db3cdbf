"""BloomForCausalLM as transformers 4.26-4.27 computes it."""
import math

import torch
import torch.nn as nn

from .common import add, chunks, dropout, in_turn, layer_norm
from .linear import linear


def bloom_gelu_forward(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def bloom_gelu_back(g, x):
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


class BloomGeLU(torch.autograd.Function):
    """modeling_bloom.GeLUFunction: keeps its input, computes without autograd."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return bloom_gelu_forward(input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return bloom_gelu_back(grad_output, input)


def dropout_add(x, residual, prob, training):
    out = dropout(x, prob, training)
    out = add(residual, out)  # the fp32 stream plus a 16-bit output under autocast: CUDA's add
    return out


def build_alibi_tensor(attention_mask, num_heads, dtype):
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


class BloomAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.num_heads = cfg["n_head"]
        self.head_dim = h // self.num_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.query_key_value = nn.Linear(h, 3 * h, bias=True)
        self.dense = nn.Linear(h, h)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)

    def _merge_heads(self, x):
        batch_size_and_num_heads, seq_length, _ = x.shape
        batch_size = batch_size_and_num_heads // self.num_heads
        x = x.view(batch_size, self.num_heads, seq_length, self.head_dim)
        x = x.permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, self.num_heads * self.head_dim)

    def forward(self, ac, hidden_states, residual, alibi, attention_mask, presents=None):
        fused_qkv = linear(ac, hidden_states, self.query_key_value.weight, self.query_key_value.bias)
        batch_size, q_length, _ = fused_qkv.shape
        viewed = fused_qkv.view(batch_size, q_length, self.num_heads, 3, self.head_dim)  # _split_heads
        (query_layer, key_layer, value_layer) = viewed[..., 0, :], viewed[..., 1, :], viewed[..., 2, :]
        del viewed
        query_layer = query_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        key_layer = key_layer.permute(0, 2, 3, 1).reshape(batch_size * self.num_heads, self.head_dim, q_length)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        if presents is not None:  # use_cache: present = (key_layer, value_layer)
            presents.append((key_layer, value_layer))
        # alibi.baddbmm: on autocast's lower-precision list, the bias cast too
        matmul_result = torch.baddbmm(ac.down(alibi), ac.down(query_layer), ac.down(key_layer), beta=1.0,
                                      alpha=self.inv_norm_factor)
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, -1)
        input_dtype = attention_scores.dtype
        if input_dtype == torch.float16:
            attention_scores = attention_scores.to(torch.float)
        attn_weights = torch.masked_fill(attention_scores, attention_mask, torch.finfo(attention_scores.dtype).min)
        attention_probs = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(input_dtype)
        attention_probs = dropout(attention_probs, self.attention_dropout, self.training)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, -1)
        context_layer = torch.bmm(ac.down(attention_probs_reshaped), ac.down(value_layer))
        context_layer = self._merge_heads(context_layer)
        output_tensor = linear(ac, context_layer, self.dense.weight, self.dense.bias)
        output_tensor = dropout_add(output_tensor, residual, self.hidden_dropout, self.training)
        return output_tensor


class BloomBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.self_attention = BloomAttention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.dense_h_to_4h = nn.Linear(h, 4 * h)
        self.dense_4h_to_h = nn.Linear(4 * h, h)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)

    def mlp(self, ac, hidden_states, residual):
        hidden_states = BloomGeLU.apply(linear(ac, hidden_states, self.dense_h_to_4h.weight, self.dense_h_to_4h.bias))
        intermediate_output = linear(ac, hidden_states, self.dense_4h_to_h.weight, self.dense_4h_to_h.bias)
        return dropout_add(intermediate_output, residual, self.hidden_dropout, self.training)

    def forward(self, ac, hidden_states, alibi, attention_mask, presents=None):
        layernorm_output = layer_norm(ac, self.input_layernorm, hidden_states)
        residual = hidden_states
        attention_output = self.self_attention(ac, layernorm_output, residual, alibi, attention_mask, presents)
        layernorm_output = layer_norm(ac, self.post_attention_layernorm, attention_output)
        residual = attention_output
        return self.mlp(ac, layernorm_output, residual)


class Bloom(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.n_head = cfg["n_head"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.word_embeddings_layernorm = nn.LayerNorm(h, eps=eps)
        self.h = nn.ModuleList([BloomBlock(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(h, eps=eps)

    def prepare_attn_mask(self, attention_mask, input_shape):
        # BloomModel._prepare_attn_mask: _make_causal_mask | _expand_mask
        batch_size, target_length = input_shape
        mask = torch.empty((target_length, target_length), dtype=torch.bool)
        seq_ids = torch.arange(target_length)
        mask[:, 0:] = seq_ids[:, None] < seq_ids[None, :]
        combined_attention_mask = mask[None, None, :, :].expand(batch_size, 1, target_length, target_length)
        expanded_attn_mask = ~(attention_mask[:, None, None, :].to(torch.bool))
        expanded_attn_mask = expanded_attn_mask.expand(batch_size, 1, target_length, target_length)
        return expanded_attn_mask | combined_attention_mask

    def embed(self, input_ids):
        return self.word_embeddings(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if past_key_values is not None and not isinstance(past_key_values, list):
            raise NotImplementedError("prefix tuning is mirrored on LLaMA only")
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        hidden_states = layer_norm(ac, self.word_embeddings_layernorm, inputs_embeds)
        batch_size, seq_length = inputs_embeds.shape[:2]
        attention_mask = torch.ones((batch_size, seq_length))
        alibi = build_alibi_tensor(attention_mask, self.n_head, dtype=hidden_states.dtype)
        causal_mask = self.prepare_attn_mask(attention_mask, (batch_size, seq_length))
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:  # BloomModel's call: hidden_states, alibi, causal_mask go as tensors
                hidden_states = checkpoint(lambda x, a, m, c=chunk: in_turn(c, x, lambda b, y: b(ac, y, a, m)),
                                           hidden_states, alibi, causal_mask)
            else:
                hidden_states = chunk[0](ac, hidden_states, alibi, causal_mask, past_key_values)
        hidden_states = layer_norm(ac, self.ln_f, hidden_states)
        return hidden_states

    def head_weight(self):
        return self.word_embeddings.weight
