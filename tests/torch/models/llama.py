"""The LLaMA-like decoder: LlamaDecoderLayer and LlamaModel, with what each
family derived from them changes (Mistral's and Qwen's masks, Gemma 1-3,
Granite's multipliers, OLMo 2's post norms, Phi-3, the mixtures of experts,
DeepSeek's latent attention, the DIFF Transformer's differential attention)."""
import weakref

import torch
import torch.nn as nn

from .common import add, chunks
from .deepseek import (DeepseekMoE, DeepseekV2Attention, DeepseekV2HFAttention, DeepseekV2HFMoE,
                       DeepseekV2HFRotaryEmbedding, DeepseekV2MoE, DeepseekV3Attention, DeepseekV3MoE, remote_code,
                       transformers_v2)
from .diff import DiffAttention
from .indexing import MLP_BLOCKS, IndexingMLP, IndexOpsMLP
from .llama_blocks import LlamaAttention, LlamaMLP, LlamaRotaryEmbedding, ScaledEmbedding, rms_norm
from .moe import DeepseekV2MoEV5, DeepseekV3MoEV5, SparseMoeBlock, SparseMoeBlockV5
from .mtp import MTPModule


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        h = cfg["hidden_size"]
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.deepseek_v2 = remote_code(cfg)
        if self.deepseek_v2:
            self.self_attn = DeepseekV2Attention(cfg, layer_idx)
        elif transformers_v2(cfg):
            self.self_attn = DeepseekV2HFAttention(cfg, layer_idx)
        elif cfg.get("kv_lora_rank"):
            self.self_attn = DeepseekV3Attention(cfg, layer_idx)
        elif cfg["model_type"] == "diff_transformer":
            self.self_attn = DiffAttention(cfg, layer_idx)
        else:
            self.self_attn = LlamaAttention(cfg, layer_idx)
        self.sparse = cfg["model_type"] in ("mixtral", "qwen2_moe", "qwen3_moe")
        routed = layer_idx >= cfg.get("first_k_dense_replace", 0)
        # transformers 5's blocks: the router logits are the block's local, not the layer's
        self.sparse_v5 = self.sparse and cfg.get("experts_implementation", "modules") in ("eager", "grouped_mm")
        if self.sparse:
            self.mlp = SparseMoeBlockV5(cfg) if self.sparse_v5 else SparseMoeBlock(cfg)
        elif cfg["model_type"] == "deepseek" and routed:
            self.mlp = DeepseekMoE(cfg)
        elif remote_code(cfg) and routed:
            self.mlp = DeepseekV2MoE(cfg)
        elif transformers_v2(cfg) and routed:
            v5 = cfg.get("experts_implementation", "modules") in ("eager", "grouped_mm")
            self.mlp = DeepseekV2MoEV5(cfg) if v5 else DeepseekV2HFMoE(cfg)
        elif cfg["model_type"] == "deepseek_v3" and routed:
            v5 = cfg.get("experts_implementation", "modules") in ("eager", "grouped_mm")
            self.mlp = DeepseekV3MoEV5(cfg) if v5 else DeepseekV3MoE(cfg)
        elif cfg.get("lua_blocks") in MLP_BLOCKS:  # compare.py's block vocabulary cases (tests/torch/blocks/)
            self.mlp = MLP_BLOCKS[cfg["lua_blocks"]](cfg)
        else:
            self.mlp = LlamaMLP(cfg)
        self.residual_multiplier = cfg.get("residual_multiplier") if cfg["model_type"] == "granite" else None
        self.output_router_logits = cfg.get("output_router_logits", False)
        self.olmo2 = cfg["model_type"] == "olmo2"
        self.gemma2 = cfg["model_type"] in ("gemma2", "gemma3_text")
        if self.gemma2:  # Gemma2DecoderLayer: four norms, every other layer sliding; Gemma 3's: one in six global
            pattern = cfg.get("sliding_window_pattern", 6) if cfg["model_type"] == "gemma3_text" else 2
            self.is_sliding = bool((layer_idx + 1) % pattern)
            self.sliding_window = cfg.get("sliding_window", 4096)
            self.input_layernorm = rms_norm(cfg, h)
            self.post_attention_layernorm = rms_norm(cfg, h)
            self.pre_feedforward_layernorm = rms_norm(cfg, h)
            self.post_feedforward_layernorm = rms_norm(cfg, h)
        elif self.olmo2:
            self.post_attention_layernorm = rms_norm(cfg, h)
            self.post_feedforward_layernorm = rms_norm(cfg, h)
        else:
            self.input_layernorm = rms_norm(cfg, h)
            self.post_attention_layernorm = rms_norm(cfg, h)

    def forward_gemma2(self, ac, hidden_states, attention_mask, cos, sin, cache_position):
        # Gemma2DecoderLayer.forward (transformers 4.50-4.52) with eager
        # attention; Gemma3DecoderLayer's is the same with the sliding
        # layers' own rotary tables (its caller passes the ones to use)
        if self.is_sliding and attention_mask is not None:
            effective_seq_len = max(cache_position.shape[0], self.sliding_window)
            sliding_window_mask, attention_mask = outside_window(attention_mask, self.sliding_window,
                                                                 attention_mask.dtype)
            offset = cache_position[-1] - effective_seq_len + 1
            offset = torch.clamp(offset, min=0)
            mask_indexes = torch.arange(min(effective_seq_len, attention_mask.shape[-1]))
            mask_indexes += offset
            attention_mask = attention_mask[:, :, :, mask_indexes]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(ac, hidden_states, (cos, sin), attention_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        # under autocast the post norms return 16-bit rows and the residual
        # stream is fp32: CUDA's add, as MixedAdd, without CPU's fp32 copy
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(ac, hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states

    def forward(self, ac, hidden_states, attention_mask, position_ids, cos, sin, past_key_value=None,
                cache_position=None):
        if self.gemma2:
            return self.forward_gemma2(ac, hidden_states, attention_mask, cos, sin, cache_position)
        if self.olmo2:  # Olmo2DecoderLayer: each block's output normalized
            residual = hidden_states
            hidden_states, _ = self.self_attn(ac, hidden_states, (cos, sin), attention_mask, past_key_value)
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = add(residual, hidden_states)
            residual = hidden_states
            hidden_states = self.mlp(ac, hidden_states)
            hidden_states = self.post_feedforward_layernorm(hidden_states)
            return add(residual, hidden_states)
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        # DeepSeek-V2's attention makes its own rotary tables from the positions
        positions = position_ids if self.deepseek_v2 else (cos, sin)
        hidden_states, _ = self.self_attn(ac, hidden_states, positions, attention_mask, past_key_value)
        if self.residual_multiplier is not None:  # GraniteDecoderLayer
            hidden_states = add(residual, hidden_states * self.residual_multiplier)
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = self.mlp(ac, hidden_states)
            return add(residual, hidden_states * self.residual_multiplier)
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        if self.sparse:
            hidden_states, router_logits = self.mlp(ac, hidden_states)
            if self.sparse_v5 and not self.output_router_logits:
                del router_logits
        else:
            hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        if self.sparse and self.output_router_logits:  # outputs += (router_logits,)
            return hidden_states, router_logits
        return hidden_states


def outside_window(attention_mask, window, dtype):
    """A sliding layer's own mask, as Gemma2DecoderLayer and
    Cohere2DecoderLayer make it: the keys `window` or more behind a query
    set to the dtype's minimum (the bool marking them, a local of the
    layer, and the new mask)."""
    sliding_window_mask = torch.tril(torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-window)
    return sliding_window_mask, torch.where(sliding_window_mask, torch.finfo(dtype).min, attention_mask)


def eager_mask(batch_size, cache_position, kv_length, dtype):
    """create_causal_mask for eager attention, as masking_utils computes it
    (transformers 4.54+; src/transformers/masking_utils.py at commit
    00c4411cbe15d4c56d54d3b56d4d171e9c289dac: sdpa_mask without vmap, then
    eager_mask): causal_mask_function (kv_idx <= q_idx) broadcast over
    [1, 1, q, kv] bool, expanded to the batch, then torch.where to 0 and the
    dtype's minimum: [b, 1, q, kv] in the dtype, every sequence its own."""
    kv_arange = torch.arange(kv_length)
    mask = kv_arange[None, None, None, :] <= cache_position[None, None, :, None]
    mask = mask.expand(batch_size, -1, cache_position.shape[0], kv_length)
    return torch.where(mask, torch.tensor(0.0, dtype=dtype), torch.finfo(dtype).min)


def prefix_lm_mask(input_tensor, cache_position, attention_mask, token_type_ids):
    """PaliGemmaModel._update_causal_mask in training (is_training: the
    batch has token_type_ids and labels), transformers 4.50-4.52
    src/transformers/models/paligemma/modeling_paligemma.py, the causal mask
    made bidirectional over the prefix (token_type_ids 0), then padded; in
    the model's dtype, target_length the attention mask's length."""
    dtype = input_tensor.dtype
    min_dtype = torch.finfo(dtype).min
    sequence_length, target_length = input_tensor.shape[1], attention_mask.shape[-1]
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
    causal_mask = causal_mask.clone()
    mask_length = attention_mask.shape[-1]
    # First unmask prefix tokens during training
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
        token_type_ids[:, None, None, :] == 0, 0)
    # Then apply padding mask (will mask pad tokens)
    padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
    padding_mask = padding_mask == 0
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


def run_layers(ac, layers, x, mask, position_ids, cache_position, tables, past_key_values=None):
    """Decoder layers in a row: one per HF checkpoint call, or a chunk of
    them under vramplan's every-K checkpointing. Each output replaces the
    last; the mixtures' router logits come back beside the hidden states."""
    router = ()
    for layer in layers:
        # Gemma 3's sliding layers take the second pair
        pe = tables[2:] if len(tables) == 4 and layer.is_sliding else tables[:2]
        x = layer(ac, x, mask, position_ids, pe[0], pe[1], past_key_values, cache_position=cache_position)
        if isinstance(x, tuple):
            x, logits = x
            router += (logits,)
            del logits
    return (x,) + router if router else x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        gemma3 = cfg["model_type"] == "gemma3_text"
        self.embed_tokens = ScaledEmbedding(cfg["vocab_size"], h) if gemma3 else nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        # DeepSeek-V3's multi-token prediction module (mtp.py), registered
        # where vramplan's final ops hold it: before the final norm
        self.mtp = MTPModule(cfg, LlamaDecoderLayer) if cfg.get("num_nextn_predict_layers") else None
        self.mtp_labels = self.mtp_loss = None
        self.norm = rms_norm(cfg, h, final=True)
        self.rotary_emb = None if remote_code(cfg) else LlamaRotaryEmbedding(cfg)
        if transformers_v2(cfg):  # DeepseekV2Model's one module: complex freqs_cis
            self.rotary_emb = DeepseekV2HFRotaryEmbedding(cfg)
        self.rotary_emb_local = None
        if gemma3:  # Gemma3TextModel: the sliding layers' tables
            self.rotary_emb_local = LlamaRotaryEmbedding(dict(cfg, rope_theta=cfg.get("rope_local_base_freq", 10000.0)))
        self.tied = cfg.get("tie_word_embeddings", cfg["model_type"] in ("gemma", "gemma2", "gemma3_text"))
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def causal_mask(self, input_tensor, cache_position, past_seen_tokens=0):
        if getattr(self, "prefix_batch", None) is not None:
            return prefix_lm_mask(input_tensor, cache_position, *self.prefix_batch)
        # LlamaModel._update_causal_mask without an attention mask: target_length
        # is past_seen_tokens + sequence_length + 1; then
        # _prepare_4d_causal_attention_mask_with_cache_position, no padding mask
        dtype = input_tensor.dtype
        sequence_length = input_tensor.shape[1]
        if transformers_v2(self.cfg):  # DeepseekV2Model: create_causal_mask
            return eager_mask(input_tensor.shape[0], cache_position, past_seen_tokens + sequence_length, dtype)
        target_length = past_seen_tokens + sequence_length + 1
        # Gemma2Model._update_causal_mask (and Cohere2Model's, the same): the input's length
        if self.cfg["model_type"] in ("gemma2", "gemma3_text", "cohere2"):
            target_length = sequence_length
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        if self.cfg["model_type"] in ("phi3", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "starcoder2"):
            # MistralModel's (and its descendants'): no triu; the window or-ed in
            diagonal_attend_mask = torch.arange(target_length) > cache_position.reshape(-1, 1)
            window = self.cfg.get("sliding_window")
            if window is not None:
                sliding_attend_mask = torch.arange(target_length) <= (cache_position.reshape(-1, 1) - window)
                diagonal_attend_mask.bitwise_or_(sliding_attend_mask)
            causal_mask *= diagonal_attend_mask
            return causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        return causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        if self.cfg["model_type"] == "granite":  # GraniteModel rebinds inputs_embeds
            inputs_embeds = inputs_embeds * self.cfg["embedding_multiplier"]
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        # _update_causal_mask: SDPA drops the mask while the keys are the
        # queries and fewer than the sliding window (_ignore_causal_mask_sdpa)
        window = self.cfg.get("sliding_window")
        keys = past_seen_tokens + inputs_embeds.shape[1]
        sdpa_ignores = (self.cfg.get("_attn_implementation") == "sdpa" and past_seen_tokens == 0
                        and (window is None or keys < window)
                        and self.cfg["model_type"] not in ("gemma2", "gemma3_text", "cohere2"))
        causal_mask = None if sdpa_ignores else self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        # DeepseekV2Model makes no tables: each attention layer has its own
        if remote_code(self.cfg):
            cos, sin = None, None
        elif transformers_v2(self.cfg):  # the layers take freqs_cis as position_embeddings
            cos, sin = self.rotary_emb(hidden_states, position_ids), None
        else:
            cos, sin = self.rotary_emb(hidden_states, position_ids)
        tables = (cos, sin)
        if self.rotary_emb_local is not None:  # both pairs go to every layer
            tables = (cos, sin) + self.rotary_emb_local(hidden_states, position_ids)
        if self.cfg["model_type"] in ("gemma", "gemma2"):  # GemmaModel's normalizer (Gemma 3's is in its embedding)
            normalizer = torch.tensor(self.cfg["hidden_size"] ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        self.all_router_logits = ()
        for layer in self.layers:  # a block that names the batch's input_ids (IndexingMLP, IndexOpsMLP)
            if isinstance(getattr(layer, "mlp", None), (IndexingMLP, IndexOpsMLP)):
                layer.mlp.input_ids = weakref.ref(input_ids)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # LlamaModel's call: the rotary tables go as a tuple, not as tensors
                outputs = checkpoint(lambda x, m, p, cp, t, c=chunk: run_layers(ac, c, x, m, p, cp, t),
                                     hidden_states, causal_mask, position_ids, cache_position, tables)
            else:
                outputs = run_layers(ac, chunk, hidden_states, causal_mask, position_ids, cache_position, tables,
                                     past_key_values)
            if isinstance(outputs, tuple):  # MixtralModel: all_router_logits += (layer_outputs[-1],)
                hidden_states, router_logits = outputs[0], outputs[1:]
                self.all_router_logits += router_logits
                del router_logits
            else:
                hidden_states = outputs
            del outputs
        mtp = getattr(self, "mtp", None)  # (the families built on this body without Llama's __init__ have none)
        if mtp is not None:  # on the last layer's output, before the final norm; its loss waits for the main one
            self.mtp_loss = mtp(ac, self, input_ids, self.mtp_labels, hidden_states, causal_mask, position_ids,
                                     cache_position, tables, run_layers)
        hidden_states = self.norm(hidden_states)
        return hidden_states

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight
