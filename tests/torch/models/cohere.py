"""CohereForCausalLM (Command R, Aya 23) as transformers computes it with eager
attention (models/cohere/modeling_cohere.py, huggingface/transformers
commit 015bfeb, the 4.5x line): LLaMA's model body, mask, eager attention
and SwiGLU MLP, but CohereLayerNorm (a bias-free LayerNorm written out in
fp32), the rotary tables made with repeat_interleave and applied to
interleaved pairs in fp32 (cast back after), optional q/k norms over each
head (use_qk_norm, a [heads, head_dim] weight, after all three
projections), attention and MLP side by side on one input_layernorm added
to the residual one by one, and the logits multiplied by logit_scale.

Cohere2ForCausalLM (Command R7B; models/cohere2/modeling_cohere2.py at the
same commit), model_type cohere2: layer i slides unless (i + 1) is a
multiple of sliding_window_pattern; a sliding layer narrows the model's
mask itself (ones_like, tril, where, then a slice by python ints) and
rotates q and k, a global one applies no rotary at all; Gemma 2's model
mask (the input's length), no cache in training, no q/k norms.
"""
import torch
import torch.nn as nn

from .common import Mean2x, add, mul
from .linear import linear
from .llama import Llama, outside_window
from .llama_blocks import LlamaAttention, LlamaMLP, LlamaRotaryEmbedding


class CohereLayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = Mean2x.apply(hidden_states)
        variance = Mean2x.apply((hidden_states - mean).pow(2))
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


class CohereRotaryEmbedding(LlamaRotaryEmbedding):
    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        # torch.repeat_interleave(freqs, 2, dim=-1) as PyTorch 2.x computes an int repeat
        # (unsqueeze, expand, a contiguous clone, flatten): 1.13 goes through index tensors
        emb = freqs.unsqueeze(-1).expand(*freqs.shape, 2).clone(memory_format=torch.contiguous_format).flatten(-2)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    dtype = q.dtype
    q = q.float()
    k = k.float()
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    # fp32 q and k times tables in the embeddings' dtype: CUDA's multiply (MixedMul)
    q_embed = mul(q, cos) + mul(rotate_half(q), sin)
    k_embed = mul(k, cos) + mul(rotate_half(k), sin)
    return q_embed.to(dtype=dtype), k_embed.to(dtype=dtype)


class CohereAttention(LlamaAttention):
    def __init__(self, cfg, layer_idx=0):
        super().__init__(cfg, layer_idx)
        # Cohere2Attention: apply_rotary_pos_emb only where sliding_window is set
        self.rotates = cfg["model_type"] != "cohere2" or bool((layer_idx + 1) % sliding_pattern(cfg))
        self.use_qk_norm = cfg.get("use_qk_norm", False)
        if self.use_qk_norm:
            eps = cfg.get("layer_norm_eps", 1e-5)
            self.q_norm = CohereLayerNorm((self.num_heads, self.head_dim), eps)
            self.k_norm = CohereLayerNorm((self.num_kv, self.head_dim), eps)

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape)
        if self.use_qk_norm:
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)
        cos, sin = position_embeddings
        if self.rotates:
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


def sliding_pattern(cfg):
    return cfg.get("sliding_window_pattern", 4)  # Cohere2Config's default


class CohereDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        self.self_attn = CohereAttention(cfg, layer_idx)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = CohereLayerNorm(cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-5))
        self.is_sliding = cfg["model_type"] == "cohere2" and bool((layer_idx + 1) % sliding_pattern(cfg))
        self.sliding_window = cfg.get("sliding_window", 4096)

    def forward(self, ac, hidden_states, attention_mask, position_ids, cos, sin, past_key_value=None,
                cache_position=None):
        if self.is_sliding and attention_mask is not None:
            # Cohere2DecoderLayer: last_cache_position is 0 without a 2-D
            # attention mask (Cohere2Model.forward), so the slice starts at 0
            effective_seq_len = max(cache_position.shape[0], self.sliding_window)
            sliding_window_mask, attention_mask = outside_window(attention_mask, self.sliding_window,
                                                                 hidden_states.dtype)
            offset = max(0, 0 - effective_seq_len)
            attention_mask = attention_mask[:, :, :, offset: offset + effective_seq_len]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states_attention, self_attn_weights = self.self_attn(ac, hidden_states, (cos, sin), attention_mask,
                                                                    past_key_value)
        hidden_states_mlp = self.mlp(ac, hidden_states)
        # residual + hidden_states_attention + hidden_states_mlp: under autocast 16-bit
        # branches onto the fp32 stream (MixedAdd)
        hidden_states = add(add(residual, hidden_states_attention), hidden_states_mlp)
        return hidden_states


class Cohere(Llama):
    """CohereModel (LlamaModel's body) and CohereForCausalLM's head, tied by default."""

    def __init__(self, cfg):
        nn.Module.__init__(self)
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([CohereDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = CohereLayerNorm(h, cfg.get("layer_norm_eps", 1e-5))
        self.rotary_emb = CohereRotaryEmbedding(cfg)
        self.rotary_emb_local = None
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)
