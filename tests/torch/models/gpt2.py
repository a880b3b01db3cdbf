"""GPT2LMHeadModel's body as transformers 4.46-4.52 computes it, with its
Conv1D projections."""
import torch
import torch.nn as nn

from .common import activation, add, chunks, dropout, in_turn, layer_norm
from .linear import linear, lora


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: addmm with an (in, out) weight."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, ac, x):
        if id(self.weight) in ac.quant:  # a bitsandbytes Linear4bit or Linear8bitLt now
            return linear(ac, x, self.weight, self.bias)
        size_out = x.size()[:-1] + (self.nf,)
        out = torch.addmm(ac.down(self.bias), ac.down(x).view(-1, x.size(-1)), ac.down(self.weight))
        out = out.view(size_out)
        return lora(ac, x, self.weight, out, self.bias, fan_in_fan_out=True)


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, n = cfg["n_embd"], cfg["n_positions"]
        self.num_heads = cfg["n_head"]
        self.head_dim = h // self.num_heads
        self.split_size = h
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.c_attn = Conv1D(3 * h, h)
        self.c_proj = Conv1D(h, h)
        self.attn_pdrop = cfg.get("attn_pdrop", 0.1)
        self.resid_pdrop = cfg.get("resid_pdrop", 0.1)

    def eager(self, ac, query, key, value):
        # modeling_gpt2.eager_attention_forward
        attn_weights = torch.matmul(ac.down(query), ac.down(key).transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(ac.up(attn_weights), dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = dropout(attn_weights, self.attn_pdrop, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value))
        attn_output = attn_output.transpose(1, 2)
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, presents=None):
        query_states, key_states, value_states = self.c_attn(ac, hidden_states).split(self.split_size, dim=2)
        shape_q = (*query_states.shape[:-1], -1, self.head_dim)
        shape_kv = (*key_states.shape[:-1], -1, self.head_dim)
        query_states = query_states.view(shape_q).transpose(1, 2)
        key_states = key_states.view(shape_kv).transpose(1, 2)
        value_states = value_states.view(shape_kv).transpose(1, 2)
        if presents is not None:  # use_cache: present = (key_states, value_states), views of c_attn's output
            presents.append((key_states, value_states))
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states)
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        attn_output = self.c_proj(ac, attn_output)
        attn_output = dropout(attn_output, self.resid_pdrop, self.training)
        return attn_output, attn_weights


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        inner = cfg.get("n_inner") or 4 * h
        self.c_fc = Conv1D(inner, h)
        self.c_proj = Conv1D(h, inner)
        self.act = cfg.get("activation_function", "gelu_new")
        self.resid_pdrop = cfg.get("resid_pdrop", 0.1)

    def forward(self, ac, hidden_states):
        hidden_states = self.c_fc(ac, hidden_states)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = self.c_proj(ac, hidden_states)
        hidden_states = dropout(hidden_states, self.resid_pdrop, self.training)
        return hidden_states


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.ln_1 = nn.LayerNorm(h, eps=eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(h, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, ac, hidden_states, presents=None):
        residual = hidden_states
        hidden_states = layer_norm(ac, self.ln_1, hidden_states)
        attn_output, _ = self.attn(ac, hidden_states, presents)
        hidden_states = add(attn_output, residual)  # under autocast: CUDA's add of a 16-bit output to fp32
        residual = hidden_states
        hidden_states = layer_norm(ac, self.ln_2, hidden_states)
        feed_forward_hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, feed_forward_hidden_states)
        return hidden_states


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], h)
        self.wpe = nn.Embedding(cfg["n_positions"], h)
        self.embd_pdrop = cfg.get("embd_pdrop", 0.1)
        self.h = nn.ModuleList([GPT2Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def embed(self, input_ids):
        return self.wte(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        """past_key_values: a list that collects the presents (use_cache)."""
        if past_key_values is not None and not isinstance(past_key_values, list):
            raise NotImplementedError("prefix tuning is mirrored on LLaMA only")
        length = input_ids.shape[1] if inputs_embeds is None else inputs_embeds.shape[1]
        cache_position = torch.arange(0, length)
        position_ids = cache_position.unsqueeze(0)
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = dropout(hidden_states, self.embd_pdrop, self.training)
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:
                hidden_states = checkpoint(lambda x, c=chunk: in_turn(c, x, lambda b, y: b(ac, y)), hidden_states)
            else:
                hidden_states = chunk[0](ac, hidden_states, past_key_values)
        hidden_states = layer_norm(ac, self.ln_f, hidden_states)
        return hidden_states

    def head_weight(self):
        return self.wte.weight if self.tied else self.lm_head.weight
