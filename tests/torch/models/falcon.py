"""FalconForCausalLM as transformers computes it with eager attention, on its
rotary path (models/falcon/modeling_falcon.py, huggingface/transformers
commit 00dcc6d, the 4.5x line): one bias-free query_key_value split by
_split_heads (slices are views, a list index copies, flatten copies what it
cannot view), LLaMA's rotary tables and rotate_half, the scores divided in
place and softmax(scores + mask, dtype=the input's dtype), the probabilities
a local until the module returns, attention and MLP side by side on one
input_layernorm (or ln_attn and ln_mlp under new_decoder_architecture), the
MLP's output taking the attention's in place, then dropout_add; a head tied
to the word embeddings unless the config says otherwise.
Its attribute names are transformers' (word_embeddings, h, self_attention,
query_key_value, dense, dense_h_to_4h, dense_4h_to_h, ln_f: LoRA and
modules_to_save match on them); embed_tokens, layers and norm are aliases
for the harness's generic code.
"""
import math

import torch
import torch.nn as nn

from .common import activation, add, aliases, chunks, dropout, in_turn, layer_norm
from .linear import linear
from .llama_blocks import LlamaRotaryEmbedding, apply_rotary_pos_emb


def sdpa_math_causal(ac, query, key, value):
    """F.scaled_dot_product_attention(query, key, value, is_causal=True) as
    PyTorch 2.1+ runs it when its fused kernels refuse fewer key heads than
    query heads: _scaled_dot_product_attention_math (aten/src/ATen/native/
    transformers/attention.cpp), on autocast's lower-precision list."""
    query, key, value = ac.down(query), ac.down(key), ac.down(value)
    scaling_factor = math.sqrt(1.0 / math.sqrt(query.shape[-1]))
    query = query * scaling_factor
    length, source = query.shape[-2], key.shape[-2]
    attn_mask = torch.ones(length, source, dtype=torch.bool).tril()
    new_attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype)  # convert_boolean_attn_mask
    new_attn_mask.masked_fill_(attn_mask.logical_not(), -float("inf"))
    attn_mask = new_attn_mask
    attn = torch.matmul(query, key.transpose(-2, -1) * scaling_factor)
    attn.add_(attn_mask)
    attn = torch.softmax(attn, -1)
    return torch.matmul(attn, value)


class FalconAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.num_heads = cfg["num_attention_heads"]
        self.head_dim = h // self.num_heads
        self.new_decoder_architecture = cfg.get("new_decoder_architecture", False)
        self.multi_query = cfg.get("multi_query", True)
        num_kv_heads = cfg.get("num_kv_heads") or self.num_heads  # FalconConfig: None is the heads
        if self.new_decoder_architecture:
            qkv_out_dim = (num_kv_heads * 2 + self.num_heads) * self.head_dim
        elif self.multi_query:
            qkv_out_dim = h + 2 * self.head_dim
        else:
            qkv_out_dim = 3 * h
        # FalconLinear without a bias: input @ weight.T
        self.query_key_value = nn.Linear(h, qkv_out_dim, bias=False)
        self.dense = nn.Linear(h, h, bias=False)
        self.num_kv_heads = num_kv_heads if (self.new_decoder_architecture or not self.multi_query) else 1
        self.sdpa = cfg.get("_attn_implementation") == "sdpa"

    def _split_heads(self, fused_qkv):
        if self.new_decoder_architecture:
            batch, seq_len, _ = fused_qkv.shape
            qkv = fused_qkv.view(batch, seq_len, -1, self.num_heads // self.num_kv_heads + 2, self.head_dim)
            query = qkv[:, :, :, :-2]
            key = qkv[:, :, :, [-2]]
            value = qkv[:, :, :, [-1]]
            key = torch.broadcast_to(key, query.shape)
            value = torch.broadcast_to(value, query.shape)
            query, key, value = [x.flatten(2, 3) for x in (query, key, value)]
            return query, key, value
        elif not self.multi_query:
            batch_size, seq_length, _ = fused_qkv.shape
            fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
            return fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]
        else:
            batch_size, seq_length, _ = fused_qkv.shape
            fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
            return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, layer_past=None):
        fused_qkv = linear(ac, hidden_states, self.query_key_value.weight)
        num_kv_heads = self.num_heads if self.new_decoder_architecture else self.num_kv_heads
        query_layer, key_layer, value_layer = self._split_heads(fused_qkv)
        batch_size, query_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        cos, sin = position_embeddings
        query_layer, key_layer = apply_rotary_pos_emb(query_layer, key_layer, cos, sin)
        if layer_past is not None:
            key_layer, value_layer = layer_past.update(key_layer, value_layer, self.layer_idx)
        if self.sdpa:  # no mask (_ignore_causal_mask_sdpa): is_causal; the math backend for multi-query
            attn_output = sdpa_math_causal(ac, query_layer, key_layer, value_layer)
            attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
            attn_output = attn_output.permute(0, 2, 1, 3)
            attn_output = attn_output.reshape(batch_size, query_length, self.num_heads * self.head_dim)
            return linear(ac, attn_output, self.dense.weight), layer_past
        kv_length = key_layer.shape[-2]
        attention_mask = attention_mask[:, :, :, :kv_length]
        # matmul is on autocast's lower-precision list: its arguments are cast, then broadcast
        attention_scores = torch.matmul(ac.down(query_layer), ac.down(key_layer.transpose(-1, -2)))
        attention_scores /= math.sqrt(self.head_dim)
        # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
        attention_scores = nn.functional.softmax(add(attention_scores, attention_mask), dim=-1,
                                                 dtype=hidden_states.dtype)
        attn_output = torch.matmul(ac.down(attention_scores), ac.down(value_layer))
        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3)
        attn_output = attn_output.reshape(batch_size, query_length, self.num_heads * self.head_dim)
        attn_output = linear(ac, attn_output, self.dense.weight)
        return attn_output, layer_past


class FalconMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        inner = cfg.get("ffn_hidden_size") or 4 * h
        self.dense_h_to_4h = nn.Linear(h, inner, bias=False)
        self.dense_4h_to_h = nn.Linear(inner, h, bias=False)
        self.act = cfg.get("activation", "gelu")

    def forward(self, ac, x):
        x = activation(ac, self.act, linear(ac, x, self.dense_h_to_4h.weight))
        x = linear(ac, x, self.dense_4h_to_h.weight)
        return x


class FalconDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.self_attention = FalconAttention(cfg, layer_idx)
        self.mlp = FalconMLP(cfg)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)
        self.new_decoder_architecture = cfg.get("new_decoder_architecture", False)
        self.num_ln = cfg.get("num_ln_in_parallel_attn")
        if self.num_ln is None and self.new_decoder_architecture:
            self.num_ln = 2
        # registered after the attention and the MLP, as transformers does
        if self.num_ln == 2:
            self.ln_attn = nn.LayerNorm(h, eps=eps)
            self.ln_mlp = nn.LayerNorm(h, eps=eps)
        else:
            self.input_layernorm = nn.LayerNorm(h, eps=eps)

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, layer_past=None):
        residual = hidden_states
        if self.new_decoder_architecture and self.num_ln == 2:
            attention_layernorm_out = layer_norm(ac, self.ln_attn, hidden_states)
            mlp_layernorm_out = layer_norm(ac, self.ln_mlp, hidden_states)
        else:
            attention_layernorm_out = layer_norm(ac, self.input_layernorm, hidden_states)
        attn_outputs = self.self_attention(ac, attention_layernorm_out, attention_mask, position_embeddings, layer_past)
        attention_output = attn_outputs[0]
        if not self.new_decoder_architecture or self.num_ln == 1:  # parallel_attn: one norm feeds both
            mlp_layernorm_out = attention_layernorm_out
        mlp_output = self.mlp(ac, mlp_layernorm_out)
        mlp_output += attention_output
        # dropout_add
        output = add(residual, dropout(mlp_output, self.hidden_dropout, self.training))
        return output


class Falcon(nn.Module):
    """FalconModel (word_embeddings, h, ln_f, rotary_emb) and FalconForCausalLM's lm_head."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.h = nn.ModuleList([FalconDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.ln_f = nn.LayerNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg)  # FalconRotaryEmbedding: LlamaRotaryEmbedding's copy
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    embed_tokens, layers, norm = aliases("word_embeddings", "h", "ln_f")

    def embed(self, input_ids):
        return self.word_embeddings(input_ids)

    @staticmethod
    def causal_mask(input_tensor, cache_position, past_seen_tokens=0):
        # FalconModel._update_causal_mask without an attention mask: target_length
        # is past_seen_tokens + sequence_length; then
        # _prepare_4d_causal_attention_mask_with_cache_position, no padding mask
        dtype = input_tensor.dtype
        sequence_length = input_tensor.shape[1]
        target_length = past_seen_tokens + sequence_length
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        return causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        if not self.cfg.get("use_cache", True):  # config.use_cache (FalconConfig's default true)
            past_key_values = None
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        sdpa = self.cfg.get("_attn_implementation") == "sdpa"  # _ignore_causal_mask_sdpa: no mask
        causal_mask = None if sdpa else self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:  # the call LlamaModel makes (the tensors the layer takes)
                hidden_states = checkpoint(
                    lambda x, m, p, cp, t, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m, t)),
                    hidden_states, causal_mask, position_ids, cache_position, position_embeddings)
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, position_embeddings, past_key_values)
        return layer_norm(ac, self.ln_f, hidden_states)

    def head_weight(self):
        return self.word_embeddings.weight if self.tied else self.lm_head.weight
