"""LLaMA's modules, which the LLaMA-like decoder (llama.py) assembles per
family and GPT-NeoX, Phi, StarCoder2 and DeepSeek reuse: the RMSNorms
(LLaMA's, Gemma's, OLMo 2's), the rotary tables and their application,
the attention (with Qwen 3's, Gemma's and OLMo 2's norms, Phi-3's fused
projection, Gemma 2's soft cap) and the gated MLP.
"""
import torch
import torch.nn as nn

from .common import Mean2x, activation, add, dropout, mul
from . import liger
from .liger import LigerRMSNorm, LigerSiLUMulFunction
from .linear import linear


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = Mean2x.apply(hidden_states.pow(2))
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class ScaledEmbedding(nn.Embedding):
    """Gemma3TextScaledWordEmbedding: the module scales its own rows, so its
    output (what a forward hook sees: PEFT's enable_input_require_grads) is
    the scaled one, and the unscaled lookup a temporary."""

    def __init__(self, num_embeddings, dim):
        super().__init__(num_embeddings, dim)
        self.register_buffer("embed_scale", torch.tensor(dim ** 0.5), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(Mean2x.apply(x.pow(2)) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class Olmo2RMSNorm(LlamaRMSNorm):
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = Mean2x.apply(hidden_states.pow(2))
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


def rms_norm(cfg, dim, final=False):
    eps = cfg.get("rms_norm_eps", 1e-6)
    if liger.patches(cfg, "liger_rms_norm"):
        # OLMo-2's final norm under Liger's patch of the built model: a LigerRMSNorm, in place
        instance_final = final and cfg["model_type"] == "olmo2" and not cfg.get("liger_before_load", True)
        return LigerRMSNorm(dim, eps, in_place=cfg["model_type"] not in liger.OUT_OF_PLACE or instance_final,
                            zeros=cfg["model_type"].startswith("gemma"))
    kind = {"gemma": GemmaRMSNorm, "gemma2": GemmaRMSNorm, "gemma3_text": GemmaRMSNorm,
            "olmo2": Olmo2RMSNorm}.get(cfg["model_type"], LlamaRMSNorm)
    return kind(dim, eps)


class LlamaRotaryEmbedding(nn.Module):
    """LlamaRotaryEmbedding; with `half` GptOssRotaryEmbedding (emb = freqs,
    no cat: [b, s, d / 2] tables)."""

    def __init__(self, cfg, half=False):
        super().__init__()
        self.half = half
        dim = cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        dim = int(dim * cfg.get("partial_rotary_factor", 1.0))  # Phi3RotaryEmbedding
        base = cfg.get("rope_theta", 10000.0)
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = freqs if self.half else torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    # under autocast 16-bit q and k times the fp32 tables: CUDA's multiply (MixedMul)
    q_embed = mul(q, cos) + mul(rotate_half(q), sin)
    k_embed = mul(k, cos) + mul(rotate_half(k), sin)
    return q_embed, k_embed


def apply_rotary_pos_emb_phi3(q, k, cos, sin, unsqueeze_dim=1):
    # Phi-3's (transformers 4.49+): the rotated part joined to the rest
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([mul(q_rot, cos) + mul(rotate_half(q_rot), sin), q_pass], dim=-1)
    k_embed = torch.cat([mul(k_rot, cos) + mul(rotate_half(k_rot), sin), k_pass], dim=-1)
    return q_embed, k_embed


def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):
    # the rotary halves interleaved in the weights: regrouped first (copies)
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        self.layer_idx = layer_idx
        h = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.num_kv = cfg.get("num_key_value_heads") or self.num_heads
        self.head_dim = cfg.get("head_dim") or h // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_kv
        self.scaling = self.head_dim ** -0.5
        self.softcap = None
        if cfg["model_type"] == "gemma2":  # Gemma2Attention
            self.scaling = cfg.get("query_pre_attn_scalar", self.head_dim) ** -0.5
            self.softcap = cfg.get("attn_logit_softcapping", 50.0)
        if cfg["model_type"] == "gemma3_text":  # Gemma3Attention: no soft cap by default
            self.scaling = cfg.get("query_pre_attn_scalar", self.head_dim) ** -0.5
            self.softcap = cfg.get("attn_logit_softcapping")
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.attn_impl = cfg.get("_attn_implementation", "eager")
        # transformers' release for the sdpa path (the GPU check's recipe's
        # transformers_version): 4.49-4.52's unless it names 4.56 or later
        release = tuple(int(p) for p in str(cfg.get("_transformers_version", "4.52")).split(".")[:2])
        self.sdpa_since_4_56 = release >= (4, 56) or release == (5,)
        bias = cfg.get("attention_bias", False)
        qkv_bias = bias or cfg["model_type"] == "qwen2_moe"  # Qwen2Attention: biases on q, k, v only
        self.fused = cfg["model_type"] == "phi3"  # Phi3Attention: one qkv_proj
        if self.fused:
            op_size = (self.num_heads + 2 * self.num_kv) * self.head_dim
            self.qkv_proj = nn.Linear(h, op_size, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=qkv_bias)
            self.k_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=qkv_bias)
            self.v_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=bias)
        # the norms registered after the projections, as transformers does (the
        # parameters' order, which a for-loop optimizer's temporaries follow)
        eps = cfg.get("rms_norm_eps", 1e-6)
        qk_norm = cfg["model_type"] in ("qwen3", "qwen3_moe")  # Qwen3Attention: q_norm, k_norm over head_dim
        self.q_norm = LlamaRMSNorm(self.head_dim, eps) if qk_norm else None
        self.k_norm = LlamaRMSNorm(self.head_dim, eps) if qk_norm else None
        # Gemma3Attention: Gemma3RMSNorm over each head, after the transpose
        self.gemma3 = cfg["model_type"] == "gemma3_text"
        if self.gemma3:
            self.q_norm = GemmaRMSNorm(self.head_dim, eps)
            self.k_norm = GemmaRMSNorm(self.head_dim, eps)
        # Olmo2Attention: q_norm and k_norm over the whole projections, before the view
        self.olmo2 = cfg["model_type"] == "olmo2"
        if self.olmo2:
            self.q_norm = Olmo2RMSNorm(self.num_heads * self.head_dim, eps)
            self.k_norm = Olmo2RMSNorm(self.num_kv * self.head_dim, eps)
        if self.q_norm is not None and liger.patches_qk_norms(cfg):  # Liger's class in their place
            in_place = cfg["model_type"] not in liger.OUT_OF_PLACE
            self.q_norm = LigerRMSNorm(self.q_norm.weight.numel(), eps, in_place=in_place, zeros=self.gemma3)
            self.k_norm = LigerRMSNorm(self.k_norm.weight.numel(), eps, in_place=in_place, zeros=self.gemma3)

    def eager(self, ac, query, key, value, attention_mask):
        # modeling_llama.eager_attention_forward
        key_states = repeat_kv(key, self.num_key_value_groups)
        value_states = repeat_kv(value, self.num_key_value_groups)
        attn_weights = torch.matmul(ac.down(query), ac.down(key_states).transpose(2, 3)) * self.scaling
        if self.softcap is not None:  # modeling_gemma2.eager_attention_forward
            attn_weights = attn_weights / self.softcap
            attn_weights = torch.tanh(attn_weights)
            attn_weights = attn_weights * self.softcap
        if attention_mask is not None:
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
            attn_weights = add(attn_weights, causal_mask)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = dropout(attn_weights, self.attention_dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    def sdpa(self, query, key, value, attention_mask):
        # integrations/sdpa_attention.py sdpa_attention_forward (4.49-4.52);
        # only the GPU check runs it (real autocast, CUDA's kernels)
        if self.sdpa_since_4_56:
            return self.sdpa_4_56(query, key, value, attention_mask)
        key = repeat_kv(key, self.num_key_value_groups)
        value = repeat_kv(value, self.num_key_value_groups)
        causal_mask = attention_mask
        if attention_mask is not None:
            causal_mask = causal_mask[:, :, :, : key.shape[-2]]
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        is_causal = query.shape[2] > 1 and causal_mask is None
        attn_output = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_mask, dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling, is_causal=is_causal)
        return attn_output.transpose(1, 2).contiguous(), None

    def sdpa_4_56(self, query, key, value, attention_mask):
        # sdpa_attention_forward from 4.56: no .contiguous() of q, k and v
        # (huggingface/transformers#40315), and 4.54's use_gqa_in_sdpa
        # (#39412): without a mask the key and value heads go to SDPA as they
        # are, with enable_gqa (PyTorch 2.5+)
        gqa = attention_mask is None and self.num_key_value_groups > 1
        if not gqa:
            key = repeat_kv(key, self.num_key_value_groups)
            value = repeat_kv(value, self.num_key_value_groups)
        causal_mask = attention_mask
        if attention_mask is not None:
            causal_mask = causal_mask[:, :, :, : key.shape[-2]]
        is_causal = query.shape[2] > 1 and causal_mask is None
        extra = {"enable_gqa": True} if gqa else {}
        attn_output = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_mask, dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling, is_causal=is_causal, **extra)
        return attn_output.transpose(1, 2).contiguous(), None

    def attend(self, ac, query, key, value, attention_mask):
        if self.attn_impl == "sdpa":
            return self.sdpa(query, key, value, attention_mask)
        return self.eager(ac, query, key, value, attention_mask)

    def forward_phi3(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        # Phi3Attention.forward (transformers 4.49-4.52)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        qkv = linear(ac, hidden_states, self.qkv_proj.weight)
        query_pos = self.num_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: query_pos + self.num_kv * self.head_dim]
        value_states = qkv[..., query_pos + self.num_kv * self.head_dim:]
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_phi3(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        if self.fused:
            return self.forward_phi3(ac, hidden_states, position_embeddings, attention_mask, past_key_value)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.olmo2:
            query_states = self.q_norm(linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias)).view(hidden_shape)
            key_states = self.k_norm(linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias)).view(hidden_shape)
        elif self.q_norm is not None and not self.gemma3:  # Qwen3Attention: each norm right after its projection
            query_states = self.q_norm(linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape))
            key_states = self.k_norm(linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape))
        else:
            query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape)
            key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        if self.gemma3:  # Gemma3Attention: the norms after all three projections
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        bias = cfg.get("mlp_bias", False)
        self.fused = cfg["model_type"] == "phi3"  # Phi3MLP: one gate_up_proj
        if self.fused:
            self.gate_up_proj = nn.Linear(h, 2 * f, bias=False)
        else:
            self.gate_proj = nn.Linear(h, f, bias=bias)
            self.up_proj = nn.Linear(h, f, bias=bias)
        self.down_proj = nn.Linear(f, h, bias=bias)
        self.act = cfg.get("hidden_act", "silu")
        self.liger = liger.patches(cfg, "liger_swiglu")
        # a Lua block's own names for gate_proj, up_proj, down_proj (compare.py's own_names)
        self.names = ("gate_proj", "up_proj", "down_proj")
        if cfg.get("mlp_names"):
            for old, new in zip(self.names, cfg["mlp_names"]):
                self._modules[new] = self._modules.pop(old)
            self.names = tuple(cfg["mlp_names"])

    def forward(self, ac, x):
        if self.liger:
            return self.liger_forward(ac, x)
        if self.fused:
            # Phi3MLP.forward
            up_states = linear(ac, x, self.gate_up_proj.weight)
            gate, up_states = up_states.chunk(2, dim=-1)
            up_states = up_states * activation(ac, self.act, gate)
            return linear(ac, up_states, self.down_proj.weight, self.down_proj.bias)
        # down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        gate_proj, up_proj, down_proj = (getattr(self, name) for name in self.names)
        return linear(ac, activation(ac, self.act, linear(ac, x, gate_proj.weight, gate_proj.bias))
                      * linear(ac, x, up_proj.weight, up_proj.bias),
                      down_proj.weight, down_proj.bias)

    def liger_forward(self, ac, x):
        if self.fused:
            # LigerPhi3SwiGLUMLP.forward: the views are locals until it returns
            up_states = linear(ac, x, self.gate_up_proj.weight)
            gate, up_states = up_states.chunk(2, dim=-1)
            return linear(ac, LigerSiLUMulFunction.apply(gate, up_states), self.down_proj.weight, self.down_proj.bias)
        # LigerSwiGLUMLP.forward
        gate_proj, up_proj, down_proj = (getattr(self, name) for name in self.names)
        return linear(ac, LigerSiLUMulFunction.apply(linear(ac, x, gate_proj.weight, gate_proj.bias),
                                                     linear(ac, x, up_proj.weight, up_proj.bias)),
                      down_proj.weight, down_proj.bias)
