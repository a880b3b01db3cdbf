"""GPTJForCausalLM as transformers computes it with eager attention
(models/gptj/modeling_gptj.py, huggingface/transformers commit 00b676f, the
4.5x line): every layer's own fp32 sin/cos table (create_sinusoidal_positions,
a plain attribute, never cast with the model) repeated over the batch and
gathered at the positions; rotate_every_two on the first rotary_dim of each
head of q and k, joined back with torch.cat; q and k made fp32 for the
scores; one ln_1 feeding the attention and the MLP (attn + mlp + residual);
an untied head with a bias whose logits are made fp32.
Its attribute names are transformers' (wte, h, ln_f, q_proj, k_proj, v_proj,
out_proj, fc_in, fc_out: LoRA and modules_to_save match on them);
embed_tokens, layers and norm are aliases for the harness's generic code.
"""
import torch
import torch.nn as nn

from .common import activation, add, aliases, chunks, dropout, in_turn, layer_norm, mul
from .linear import linear
from .llama import Llama


def create_sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_rotary_pos_emb(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    # a 16-bit tensor times the fp32 tables: CUDA's mixed-dtype mul (MixedMul), an fp32 product
    return add(mul(tensor, cos), mul(rotate_every_two(tensor), sin))


class GPTJAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["n_embd"]
        self.layer_idx = layer_idx
        self.num_attention_heads = cfg["n_head"]
        self.head_dim = h // self.num_attention_heads
        self.attn_pdrop = cfg.get("attn_pdrop", 0.0)
        self.resid_pdrop = cfg.get("resid_pdrop", 0.0)
        self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32))
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.q_proj = nn.Linear(h, h, bias=False)
        self.out_proj = nn.Linear(h, h, bias=False)
        self.rotary_dim = cfg.get("rotary_dim")
        # not a buffer: model.to(dtype) leaves it fp32
        self.embed_positions = create_sinusoidal_positions(cfg["n_positions"], self.rotary_dim or h)

    def _attn(self, ac, query, key, value, attention_mask):
        query = query.to(torch.float32)
        key = key.to(torch.float32)
        attn_weights = torch.matmul(ac.down(query), ac.down(key).transpose(-1, -2))
        attn_weights = attn_weights / self.scale_attn
        causal_mask = attention_mask[:, :, :, : key.shape[-2]]
        # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
        attn_weights = add(attn_weights, causal_mask)
        attn_weights = nn.functional.softmax(ac.up(attn_weights), dim=-1)
        attn_weights = attn_weights.to(value.dtype)
        attn_weights = dropout(attn_weights, self.attn_pdrop, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value))
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, attention_mask, position_ids, layer_past=None):
        query = linear(ac, hidden_states, self.q_proj.weight)
        key = linear(ac, hidden_states, self.k_proj.weight)
        value = linear(ac, hidden_states, self.v_proj.weight)
        shape = query.size()[:-1] + (self.num_attention_heads, self.head_dim)
        query = query.view(shape)
        key = key.view(shape)
        value = value.view(shape).permute(0, 2, 1, 3)
        embed_positions = self.embed_positions.repeat(position_ids.shape[0], 1, 1)
        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        if self.rotary_dim is not None:
            k_rot = key[:, :, :, : self.rotary_dim]
            k_pass = key[:, :, :, self.rotary_dim:]
            q_rot = query[:, :, :, : self.rotary_dim]
            q_pass = query[:, :, :, self.rotary_dim:]
            k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
            q_rot = apply_rotary_pos_emb(q_rot, sin, cos)
            key = torch.cat([k_rot, k_pass], dim=-1)
            query = torch.cat([q_rot, q_pass], dim=-1)
        else:
            key = apply_rotary_pos_emb(key, sin, cos)
            query = apply_rotary_pos_emb(query, sin, cos)
        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)
        if layer_past is not None:
            key, value = layer_past.update(key, value, self.layer_idx)
        attn_output, attn_weights = self._attn(ac, query, key, value, attention_mask)
        # _merge_heads
        attn_output = attn_output.permute(0, 2, 1, 3).contiguous()
        attn_output = attn_output.view(attn_output.size()[:-2] + (self.num_attention_heads * self.head_dim,))
        attn_output = linear(ac, attn_output, self.out_proj.weight)
        attn_output = dropout(attn_output, self.resid_pdrop, self.training)
        return attn_output, attn_weights


class GPTJMLP(nn.Module):
    def __init__(self, inner, cfg):
        super().__init__()
        h = cfg["n_embd"]
        self.fc_in = nn.Linear(h, inner)
        self.fc_out = nn.Linear(inner, h)
        self.act = cfg.get("activation_function", "gelu_new")
        self.resid_pdrop = cfg.get("resid_pdrop", 0.0)

    def forward(self, ac, hidden_states):
        hidden_states = linear(ac, hidden_states, self.fc_in.weight, self.fc_in.bias)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = linear(ac, hidden_states, self.fc_out.weight, self.fc_out.bias)
        return dropout(hidden_states, self.resid_pdrop, self.training)


class GPTJBlock(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        inner = cfg.get("n_inner") or 4 * cfg["n_embd"]
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.attn = GPTJAttention(cfg, layer_idx)
        self.mlp = GPTJMLP(inner, cfg)

    def forward(self, ac, hidden_states, attention_mask, position_ids, layer_past=None):
        residual = hidden_states
        hidden_states = layer_norm(ac, self.ln_1, hidden_states)
        attn_outputs, attn_weights = self.attn(ac, hidden_states, attention_mask, position_ids, layer_past)
        feed_forward_hidden_states = self.mlp(ac, hidden_states)
        return add(add(attn_outputs, feed_forward_hidden_states), residual)


class GPTJ(nn.Module):
    """GPTJModel (wte, drop, h, ln_f) and GPTJForCausalLM's lm_head (a bias)."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], h)
        self.h = nn.ModuleList([GPTJBlock(cfg, i) for i in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.lm_head = nn.Linear(h, cfg["vocab_size"])
        self.embd_pdrop = cfg.get("embd_pdrop", 0.0)

    # GPTJModel._update_causal_mask: LlamaModel's
    causal_mask = Llama.causal_mask

    embed_tokens, layers, norm = aliases("wte", "h", "ln_f")

    def embed(self, input_ids):
        return self.wte(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = dropout(inputs_embeds, self.embd_pdrop, self.training)
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:  # GradientCheckpointingLayer's call: hidden_states, the mask, position_ids
                hidden_states = checkpoint(
                    lambda x, m, p, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m, p)),
                    hidden_states, causal_mask, position_ids)
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, position_ids, past_key_values)
        return layer_norm(ac, self.ln_f, hidden_states)

    def head_weight(self):
        return self.lm_head.weight

    def head_bias(self):
        return self.lm_head.bias
