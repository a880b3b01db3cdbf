"""MptForCausalLM as transformers 4.50-4.52 computes it
(models/mpt/modeling_mpt.py, and modeling_attn_mask_utils.py for its mask):
an fp32 ALiBi table made once, a bool mask from the 4-D converter, one Wqkv
chunked, no biases, the block keeping its keys, values and probabilities.
Its attribute names are transformers' (wte, blocks, norm_f, Wqkv, out_proj,
up_proj, down_proj: LoRA and modules_to_save match on them); embed_tokens,
layers and norm are aliases for the harness's generic code.
"""
import math

import torch
import torch.nn as nn

from .common import DynamicCache, add, aliases, chunks, dropout, in_turn, layer_norm
from .linear import linear


def mpt_alibi(num_heads, width, alibi_bias_max=8):
    """build_mpt_alibi_tensor: an int32 ramp 1 - width .. 0 times one slope
    per head, in fp32 whatever the model's dtype: [heads, 1, width]."""
    ramp = torch.arange(1 - width, 1, dtype=torch.int32).view(1, 1, 1, width)
    padded_heads = 2 ** math.ceil(math.log2(num_heads))
    exponents = torch.arange(1, padded_heads + 1, dtype=torch.int64).float()
    exponents = exponents * (alibi_bias_max / padded_heads)
    slopes = 1.0 / torch.pow(2, exponents)
    slopes = slopes.view(1, padded_heads, 1, 1)
    if padded_heads != num_heads:  # the odd slopes first, then the even ones
        slopes = torch.concat([slopes[:, 1::2, ...], slopes[:, ::2, ...]], dim=1)[:, :num_heads, ...]
    ramp = ramp * slopes
    return ramp.squeeze(0)


def mpt_causal_mask(attention_mask, seq_length, dtype):
    """_prepare_4d_causal_attention_mask(attention_mask, (b, s), inputs_embeds,
    0) (AttentionMaskConverter.to_4d) in the embeddings' dtype."""
    batch_size = attention_mask.shape[0]
    minimum = torch.finfo(dtype).min
    # _make_causal_mask: full() without a dtype is fp32
    causal = torch.full((seq_length, seq_length), minimum)
    cond = torch.arange(causal.size(-1))
    causal.masked_fill_(cond < (cond + 1).view(causal.size(-1), 1), 0)
    causal = causal.to(dtype)
    causal_4d = causal[None, None, :, :].expand(batch_size, 1, seq_length, seq_length)
    del causal, cond
    # _expand_mask
    expanded = attention_mask[:, None, None, :].expand(batch_size, 1, seq_length, seq_length).to(dtype)
    inverted = 1.0 - expanded
    padding = inverted.masked_fill(inverted.to(torch.bool), minimum)
    del expanded, inverted
    combined = causal_4d.masked_fill(padding.bool(), minimum)
    del padding, causal_4d  # to_4d returns
    return combined


class MptAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["d_model"]
        self.n_heads = cfg["n_heads"]
        self.head_dim = h // self.n_heads
        self.softmax_scale = 1 / math.sqrt(h / self.n_heads)
        self.attn_dropout_p = cfg.get("attn_config", {}).get("attn_pdrop", 0.0)
        self.Wqkv = nn.Linear(h, 3 * h, bias=False)
        self.out_proj = nn.Linear(h, h, bias=False)

    def forward(self, ac, hidden_states, position_bias, attention_mask):
        batch_size, seq_length = hidden_states.shape[:2]
        mixed_qkv = linear(ac, hidden_states, self.Wqkv.weight)
        query_states, key_states, value_states = mixed_qkv.chunk(3, dim=2)
        shape = (batch_size, seq_length, self.n_heads, self.head_dim)
        query_states = query_states.reshape(shape).transpose(1, 2)
        key_states = key_states.reshape(shape).transpose(1, 2)
        value_states = value_states.reshape(shape).transpose(1, 2)
        past_key_value = (key_states, value_states)
        scores = torch.matmul(ac.down(query_states), ac.down(key_states).transpose(-1, -2)) * self.softmax_scale
        # past_key_value is set by now, so the query length counts twice: the slice starts at row 0
        query_length = seq_length + past_key_value[0].shape[2]
        key_length = key_states.shape[-2]
        position_bias = position_bias[:, max(0, position_bias.size(1) - query_length):,
                                      max(0, position_bias.size(2) - key_length):]
        # 16-bit scores plus the fp32 table: CUDA's add (MixedAdd), an fp32 sum
        scores = add(scores, position_bias)
        scores = scores.masked_fill(attention_mask, torch.finfo(query_states.dtype).min)
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).to(value_states.dtype)
        attn_weights = dropout(attn_weights, self.attn_dropout_p, self.training)
        context_states = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        context_states = context_states.permute(0, 2, 1, 3).contiguous().view(batch_size, seq_length, -1)
        attn_output = linear(ac, context_states, self.out_proj.weight)
        return attn_output, attn_weights, past_key_value


class MptMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["d_model"]
        self.up_proj = nn.Linear(h, 4 * h, bias=False)
        self.down_proj = nn.Linear(4 * h, h, bias=False)
        self.hidden_dropout = cfg.get("attn_config", {}).get("attn_pdrop", 0.0)

    def forward(self, ac, hidden_states, residual):
        # nn.GELU(approximate="none") runs in its input's dtype (not on autocast's lists)
        hidden_states = nn.functional.gelu(linear(ac, hidden_states, self.up_proj.weight))
        intermediate_output = linear(ac, hidden_states, self.down_proj.weight)
        output = dropout(intermediate_output, self.hidden_dropout, self.training)
        output = add(output, residual)
        return output


class MptBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, eps = cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-5)
        self.norm_1 = nn.LayerNorm(h, eps=eps)
        self.norm_1.bias = None  # as MptBlock does, for the Hub's weights
        self.attn = MptAttention(cfg)
        self.norm_2 = nn.LayerNorm(h, eps=eps)
        self.norm_2.bias = None
        self.ffn = MptMLP(cfg)
        self.dropout_rate = cfg.get("attn_config", {}).get("attn_pdrop", 0.0)

    def forward(self, ac, hidden_states, position_bias, attention_mask, presents=None):
        layernorm_output = layer_norm(ac, self.norm_1, hidden_states)
        residual = hidden_states
        attn_outputs, attn_weights, past_key_value = self.attn(ac, layernorm_output, position_bias, attention_mask)
        hidden_states = add(dropout(attn_outputs, self.dropout_rate, self.training), residual)
        layernorm_output = layer_norm(ac, self.norm_2, hidden_states)
        residual = hidden_states
        output = self.ffn(ac, layernorm_output, residual)
        if presents is not None:  # use_cache: outputs += (past_key_value,)
            presents.update(past_key_value[0], past_key_value[1], len(presents.key_cache))
        return output


class Mpt(nn.Module):
    """MptModel: wte, blocks, norm_f (no bias); the head tied to wte."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["d_model"]
        self.cfg = cfg
        self.num_heads = cfg["n_heads"]
        self.wte = nn.Embedding(cfg["vocab_size"], h)
        self.blocks = nn.ModuleList([MptBlock(cfg) for _ in range(cfg["n_layers"])])
        self.norm_f = nn.LayerNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.norm_f.bias = None
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    embed_tokens, layers, norm = aliases("wte", "blocks", "norm_f")

    def embed(self, input_ids):
        return self.wte(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if past_key_values is not None and not isinstance(past_key_values, DynamicCache):
            raise NotImplementedError("prefix tuning is mirrored on LLaMA only")
        # config.use_cache is MptConfig's (false by default), and off under checkpointing
        presents = past_key_values if self.cfg.get("use_cache", False) and not checkpoint else None
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        hidden_states = inputs_embeds
        batch_size, seq_length = inputs_embeds.shape[:2]
        attention_mask = torch.ones((batch_size, seq_length))
        alibi = mpt_alibi(self.num_heads, self.cfg["max_seq_len"])
        causal_mask = mpt_causal_mask(attention_mask, seq_length, inputs_embeds.dtype)
        causal_mask = causal_mask.bool()
        for chunk in chunks(self.blocks, checkpoint):
            if checkpoint:  # MptModel's call: hidden_states, alibi, causal_mask go as tensors
                hidden_states = checkpoint(lambda x, a, m, c=chunk: in_turn(c, x, lambda b, y: b(ac, y, a, m)),
                                           hidden_states, alibi, causal_mask)
            else:
                hidden_states = chunk[0](ac, hidden_states, alibi, causal_mask, presents)
        return layer_norm(ac, self.norm_f, hidden_states)

    def head_weight(self):
        return self.wte.weight if self.tied else self.lm_head.weight
