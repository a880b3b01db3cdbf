"""T5ForConditionalGeneration (T5 and mT5) as transformers 4.46-4.52
computes it: the encoder, the decoder with its caches, the tied head."""
import math

import torch
import torch.nn as nn

from .common import DynamicCache, Mean2x, activation, add, causal_mask_with_cache_position, chunks, dropout, mul
from .linear import linear


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        # pow and rsqrt are on autocast's fp32 list; their inputs are fp32 here
        variance = Mean2x.apply(hidden_states.to(torch.float32).pow(2))
        # a 16-bit model's rows times the fp32 rsqrt: CUDA's mixed-dtype mul
        hidden_states = mul(hidden_states, torch.rsqrt(variance + self.variance_epsilon))
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    """T5DenseActDense, or T5DenseGatedActDense when gated."""

    def __init__(self, cfg):
        super().__init__()
        d_model, d_ff = cfg["d_model"], cfg["d_ff"]
        proj = cfg.get("feed_forward_proj", "relu")
        self.gated = proj.startswith("gated-")
        self.act = "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1]
        if self.gated:
            self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
            self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        else:
            self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states):
        if self.gated:
            hidden_gelu = activation(ac, self.act, linear(ac, hidden_states, self.wi_0.weight))
            hidden_linear = linear(ac, hidden_states, self.wi_1.weight)
            hidden_states = mul(hidden_gelu, hidden_linear)
        else:
            hidden_states = linear(ac, hidden_states, self.wi.weight)
            hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = dropout(hidden_states, self.p, self.training)
        if hidden_states.dtype != self.wo.weight.dtype:
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        hidden_states = linear(ac, hidden_states, self.wo.weight)
        return hidden_states


class T5Attention(nn.Module):
    def __init__(self, cfg, has_relative_attention_bias=False, is_decoder=False, layer_idx=0):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = cfg.get("relative_attention_num_buckets", 32)
        self.relative_attention_max_distance = cfg.get("relative_attention_max_distance", 128)
        self.n_heads = cfg["num_heads"]
        self.key_value_proj_dim = cfg.get("d_kv", 64)
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.dropout = cfg.get("dropout_rate", 0.1)
        self.layer_idx = layer_idx
        self.gradient_checkpointing = False
        d_model = cfg["d_model"]
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, cache_position=None):
        if cache_position is None:
            context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        else:
            context_position = cache_position[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder), num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        values = values.permute([2, 0, 1]).unsqueeze(0)
        return values

    def forward(self, ac, hidden_states, mask=None, key_value_states=None, position_bias=None, cache=None,
                query_length=None, cache_position=None):
        batch_size, seq_length = hidden_states.shape[:2]
        is_cross_attention = key_value_states is not None
        query_states = linear(ac, hidden_states, self.q.weight)
        query_states = query_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        current_states = key_value_states if is_cross_attention else hidden_states
        key_states = linear(ac, current_states, self.k.weight)
        value_states = linear(ac, current_states, self.v.weight)
        key_states = key_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        value_states = value_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        if cache is not None:  # EncoderDecoderCache: the self- or the cross-attention cache
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
        scores = torch.matmul(ac.down(query_states), ac.down(key_states).transpose(3, 2))
        if position_bias is None:
            key_length = key_states.shape[-2]
            real_seq_length = query_length if query_length is not None else cache_position[-1] + 1
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_length), dtype=scores.dtype)
                if self.gradient_checkpointing and self.training:
                    position_bias.requires_grad = True
            else:
                position_bias = self.compute_bias(real_seq_length, key_length, cache_position=cache_position)
                position_bias = position_bias[:, :, -seq_length:, :]
            if mask is not None:
                causal_mask = mask[:, :, :, : key_states.shape[-2]]
                position_bias = position_bias + causal_mask
        position_bias_masked = position_bias
        scores += position_bias_masked
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = dropout(attn_weights, self.dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.view(batch_size, -1, self.inner_dim)
        attn_output = linear(ac, attn_output, self.o.weight)
        return attn_output, position_bias


class T5LayerAttention(nn.Module):
    """T5LayerSelfAttention and T5LayerCrossAttention: x + dropout(attention(norm(x)))."""

    def __init__(self, cfg, has_relative_attention_bias, is_decoder, layer_idx):
        super().__init__()
        self.attention = T5Attention(cfg, has_relative_attention_bias, is_decoder, layer_idx)
        self.layer_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states, mask, position_bias, key_value_states=None, cache=None, query_length=None,
                cache_position=None):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.attention(ac, normed_hidden_states, mask, key_value_states, position_bias, cache,
                                          query_length, cache_position)
        hidden_states = add(hidden_states, dropout(attention_output[0], self.p, self.training))
        return hidden_states, attention_output[1]


