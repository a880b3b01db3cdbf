"""OPTForCausalLM as transformers 4.50-4.52 computes it with eager attention
(do_layer_norm_before, word_embed_proj_dim = hidden_size): the decoder
makes its own all-ones attention mask, a [b, 1, s, s] causal mask merged
with it, and positions counted from it, offset by 2."""
import torch
import torch.nn as nn

from .common import activation, add, causal_mask_with_cache_position, chunks, dropout, in_turn, layer_norm
from .linear import linear


class OPTAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.num_heads = cfg["num_attention_heads"]
        self.head_dim = h // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("enable_bias", True)
        # registered as OPTAttention registers them
        self.k_proj = nn.Linear(h, h, bias=bias)
        self.v_proj = nn.Linear(h, h, bias=bias)
        self.q_proj = nn.Linear(h, h, bias=bias)
        self.out_proj = nn.Linear(h, h, bias=bias)

    def eager(self, ac, query, key, value, attention_mask, scaling):
        # eager_attention_forward (siglip's), called with scaling=1.0
        attn_weights = torch.matmul(ac.down(query), ac.down(key).transpose(-1, -2)) * scaling
        if attention_mask is not None:
            # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
            attn_weights = add(attn_weights, attention_mask)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = dropout(attn_weights, self.dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value))
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, attention_mask, past_key_value=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias) * self.scaling
        query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias)
        key_states = key_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask, 1.0)
        attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
        attn_output = linear(ac, attn_output, self.out_proj.weight, self.out_proj.bias)
        attn_weights = None  # not output_attentions
        return attn_output, attn_weights


class OPTDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, bias = cfg["hidden_size"], cfg.get("enable_bias", True)
        self.self_attn = OPTAttention(cfg, layer_idx)
        self.dropout = cfg.get("dropout", 0.1)
        self.act = cfg.get("activation_function", "relu")
        self.self_attn_layer_norm = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, cfg["ffn_dim"], bias=bias)
        self.fc2 = nn.Linear(cfg["ffn_dim"], h, bias=bias)
        self.final_layer_norm = nn.LayerNorm(h)

    def forward(self, ac, hidden_states, attention_mask, past_key_value=None):
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = layer_norm(ac, self.self_attn_layer_norm, hidden_states)
        hidden_states, self_attn_weights = self.self_attn(ac, hidden_states, attention_mask, past_key_value)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = add(residual, hidden_states)
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        hidden_states = layer_norm(ac, self.final_layer_norm, hidden_states)
        hidden_states = linear(ac, hidden_states, self.fc1.weight, self.fc1.bias)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = linear(ac, hidden_states, self.fc2.weight, self.fc2.bias)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = add(residual, hidden_states).view(hidden_states_shape)
        return hidden_states


class OPT(nn.Module):
    """OPTDecoder: embed_tokens, embed_positions (max_position_embeddings + 2
    rows), final_layer_norm, then the layers; the head tied to embed_tokens."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.offset = 2
        self.embed_positions = nn.Embedding(cfg["max_position_embeddings"] + self.offset, h)
        self.final_layer_norm = nn.LayerNorm(h)
        self.layers = nn.ModuleList([OPTDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def update_causal_mask(self, attention_mask, input_tensor, cache_position):
        # _update_causal_mask for eager attention, then
        # _prepare_4d_causal_attention_mask_with_cache_position with the 2-D mask
        # (its locals in a frame of their own, as in transformers)
        return causal_mask_with_cache_position(attention_mask, input_tensor.shape[1], attention_mask.shape[-1],
                                               input_tensor.dtype, cache_position, input_tensor.shape[0])

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        seq_length = past_seen_tokens + inputs_embeds.shape[1]
        attention_mask = torch.ones(inputs_embeds.shape[0], seq_length)
        causal_mask = self.update_causal_mask(attention_mask, inputs_embeds, cache_position)
        position_ids = torch.cumsum(attention_mask, dim=1)
        position_ids = (position_ids * attention_mask - 1).long()
        position_ids = position_ids[:, past_seen_tokens:]
        # OPTLearnedPositionalEmbedding.forward: super().forward(position_ids + self.offset)
        pos_embeds = self.embed_positions(position_ids + self.offset)
        hidden_states = inputs_embeds + pos_embeds
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # the call passes the mask, position_ids and cache_position
                hidden_states = checkpoint(lambda x, m, p, cp, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m)),
                                           hidden_states, causal_mask, position_ids, cache_position)
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, past_key_values)
        return layer_norm(ac, self.final_layer_norm, hidden_states)

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight
