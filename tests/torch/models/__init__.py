"""The model families as Hugging Face transformers (4.26-4.52) computes them in
training, written out in plain PyTorch so that the CPU run keeps what a CUDA
run of PyTorch 2.x keeps. Each forward mirrors the HF module line by line:
the order of operations and of Python locals decides which tensors are alive
together, so it is kept exactly. A helper called from a forward is a frame
of its own, whose locals go when it returns, so the families share forward
code only where HF's modules share it (LLaMA's eager attention, rotary
tables and causal mask; the 4-D causal mask OPT and T5 make); construction
and configuration are shared freely.

By layer:

* common: CUDA's autocast, dropout, mean and mixed-dtype arithmetic on
  Debian's PyTorch 1.13 CPU; the activations; LayerNorm under autocast; the
  causal mask from a 2-D mask; the checkpointed chunks of layers;
  transformers' DynamicCache.
* linear: the linear layers under autocast with PEFT's LoRA and DoRA and
  bitsandbytes' 4-bit and 8-bit layers.
* gpt2, gptj, bloom, opt, mpt, falcon, t5, bert: one family each.
* llama_blocks: LLaMA's norms, rotary tables, attention and MLP, which the
  other rotary families reuse; moe and deepseek: the mixtures of experts and
  DeepSeek's latent attention; diff: the DIFF Transformer's differential
  attention; llama: the LLaMA-like decoder (LLaMA, Mistral, Qwen, Gemma 1-3,
  Granite, OLMo 2, Phi-3, Mixtral, DeepSeek, DIFF Transformer).
* neox_phi, starcoder2, cohere: GPT-NeoX and Phi-2, StarCoder2 and Cohere on
  LLaMA's blocks.
* mamba2: Mamba-2 as transformers' Mamba2Mixer.torch_forward computes it
  (the reference chunked SSD, no CUDA kernels).
* losses and causal_lm: XForCausalLM over every decoder family.
* finetune: what a fine-tuning method does to a built model (PEFT's
  adapters, prompt and prefix tuning, freezing, bitsandbytes quantization).
* float8: torchao's Float8Linear (one-byte stand-ins for the float8 dtypes).

What the harness and the GPU check use is exported here.
"""
from .bert import BertForSequenceClassification
from .causal_lm import CausalLM
from .common import Autocast
from .finetune import (adapters_into_modules, add_lora, add_modules_to_save, add_prefix, add_prompt, freeze,
                       quantize_4bit, quantize_8bit, trained_in_registration_order)
from .float8 import float8_weights
from .t5 import T5ForConditionalGeneration

__all__ = ["Autocast", "BertForSequenceClassification", "CausalLM", "T5ForConditionalGeneration",
           "adapters_into_modules", "add_lora",
           "add_modules_to_save", "add_prefix", "add_prompt", "float8_weights", "freeze", "quantize_4bit", "quantize_8bit",
           "trained_in_registration_order"]
