"""What a fine-tuning method does to a built model before the step: PEFT's
LoRA and DoRA adapters, prompt and prefix tuning, modules_to_save, partial
freezing, and transformers' bitsandbytes integration (the linear layers
quantized to 4 or 8 bits)."""
import torch
import torch.nn as nn

from .bert import BertForSequenceClassification
from .bloom import Bloom
from .causal_lm import CausalLM
from .common import DynamicCache
from .gpt2 import GPT2, Conv1D
from .linear import Int8State, QuantState
from .neox_phi import ParallelDecoder
from .opt import OPT
from .param_lora import add_param_lora
from .t5 import T5ForConditionalGeneration


def quantized_linears(model):
    """The nn.Linear modules transformers' bitsandbytes integration replaces:
    every one but the head (get_keys_to_not_convert: the last child, a
    language model's head or a classifier); the model's
    _keep_in_fp32_modules (T5's wo) are cast to fp32 and left out."""
    keep_fp32 = {"wo"} if isinstance(model, T5ForConditionalGeneration) else set()
    for name, module in list(model.named_modules()):
        short = name.rsplit(".", 1)[-1]
        if not isinstance(module, (nn.Linear, Conv1D)) or short in ("lm_head", "classifier"):
            continue
        if short in keep_fp32:
            module.to(torch.float32)
            continue
        yield module


def linear_shape(module):
    """[out, in] of an nn.Linear, or of the Linear a Conv1D ([in, out]) becomes."""
    shape = tuple(module.weight.shape)
    return shape[::-1] if isinstance(module, Conv1D) else shape


def quantize_8bit(model, ac, threshold):
    """from_pretrained(quantization_config=BitsAndBytesConfig(load_in_8bit,
    llm_int8_threshold)): each quantized linear becomes a Linear8bitLt holding
    CB int8 and SCB."""
    model.quant_tensors = []
    for module in quantized_linears(model):
        shape = linear_shape(module)
        state = Int8State(shape[0], threshold)
        module.weight = nn.Parameter(torch.zeros(shape, dtype=torch.int8), requires_grad=False)
        ac.quant[id(module.weight)] = state
        model.quant_tensors += state.tensors()


