"""Differential attention (Ye et al. 2024, "Differential Transformer",
arXiv 2410.05258) as its authors' MultiheadFlashDiff2 computes it
(microsoft/unilm Diff-Transformer/multihead_flashdiff_2.py), written plainly
in PyTorch for the CPU: each flash_attn_func(q, k, v, causal=True) runs as
transformers' eager attention does (LLaMA's eager_attention_forward, with
the model's causal mask), the rotary embedding as LLaMA's
apply_rotary_pos_emb on the model's tables (the reference's fused Triton
rotary is not what the CPU can run), and the fallback RMSNorm of
Diff-Transformer/diff/rms_norm.py. The LLaMA-like decoder (llama.py) takes
it in place of LlamaAttention for model_type diff_transformer; vramplan's
Lua block is models/blocks/diff_transformer.lua."""
import math

import torch
import torch.nn as nn

from .common import Mean2x, mul
from .linear import linear
from .llama_blocks import LlamaAttention, rotate_half


def lambda_init_fn(depth):
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


class RMSNorm(nn.Module):
    """rms_norm.py's RMSNorm (elementwise_affine): its mean keeping what
    PyTorch 2.x keeps (Mean2x), the weight product as CUDA computes it."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(Mean2x.apply(x.pow(2)) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        output = mul(output, self.weight)
        return output


def apply_rotary_emb(x, cos, sin):
    # x: [b, s, heads, d]; the tables [b, s, d]
    cos = cos.unsqueeze(2)
    sin = sin.unsqueeze(2)
    return mul(x, cos) + mul(rotate_half(x), sin)


class DiffAttention(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        embed_dim = cfg["hidden_size"]
        # num_heads: half of a Transformer's; num_kv_heads likewise
        self.num_heads = cfg["num_attention_heads"]
        self.num_kv_heads = cfg.get("num_key_value_heads") or self.num_heads
        self.n_rep = self.num_heads // self.num_kv_heads
        self.head_dim = embed_dim // self.num_heads // 2
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim // self.n_rep, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim // self.n_rep, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.lambda_init = lambda_init_fn(layer_idx)
        self.lambda_q1 = nn.Parameter(torch.zeros(self.head_dim, dtype=torch.float32).normal_(mean=0, std=0.1))
        self.lambda_k1 = nn.Parameter(torch.zeros(self.head_dim, dtype=torch.float32).normal_(mean=0, std=0.1))
        self.lambda_q2 = nn.Parameter(torch.zeros(self.head_dim, dtype=torch.float32).normal_(mean=0, std=0.1))
        self.lambda_k2 = nn.Parameter(torch.zeros(self.head_dim, dtype=torch.float32).normal_(mean=0, std=0.1))
        self.subln = RMSNorm(2 * self.head_dim, eps=1e-5)
        # what LlamaAttention.eager reads (flash_attn_func's default scale)
        self.num_key_value_groups = self.n_rep
        self.scaling = self.head_dim ** -0.5
        self.softcap = None
        self.attention_dropout = 0.0

    def flash_attn_func(self, ac, q, k, v, attention_mask):
        # [b, s, heads, d] in and out, as flash_attn's; eager inside
        out, _ = LlamaAttention.eager(self, ac, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attention_mask)
        return out

    def forward(self, ac, x, position_embeddings, attention_mask, past_key_value=None):
        bsz, tgt_len, embed_dim = x.size()
        src_len = tgt_len

        q = linear(ac, x, self.q_proj.weight)
        k = linear(ac, x, self.k_proj.weight)
        v = linear(ac, x, self.v_proj.weight)

        q = q.view(bsz, tgt_len, 2 * self.num_heads, self.head_dim)
        k = k.view(bsz, src_len, 2 * self.num_kv_heads, self.head_dim)
        v = v.view(bsz, src_len, self.num_kv_heads, 2, self.head_dim)

        cos, sin = position_embeddings
        q = apply_rotary_emb(q, cos, sin)
        k = apply_rotary_emb(k, cos, sin)

        q = q.reshape(bsz, tgt_len, self.num_heads, 2, self.head_dim)
        k = k.reshape(bsz, src_len, self.num_kv_heads, 2, self.head_dim)
        q1, q2 = q[:, :, :, 0], q[:, :, :, 1]
        k1, k2 = k[:, :, :, 0], k[:, :, :, 1]
        v1, v2 = v[:, :, :, 0], v[:, :, :, 1]

        attn11 = self.flash_attn_func(ac, q1, k1, v1, attention_mask)
        attn12 = self.flash_attn_func(ac, q1, k1, v2, attention_mask)
        attn1 = torch.cat([attn11, attn12], dim=-1)

        attn21 = self.flash_attn_func(ac, q2, k2, v1, attention_mask)
        attn22 = self.flash_attn_func(ac, q2, k2, v2, attention_mask)
        attn2 = torch.cat([attn21, attn22], dim=-1)

        lambda_1 = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dim=-1).float()).type_as(q)
        lambda_2 = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dim=-1).float()).type_as(q)
        lambda_full = lambda_1 - lambda_2 + self.lambda_init
        attn = attn1 - lambda_full * attn2

        attn = self.subln(attn)
        attn = attn * (1 - self.lambda_init)
        attn = attn.reshape(bsz, tgt_len, self.num_heads * 2 * self.head_dim)

        attn = linear(ac, attn, self.out_proj.weight)
        return attn, None