class T5Block(nn.Module):
    def __init__(self, cfg, has_relative_attention_bias, is_decoder, layer_idx):
        super().__init__()
        self.is_decoder = is_decoder
        self.self_attention = T5LayerAttention(cfg, has_relative_attention_bias, is_decoder, layer_idx)
        if is_decoder:
            self.cross_attention = T5LayerAttention(cfg, False, is_decoder, layer_idx)
        self.ff_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.DenseReluDense = T5DenseActDense(cfg)
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states, attention_mask, position_bias, encoder_hidden_states,
                encoder_attention_mask, encoder_decoder_position_bias, cache, cache_position):
        hidden_states, position_bias = self.self_attention(
            ac, hidden_states, attention_mask, position_bias, cache=cache and cache[0], cache_position=cache_position)
        if self.is_decoder:
            hidden_states, encoder_decoder_position_bias = self.cross_attention(
                ac, hidden_states, encoder_attention_mask, encoder_decoder_position_bias,
                key_value_states=encoder_hidden_states, cache=cache and cache[1], query_length=cache_position[-1] + 1)
        # T5LayerFF
        forwarded_states = self.ff_norm(hidden_states)
        forwarded_states = self.DenseReluDense(ac, forwarded_states)
        hidden_states = add(hidden_states, dropout(forwarded_states, self.p, self.training))
        # (hidden_states, position_bias) and, in the decoder, the cross-attention's
        if self.is_decoder:
            return hidden_states, position_bias, encoder_decoder_position_bias
        return hidden_states, position_bias


class T5Stack(nn.Module):
    def __init__(self, cfg, embed_tokens, is_decoder):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.is_decoder = is_decoder
        layers = (cfg.get("num_decoder_layers") or cfg["num_layers"]) if is_decoder else cfg["num_layers"]
        self.block = nn.ModuleList([T5Block(cfg, i == 0, is_decoder, i) for i in range(layers)])
        self.final_layer_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.p = cfg.get("dropout_rate", 0.1)

    causal_mask = staticmethod(causal_mask_with_cache_position)

    def run_blocks(self, ac, chunk, h, m, pb, e, em, epb, cp):
        """A checkpointed call's blocks (one, as HF's, or K under every-K):
        each block's outputs feed the next as T5Stack's loop passes them; the
        call returns the last block's."""
        for layer in chunk:
            outputs = layer(ac, h, m, pb, e, em, epb, None, cp)
            h, pb = outputs[0], outputs[1]
            if self.is_decoder:
                epb = outputs[2]
        return outputs

    def forward(self, ac, input_ids, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                cache=None, checkpoint=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = inputs_embeds.shape[:2]
        past_length = cache[0].get_seq_length() if cache is not None else 0
        cache_position = torch.arange(past_length, past_length + seq_length)
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, past_length + seq_length)
        if self.is_decoder:
            causal_mask = self.causal_mask(attention_mask, seq_length, attention_mask.shape[-1], inputs_embeds.dtype,
                                           cache_position, batch_size)
        else:
            causal_mask = attention_mask[:, None, None, :]
            causal_mask = causal_mask.to(dtype=inputs_embeds.dtype)
            causal_mask = (1.0 - causal_mask) * torch.finfo(inputs_embeds.dtype).min
        encoder_extended_attention_mask = None
        if self.is_decoder:  # invert_attention_mask, in the model's dtype
            dtype = self.final_layer_norm.weight.dtype
            encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :].to(dtype=dtype)
            encoder_extended_attention_mask = (1.0 - encoder_extended_attention_mask) * torch.finfo(dtype).min
        position_bias = None
        encoder_decoder_position_bias = None
        hidden_states = dropout(inputs_embeds, self.p, self.training)
        for chunk in chunks(list(self.block), checkpoint):
            if checkpoint:  # T5Stack's call: every tensor argument goes through the checkpoint
                layer_outputs = checkpoint(
                    lambda h, m, pb, e, em, epb, cp, chunk=chunk: self.run_blocks(ac, chunk, h, m, pb, e, em, epb, cp),
                    hidden_states, causal_mask, position_bias, encoder_hidden_states, encoder_extended_attention_mask,
                    encoder_decoder_position_bias, cache_position)
            else:
                layer_cache = None if cache is None else (cache[0], cache[1])
                layer_outputs = chunk[0](
                    ac, hidden_states, causal_mask, position_bias, encoder_hidden_states,
                    encoder_extended_attention_mask, encoder_decoder_position_bias, layer_cache, cache_position)
            hidden_states = layer_outputs[0]
            position_bias = layer_outputs[1]
            if self.is_decoder:
                encoder_decoder_position_bias = layer_outputs[2]
            del layer_outputs
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = dropout(hidden_states, self.p, self.training)
        return hidden_states


class T5ForConditionalGeneration(nn.Module):
    """transformers 4.46-4.52: the shared embedding, the encoder, the labels
    shifted right into the decoder, the head (its input scaled when tied),
    CrossEntropyLoss; returns (loss, outputs) the way Seq2SeqLMOutput keeps
    them (logits, the decoder's caches, the encoder's last hidden state)."""

    def __init__(self, cfg):
        super().__init__()
        self.model_dim = cfg["d_model"]
        self.tied = cfg.get("tie_word_embeddings", True)
        self.shared = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.encoder = T5Stack(cfg, self.shared, False)
        self.decoder = T5Stack(cfg, self.shared, True)
        if not self.tied:
            self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)

    @staticmethod
    def _shift_right(input_ids, decoder_start_token_id=0, pad_token_id=0):
        shifted_input_ids = input_ids.new_zeros(input_ids.shape)
        shifted_input_ids[..., 1:] = input_ids[..., :-1].clone()
        shifted_input_ids[..., 0] = decoder_start_token_id
        shifted_input_ids.masked_fill_(shifted_input_ids == -100, pad_token_id)
        return shifted_input_ids

    def forward(self, ac, input_ids, labels, checkpoint=None, attention_mask=None):
        if checkpoint:  # gradient_checkpointing_enable()
            for module in self.modules():
                if isinstance(module, T5Attention):
                    module.gradient_checkpointing = True
        prompt = getattr(self, "prompt", None)
        inputs_embeds = prompts = None
        if prompt is not None:  # PeftModelForSeq2SeqLM.forward: the encoder's inputs get the first set
            inputs_embeds = self.shared(input_ids)
            prefix_attention_mask = torch.ones(input_ids.shape[0], prompt.num_virtual_tokens)
            attention_mask = torch.cat((prefix_attention_mask, attention_mask), dim=1)
            del prefix_attention_mask
            prompts = prompt.get_prompt(input_ids.shape[0], inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts[:, : prompt.num_virtual_tokens], inputs_embeds), dim=1)
        prefix = getattr(self, "prefix", None)
        cache = None
        if prefix is not None:  # PeftModelForSeq2SeqLM.forward: past_key_values=self.get_prompt(batch_size)
            cache = prefix.get_prompt(input_ids.shape[0], self.shared.weight.dtype)
        hidden_states = self.encoder(ac, input_ids, attention_mask, checkpoint=checkpoint, inputs_embeds=inputs_embeds)
        decoder_input_ids = self._shift_right(labels)
        # config.use_cache: EncoderDecoderCache(DynamicCache(), DynamicCache()); off under checkpointing
        use_cache = getattr(self, "use_cache", True) and not checkpoint
        if cache is None and use_cache:
            cache = (DynamicCache(), DynamicCache())
        # decoder_outputs keeps the decoder's last hidden state until the model returns
        decoder_outputs = sequence_output = self.decoder(ac, decoder_input_ids, None, hidden_states, attention_mask,
                                                         cache, checkpoint)
        if self.tied:
            sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = linear(ac, sequence_output, self.shared.weight if self.tied else self.lm_head.weight)
        log_probs = nn.functional.log_softmax(ac.up(lm_logits.view(-1, lm_logits.size(-1))), dim=-1)
        loss = nn.functional.nll_loss(log_probs, labels.view(-1), ignore_index=-100)
        del log_probs, prompts, inputs_embeds, decoder_outputs
        return loss, (lm_logits, cache, hidden_states)