def quantize_4bit(model, ac, double_quant, dtype, compute_dtype):
    """from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit,
    bnb_4bit_use_double_quant, bnb_4bit_compute_dtype)): each quantized
    linear becomes a Linear4bit whose weight (loaded in `dtype`) is packed
    two to a byte, [(n + 1) // 2, 1] uint8. model.quant_tensors lists the
    states' tensors and, with double quantization, the 256-value fp32 map
    quantize_blockwise caches once per process."""
    model.quant_tensors = [torch.zeros(256, dtype=torch.float32)] if double_quant else []
    for module in quantized_linears(model):
        shape = linear_shape(module)
        state = QuantState(shape, dtype, compute_dtype, double_quant)
        module.weight = nn.Parameter(torch.zeros((shape[0] * shape[1] + 1) // 2, 1, dtype=torch.uint8),
                                     requires_grad=False)
        ac.quant[id(module.weight)] = state
        model.quant_tensors += state.tensors()


# the heads PEFT's all-linear leaves out: a language model's, a classifier's (SEQ_CLS_HEAD_NAMES)
HEAD_NAMES = {"lm_head", "classifier"}


def add_lora(model, ac, recipe, adapter_dtype):
    """get_peft_model(model, LoraConfig(...)): every parameter frozen, A and
    B beside each targeted weight (all-linear: every linear but lm_head),
    registered on the model so that they count as its parameters. With
    use_dora, DoRA's magnitude vector too: the column norms of the weight,
    one per output feature, in the adapters' dtype (autocast_adapter_dtype)."""
    dora = str(recipe.get("use_dora", "false")) == "true"
    r = recipe.get("lora_rank", 8)
    alpha = recipe.get("lora_alpha", 8)
    p = recipe.get("lora_dropout", 0.0)
    wanted = recipe.get("lora_targets", "q_proj,v_proj,c_attn,query_key_value,q,v,query,value,Wqkv")
    # all-linear (PEFT's _maybe_include_all_linear_layers): every nn.Linear
    # and Conv1D whatever its name (a Lua block's own: Mamba's in_proj), but
    # the output head
    all_linear = wanted == "all-linear"
    targets = set() if all_linear else set(wanted.split(","))
    for param in model.parameters():
        param.requires_grad_(False)
    adapters = nn.ParameterList()
    for name, module in model.named_modules():
        short = name.rsplit(".", 1)[-1]
        if not isinstance(module, (nn.Linear, Conv1D)) or (short in HEAD_NAMES if all_linear else short not in targets):
            continue
        w = module.weight
        state = ac.quant.get(id(w))
        out_features, in_features = (
            state.shape if isinstance(state, QuantState) else w.shape if state
            else (w.shape[1], w.shape[0]) if isinstance(module, Conv1D) else w.shape)
        lora_A = nn.Parameter(torch.empty(r, in_features, dtype=adapter_dtype).normal_(std=0.02))
        lora_B = nn.Parameter(torch.zeros(out_features, r, dtype=adapter_dtype))
        adapters.append(lora_A)
        adapters.append(lora_B)
        magnitude = None
        if dora and state:  # the norms of the dequantized weight, made once
            magnitude = nn.Parameter(torch.ones(out_features, dtype=adapter_dtype))
            adapters.append(magnitude)
        elif dora:
            oriented = w.detach().T if isinstance(module, Conv1D) else w.detach()
            magnitude = nn.Parameter(torch.linalg.norm(oriented.float(), dim=1).to(adapter_dtype))
            adapters.append(magnitude)
        ac.lora[id(w)] = (lora_A, lora_B, alpha / r, p, magnitude)
    add_param_lora(model, ac, recipe, adapter_dtype, adapters)
    model.lora_adapters = adapters


def adapters_into_modules(model, ac):
    """Each target module's lora_A and lora_B registered on the module
    itself, after its own parameters, as PEFT's LoRA layer holds them, and
    looked up through it (FSDP2 shards them with the module's unit and
    swaps its parameters); the weight keyed by a name of its own
    (linear.adapter_key). Plain LoRA only."""
    moved = {id(p) for p in getattr(model, "lora_adapters", ())}
    for i, module in enumerate(m for m in model.modules() if id(getattr(m, "weight", None)) in ac.lora):
        lora_A, lora_B, scaling, p, magnitude = ac.lora.pop(id(module.weight))
        if magnitude is not None:
            raise ValueError("fsdp2: DoRA is not mirrored")
        module.register_parameter("lora_A", lora_A)
        module.register_parameter("lora_B", lora_B)
        module.weight.vp_key = ("lora", i)
        ac.lora[module.weight.vp_key] = (module, None, scaling, p, None)
        moved -= {id(lora_A), id(lora_B)}
    if moved or ac.lora.keys() - {k for k in ac.lora if isinstance(k, tuple)}:
        raise ValueError("fsdp2: LoRA on parameters (target_parameters) is not mirrored")
    model.lora_adapters = nn.ParameterList()


def freeze(model, trainable_layers):
    """Partial fine-tuning (finetune = freeze): every parameter frozen but
    the last trainable_layers layers', the final norm's and an untied head's
    (a classifier's: the pooler and the classifier)."""
    if isinstance(model, BertForSequenceClassification):
        for param in model.parameters():
            param.requires_grad_(False)
        trained = list(model.layers)[len(model.layers) - trainable_layers:] if trainable_layers else []
        for module in trained + [model.pooler, model.classifier]:
            module.requires_grad_(True)
        return
    if not isinstance(model, CausalLM):
        raise NotImplementedError("freeze is mirrored for the causal language models and BERT")
    body = model.model
    for param in model.parameters():
        param.requires_grad_(False)
    layers = body.h if isinstance(body, (GPT2, Bloom)) else body.layers
    final = body.ln_f if isinstance(body, (GPT2, Bloom)) else body.final_norm if isinstance(body, ParallelDecoder) \
        else body.final_layer_norm if isinstance(body, OPT) else body.norm
    trained = list(layers)[len(layers) - trainable_layers:] if trainable_layers else []
    for module in trained + [final] + ([body.lm_head] if hasattr(body, "lm_head") else []):
        module.requires_grad_(True)


def add_modules_to_save(model, recipe, wrapped=True):
    """Every module whose name ends with one of modules_to_save trained
    (_set_trainable's key.endswith). `wrapped`: PEFT's ModulesToSaveWrapper,
    whose model goes on with a trained deep copy, the original kept beside
    it, frozen; here the module's own parameters are trained and the frozen
    copies kept apart: the same tensors, by bytes and by role."""
    wanted = [t for t in str(recipe.get("modules_to_save", "")).split(",") if t]
    originals = nn.ParameterList()
    for name, module in model.named_modules():
        if not any(name.endswith(t) for t in wanted):
            continue
        for param in module.parameters():
            if wrapped:
                originals.append(nn.Parameter(param.detach().clone(), requires_grad=False))
            param.requires_grad_(True)
    model.peft_originals = originals


def trained_in_registration_order(model, ac):
    """The trained parameters as a PEFT model registers them, which a
    for-loop optimizer follows: a module's own, then the LoRA adapters
    beside its weight (lora_A, lora_B, DoRA's magnitude), module by module.
    The harness keeps its adapters in one list at the end; this puts them
    back in place."""
    adapters = {id(p) for p in getattr(model, "lora_adapters", ())}
    order, seen = [], set()
    for module in model.modules():
        beside = []
        for param in module.parameters(recurse=False):
            if id(param) in adapters or id(param) in seen:
                continue
            seen.add(id(param))
            order.append(param)
            adapter = ac.lora.get(id(param))
            if adapter:
                beside += [adapter[0], adapter[1]] + ([adapter[4]] if adapter[4] is not None else [])
        order += beside
    return [p for p in order if p.requires_grad]


class PromptTuning(nn.Module):
    """PEFT's prompt tuning (PromptEmbedding, PeftModel.get_prompt): the
    virtual tokens' table, num_transformer_submodules sets of them (two for
    seq2seq models), looked up for every sequence and cast to the
    embeddings' dtype; the caller puts them before the embeddings."""

    def __init__(self, num_virtual_tokens, hidden, dtype, submodules=1):
        super().__init__()
        self.num_virtual_tokens = num_virtual_tokens
        self.total = num_virtual_tokens * submodules
        self.embedding = nn.Embedding(self.total, hidden, dtype=dtype)

    def get_prompt(self, batch_size, dtype):
        # the prompt tokens are an arange kept on the CPU: on CUDA, the
        # .to(device) of the expanded tensor copies it
        prompt_tokens = torch.arange(self.total).unsqueeze(0).expand(batch_size, -1).contiguous()
        return self.embedding(prompt_tokens).to(dtype)


def add_prompt(model, recipe, dtype):
    """get_peft_model(model, PromptTuningConfig(num_virtual_tokens=...))."""
    for param in model.parameters():
        param.requires_grad_(False)
    if isinstance(model, T5ForConditionalGeneration):
        model.prompt = PromptTuning(recipe["num_virtual_tokens"], model.shared.weight.shape[1], dtype, submodules=2)
        return
    body = model if isinstance(model, BertForSequenceClassification) else model.model
    embedding = body.wte if hasattr(body, "wte") else \
        body.word_embeddings if isinstance(body, (Bloom, BertForSequenceClassification)) else body.embed_tokens
    model.prompt = PromptTuning(recipe["num_virtual_tokens"], embedding.weight.shape[1], dtype)


class PrefixTuning(nn.Module):
    """PEFT's prefix tuning without a projection (PrefixEncoder and
    PeftModel.get_prompt): a table of num_layers * 2 keys and values per
    virtual token, looked up for every sequence, cast to the model's dtype
    and handed to the model as a DynamicCache of views."""

    def __init__(self, num_virtual_tokens, layers, kv_heads, head_dim, dtype):
        super().__init__()
        self.num_virtual_tokens, self.layers, self.kv_heads, self.head_dim = num_virtual_tokens, layers, kv_heads, head_dim
        self.embedding = nn.Embedding(num_virtual_tokens, layers * 2 * kv_heads * head_dim, dtype=dtype)

    def get_prompt(self, batch_size, model_dtype):
        # the prompt tokens are an arange kept on the CPU: on CUDA, the
        # .to(device) of the expanded tensor copies it
        prompt_tokens = torch.arange(self.num_virtual_tokens).unsqueeze(0).expand(batch_size, -1).contiguous()
        past_key_values = self.embedding(prompt_tokens)
        past_key_values = past_key_values.to(model_dtype)
        past_key_values = past_key_values.view(batch_size, self.num_virtual_tokens, self.layers * 2, self.kv_heads,
                                               self.head_dim)
        past_key_values = past_key_values.permute([2, 0, 3, 1, 4]).split(2)
        return DynamicCache.from_legacy_cache(past_key_values)


class Seq2SeqPrefixTuning(PrefixTuning):
    """PeftModel.get_prompt for SEQ_2_SEQ_LM (PEFT 0.14-0.17, transformers
    4.47-4.52): prompt_tokens hold 2 x num_virtual_tokens ids, cut to the
    first num_virtual_tokens; token_dim is d_model; the table's keys and
    values are joined to themselves (torch.cat on dim 2) for the decoder's
    self- and cross-attention, split per layer into four, and handed over as
    an EncoderDecoderCache whose cross-attention cache PEFT then replaces by
    an empty DynamicCache: only the decoder's self-attention sees the prefix
    (the encoder never gets a cache)."""

    def get_prompt(self, batch_size, model_dtype):
        # .to(device) of the expanded ids copies them on CUDA
        prompt_tokens = torch.arange(2 * self.num_virtual_tokens).unsqueeze(0).expand(batch_size, -1).contiguous()
        prompt_tokens = prompt_tokens[:, : self.num_virtual_tokens]
        past_key_values = self.embedding(prompt_tokens)
        past_key_values = past_key_values.to(model_dtype)
        past_key_values = past_key_values.view(batch_size, self.num_virtual_tokens, self.layers * 2, self.kv_heads,
                                               self.head_dim)
        past_key_values = torch.cat([past_key_values, past_key_values], dim=2)
        past_key_values = past_key_values.permute([2, 0, 3, 1, 4]).split(4)
        # EncoderDecoderCache.from_legacy_cache: [:2] to the self-attention
        # cache, [2:] to the cross-attention one, which PEFT drops
        self_attention, cross_attention = DynamicCache(), DynamicCache()
        for layer_idx in range(len(past_key_values)):
            key_states, value_states = past_key_values[layer_idx][:2]
            self_attention.update(key_states, value_states, layer_idx)
            key_states, value_states = past_key_values[layer_idx][2:]
            cross_attention.update(key_states, value_states, layer_idx)
        return self_attention, DynamicCache()


def add_prefix(model, cfg, recipe, dtype):
    """get_peft_model(model, PrefixTuningConfig(num_virtual_tokens=...)):
    token_dim cut to the key/value heads for grouped-query attention; T5's
    token_dim is d_model, split over its heads."""
    for param in model.parameters():
        param.requires_grad_(False)
    if cfg["model_type"] in ("t5", "mt5"):
        model.prefix = Seq2SeqPrefixTuning(recipe["num_virtual_tokens"], cfg["num_layers"], cfg["num_heads"],
                                           cfg["d_model"] // cfg["num_heads"], dtype)
        return
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    model.prefix = PrefixTuning(recipe["num_virtual_tokens"], cfg["num_hidden_layers"], kv_heads,
                                cfg["hidden_size"] // heads, dtype)
