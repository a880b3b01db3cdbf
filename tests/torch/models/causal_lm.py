"""XForCausalLM over every decoder family: the body, the head, the loss."""
import contextlib

import torch
import torch.nn as nn

from .bloom import Bloom
from .cohere import Cohere
from .common import DynamicCache
from .falcon import Falcon
from .gpt2 import GPT2
from .gpt_oss import GptOss
from .gptj import GPTJ
from .linear import linear
from .llama import Llama
from .mamba2 import Mamba2
from .losses import (causal_lm_loss, chunked_output_loss, fused_causal_lm_loss, fused_linear_loss,
                     liger_causal_lm_loss, linear_cross_entropy_loss, load_balancing_loss_func, shifted_logits_loss)
from .neox_phi import ParallelDecoder
from .mpt import Mpt
from .opt import OPT
from .starcoder2 import Starcoder2


class CausalLM(nn.Module):
    """XForCausalLM.forward: body, head, loss; returns (loss, logits) the way
    CausalLMOutputWithPast keeps them."""

    def __init__(self, cfg):
        super().__init__()
        kind = cfg["model_type"]
        self.model = {"gpt2": GPT2, "bloom": Bloom, "gpt_neox": ParallelDecoder, "phi": ParallelDecoder,
                      "starcoder2": Starcoder2, "opt": OPT, "mpt": Mpt, "gptj": GPTJ, "falcon": Falcon,
                      "cohere": Cohere, "cohere2": Cohere, "mamba2": Mamba2, "gpt_oss": GptOss}.get(kind, Llama)(cfg)
        self.vocab = cfg["vocab_size"]

    def no_training_cache(self):
        # Gemma2Model and Cohere2Model make their HybridCache only when not
        # training; Mamba2Model turns use_cache off while training
        return getattr(self.model, "cfg", {}).get("model_type") in ("gemma2", "gemma3_text", "cohere2", "mamba2")

    def forward(self, ac, input_ids, labels, checkpoint=None, attention_mask=None, token_type_ids=None):
        prompt = getattr(self, "prompt", None)
        inputs_embeds = prompts = None
        if prompt is not None:  # PEFT computes the embeddings and keeps them (and its prompts) until the model returns
            inputs_embeds = self.model.embed(input_ids)
            # PeftModelForCausalLM.forward: -100 labels for the virtual tokens
            prefix_labels = torch.full((labels.shape[0], prompt.num_virtual_tokens), -100)
            labels = torch.cat((prefix_labels, labels), dim=1)
            del prefix_labels
            prompts = prompt.get_prompt(inputs_embeds.shape[0], inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts, inputs_embeds), dim=1)
        prefix = getattr(self, "prefix", None)
        past_key_values = None
        if prefix is not None:  # PeftModelForCausalLM.forward: past_key_values=self.get_prompt(batch_size)
            past_key_values = prefix.get_prompt(input_ids.shape[0], self.model.embed_tokens.weight.dtype)
        elif getattr(self, "use_cache", True) and checkpoint is None and not self.no_training_cache():
            # config.use_cache, which transformers turns off under gradient
            # checkpointing: LlamaModel makes a DynamicCache, GPT-2 returns presents
            past_key_values = [] if isinstance(self.model, (GPT2, Bloom)) else DynamicCache()
        if getattr(self.model, "mtp", None) is not None:  # the multi-token prediction module's labels (mtp.py)
            self.model.mtp_labels = labels
        # a prefix-LM's batch (PaliGemma's processor): what its mask reads, for the body's call only
        self.model.prefix_batch = (attention_mask, token_type_ids) if token_type_ids is not None else None
        hidden_states = self.model.body(ac, input_ids, checkpoint, inputs_embeds, past_key_values)
        self.model.prefix_batch = None
        kind = getattr(self, "loss", "cross-entropy")
        if kind in ("chunked", "fused-linear", "chunked-linear"):
            # torchtune's recipes delete the chunked logits (or the hidden
            # states) before backward; Liger makes none: the outputs keep
            # the cache alone, if any
            if kind == "chunked":
                # torchtune's NoOpManager (identity hooks on top) around the
                # output projection, the loss outside the offloading context
                noop = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
                with noop if getattr(self, "head_outside_hooks", False) else contextlib.nullcontext():
                    head_bias = getattr(self.model, "head_bias", None)
                    loss = chunked_output_loss(ac, hidden_states, self.model.head_weight(), labels,
                                               self.loss_chunks, bias=head_bias() if head_bias else None)
            elif kind == "chunked-linear":
                loss = linear_cross_entropy_loss(ac, hidden_states, self.model.head_weight(), labels,
                                                 self.loss_chunks)
            else:
                loss = fused_linear_loss(ac, hidden_states, self.model.head_weight(), labels)
            return loss, (None, past_key_values) if past_key_values is not None else None
        head_bias = getattr(self.model, "head_bias", None)
        # TRL's NoOpManager, entered and left by lm_head's forward hooks
        noop = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
        with noop if getattr(self, "head_noop_hooks", False) else contextlib.nullcontext():
            logits = linear(ac, hidden_states, self.model.head_weight(), head_bias() if head_bias else None)
        if isinstance(self.model, (GPTJ, Mamba2)):  # GPTJForCausalLM, Mamba2ForCausalLM: logits made fp32, kept
            logits = logits.to(torch.float32)
        if getattr(self.model, "cfg", {}).get("model_type") == "granite":  # GraniteForCausalLM
            logits = logits / self.model.cfg["logits_scaling"]
        if isinstance(self.model, Cohere):  # CohereForCausalLM
            logits = logits * self.model.cfg.get("logit_scale", 0.0625)
        cap = getattr(self.model, "cfg", {}).get("final_logit_softcapping")
        if cap is not None:  # Gemma2ForCausalLM
            logits = logits / cap
            logits = torch.tanh(logits)
            logits = logits * cap
        cfg = getattr(self.model, "cfg", {})
        # (transformers' DeepseekV2ForCausalLM: its loss_function, ForCausalLMLoss)
        deepseek = cfg.get("model_type") == "deepseek" or (cfg.get("model_type") == "deepseek_v2" and "auto_map" in cfg)
        if deepseek:
            # DeepseekForCausalLM.forward (deepseek-moe-16b-base) and
            # DeepseekV2ForCausalLM.forward of DeepSeek's modeling_deepseek.py:
            # logits.float() (kept by the outputs), then its own shifted loss
            logits = logits.float()
        if (isinstance(self.model, Bloom) or deepseek) and kind != "fused":  # a loss library replaces it
            loss = shifted_logits_loss(ac, logits, labels)
        elif kind == "fused":
            loss = fused_causal_lm_loss(logits, labels, self.vocab)
        elif kind == "liger-ce":
            loss = liger_causal_lm_loss(logits, labels, self.vocab)
        else:
            loss = causal_lm_loss(ac, logits, labels, self.vocab)
        mtp_loss = getattr(self.model, "mtp_loss", None)
        if mtp_loss is not None:  # L = L_main + lambda / D * sum_k L^k_MTP (arXiv 2412.19437 eq. 25)
            self.model.mtp_loss = self.model.mtp_labels = None
            cfg = self.model.cfg
            loss = loss + mtp_loss * (cfg.get("mtp_lambda", 0.3) / cfg["num_nextn_predict_layers"])
            del mtp_loss
        router_logits = getattr(self.model, "all_router_logits", ())
        self.model.all_router_logits = ()
        if router_logits:  # MixtralForCausalLM with output_router_logits
            cfg = self.model.cfg
            experts = cfg.get("num_local_experts") or cfg["num_experts"]
            aux_loss = load_balancing_loss_func(ac, router_logits, experts, cfg["num_experts_per_tok"])
            loss += cfg.get("router_aux_loss_coef", 0.001) * aux_loss
            del aux_loss
            logits = (logits, router_logits)  # the outputs keep them beside the logits
        if past_key_values is not None:  # the outputs keep the cache beside the logits
            return loss, (logits, past_key_values)
        return loss, logits
