"""GPTNeoXForCausalLM and PhiForCausalLM as transformers 4.50-4.52 compute
them with eager attention: LLaMA's mask, rotary tables and eager core."""
import torch
import torch.nn as nn

from .common import activation, add, chunks, dropout, in_turn, layer_norm
from .linear import linear
from .llama import Llama
from .llama_blocks import LlamaAttention, LlamaRotaryEmbedding, apply_rotary_pos_emb, apply_rotary_pos_emb_phi3


class PartialRotaryAttention(nn.Module):
    """The attention core both share with LLaMA (no GQA in GPT-NeoX)."""

    eager = LlamaAttention.eager

    def setup(self, cfg, layer_idx, heads, kv_heads, head_dim):
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv, self.head_dim = heads, kv_heads, head_dim
        self.num_key_value_groups = heads // kv_heads
        self.scaling = head_dim ** -0.5
        self.softcap = None
        self.attention_dropout = cfg.get("attention_dropout", 0.0)


class GPTNeoXAttention(PartialRotaryAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.setup(cfg, layer_idx, heads, heads, h // heads)
        bias = cfg.get("attention_bias", True)
        self.query_key_value = nn.Linear(h, 3 * h, bias=bias)
        self.dense = nn.Linear(h, h, bias=bias)

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, layer_past=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, 3 * self.head_dim)
        qkv = linear(ac, hidden_states, self.query_key_value.weight, self.query_key_value.bias)
        qkv = qkv.view(hidden_shape).transpose(1, 2)
        query_states, key_states, value_states = qkv.chunk(3, dim=-1)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_phi3(query_states, key_states, cos, sin)
        if layer_past is not None:
            key_states, value_states = layer_past.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.dense.weight, self.dense.bias)
        return attn_output, attn_weights


class PhiAttention(PartialRotaryAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        self.setup(cfg, layer_idx, heads, kv, h // heads)
        self.rotary_ndims = int(self.head_dim * cfg.get("partial_rotary_factor", 0.5))
        self.q_proj = nn.Linear(h, heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, kv * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, kv * self.head_dim, bias=True)
        self.dense = nn.Linear(heads * self.head_dim, h, bias=True)

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape).transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        # the parts are this frame's locals until it returns
        query_rot, query_pass = query_states[..., : self.rotary_ndims], query_states[..., self.rotary_ndims:]
        key_rot, key_pass = key_states[..., : self.rotary_ndims], key_states[..., self.rotary_ndims:]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.dense.weight, self.dense.bias)
        return attn_output, attn_weights


class TwoLinearMLP(nn.Module):
    """GPTNeoXMLP (dense_h_to_4h, dense_4h_to_h) and PhiMLP (fc1, fc2)."""

    def __init__(self, h, inner, act, names):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(h, inner))
        setattr(self, names[1], nn.Linear(inner, h))
        self.act = act

    def forward(self, ac, x):
        up, down = getattr(self, self.names[0]), getattr(self, self.names[1])
        x = linear(ac, x, up.weight, up.bias)
        x = activation(ac, self.act, x)
        return linear(ac, x, down.weight, down.bias)


class GPTNeoXLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-5)
        self.use_parallel_residual = cfg.get("use_parallel_residual", True)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.attention = GPTNeoXAttention(cfg, layer_idx)
        self.mlp = TwoLinearMLP(h, cfg.get("intermediate_size") or 4 * h, cfg.get("hidden_act", "gelu"),
                                ("dense_h_to_4h", "dense_4h_to_h"))

    def forward(self, ac, hidden_states, attention_mask, cos, sin, layer_past=None):
        # under autocast the branches return 16-bit rows onto the fp32
        # stream: CUDA's add, as MixedAdd, without CPU's fp32 copy
        attn_output, attn_weights = self.attention(ac, layer_norm(ac, self.input_layernorm, hidden_states),
                                                   attention_mask, (cos, sin), layer_past)
        attn_output = dropout(attn_output, self.hidden_dropout, self.training)
        if self.use_parallel_residual:
            mlp_output = self.mlp(ac, layer_norm(ac, self.post_attention_layernorm, hidden_states))
            mlp_output = dropout(mlp_output, self.hidden_dropout, self.training)
            return add(add(mlp_output, attn_output), hidden_states)
        attn_output = add(attn_output, hidden_states)
        mlp_output = self.mlp(ac, layer_norm(ac, self.post_attention_layernorm, attn_output))
        mlp_output = dropout(mlp_output, self.hidden_dropout, self.training)
        return add(mlp_output, attn_output)


class PhiDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        # registered as PhiDecoderLayer registers them: the norm after the
        # attention and the MLP (a for-loop optimizer's order)
        self.self_attn = PhiAttention(cfg, layer_idx)
        self.mlp = TwoLinearMLP(h, cfg["intermediate_size"], cfg.get("hidden_act", "gelu_new"), ("fc1", "fc2"))
        self.input_layernorm = nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-5))
        self.resid_pdrop = cfg.get("resid_pdrop", 0.0)

    def forward(self, ac, hidden_states, attention_mask, cos, sin, past_key_value=None):
        residual = hidden_states
        hidden_states = layer_norm(ac, self.input_layernorm, hidden_states)
        attn_outputs, self_attn_weights = self.self_attn(ac, hidden_states, attention_mask, (cos, sin), past_key_value)
        attn_outputs = dropout(attn_outputs, self.resid_pdrop, self.training)
        feed_forward_hidden_states = dropout(self.mlp(ac, hidden_states), self.resid_pdrop, self.training)
        return add(add(attn_outputs, feed_forward_hidden_states), residual)


class ParallelDecoder(nn.Module):
    """GPTNeoXModel (embed_in, emb_dropout, final_layer_norm, embed_out) and
    PhiModel (embed_tokens, embed_dropout, final_layernorm, lm_head with a
    bias): LLaMA's mask and partial rotary tables."""

    def __init__(self, cfg):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.cfg = cfg
        neox = cfg["model_type"] == "gpt_neox"
        layer = GPTNeoXLayer if neox else PhiDecoderLayer
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([layer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.final_norm = nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-5))
        factor = cfg.get("rotary_pct", 0.25) if neox else cfg.get("partial_rotary_factor", 0.5)
        theta = cfg.get("rotary_emb_base", 10000.0) if neox else cfg.get("rope_theta", 10000.0)
        self.rotary_emb = LlamaRotaryEmbedding(dict(cfg, head_dim=h // heads, partial_rotary_factor=factor,
                                                    rope_theta=theta))
        self.embed_dropout = cfg.get("hidden_dropout", 0.0) if neox else cfg.get("embd_pdrop", 0.0)
        self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=not neox)

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
        hidden_states = dropout(inputs_embeds, self.embed_dropout, self.training)
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # the call passes the mask, position_ids, cache_position and the tables' tuple
                hidden_states = checkpoint(
                    lambda x, m, p, cp, pe, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m, pe[0], pe[1])),
                    hidden_states, causal_mask, position_ids, cache_position, (cos, sin))
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, cos, sin, past_key_values)
        return layer_norm(ac, self.final_norm, hidden_states)

    def head_weight(self):
        return self.lm_head.weight

    def head_bias(self):
        return self.lm_head.bias
