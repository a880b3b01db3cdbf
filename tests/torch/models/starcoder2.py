"""Starcoder2ForCausalLM as transformers 4.50-4.52 computes it with eager
attention: MistralModel's mask, rotary tables and eager core; LayerNorms
with biases; residual_dropout inside the attention and the MLP."""
import torch
import torch.nn as nn

from .common import activation, add, chunks, dropout, layer_norm
from .linear import linear
from .llama import Llama, run_layers
from .llama_blocks import LlamaAttention, LlamaRotaryEmbedding, apply_rotary_pos_emb


class Starcoder2Attention(LlamaAttention):
    def __init__(self, cfg, layer_idx):
        # q/k/v/o with biases when use_bias (LlamaAttention's attention_bias)
        super().__init__(dict(cfg, attention_bias=cfg.get("use_bias", True)), layer_idx)
        self.residual_dropout = cfg.get("residual_dropout", 0.0)

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape).transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        attn_output = dropout(attn_output, self.residual_dropout, self.training)
        return attn_output, attn_weights


class Starcoder2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, bias = cfg["hidden_size"], cfg.get("use_bias", True)
        self.c_fc = nn.Linear(h, cfg["intermediate_size"], bias=bias)
        self.c_proj = nn.Linear(cfg["intermediate_size"], h, bias=bias)
        self.act = cfg.get("hidden_act", "gelu_pytorch_tanh")
        self.residual_dropout = cfg.get("residual_dropout", 0.0)

    def forward(self, ac, hidden_states):
        hidden_states = linear(ac, hidden_states, self.c_fc.weight, self.c_fc.bias)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = linear(ac, hidden_states, self.c_proj.weight, self.c_proj.bias)
        return dropout(hidden_states, self.residual_dropout, self.training)


class Starcoder2DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("norm_epsilon", 1e-5)
        # MistralDecoderLayer's order: self_attn, mlp, then the norms
        self.self_attn = Starcoder2Attention(cfg, layer_idx)
        self.mlp = Starcoder2MLP(cfg)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.is_sliding = False

    def forward(self, ac, hidden_states, attention_mask, position_ids, cos, sin, past_key_value=None,
                cache_position=None):
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = layer_norm(ac, self.input_layernorm, hidden_states)
        hidden_states, self_attn_weights = self.self_attn(ac, hidden_states, (cos, sin), attention_mask,
                                                          past_key_value)
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = layer_norm(ac, self.post_attention_layernorm, hidden_states)
        hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states


class Starcoder2(nn.Module):
    """Starcoder2Model: embed_tokens, layers, norm, rotary_emb (MistralModel's
    order); embedding_dropout after the embeddings, before the tables."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([Starcoder2DecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = nn.LayerNorm(h, eps=cfg.get("norm_epsilon", 1e-5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.embedding_dropout = cfg.get("embedding_dropout", 0.0)
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    causal_mask = Llama.causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        hidden_states = dropout(hidden_states, self.embedding_dropout, self.training)
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        tables = (cos, sin)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # MistralModel's call: the rotary tables go as a tuple
                hidden_states = checkpoint(lambda x, m, p, cp, t, c=chunk: run_layers(ac, c, x, m, p, cp, t),
                                           hidden_states, causal_mask, position_ids, cache_position, tables)
            else:
                hidden_states = run_layers(ac, chunk, hidden_states, causal_mask, position_ids, cache_position, tables,
                                           past_key_values)
        return layer_norm(ac, self.norm, hidden_states)

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight
