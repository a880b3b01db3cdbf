"""Measure one steady-state training step on CPU: model states and the live
tensor bytes over the step, counted by the memcount LD_PRELOAD library.

    LD_PRELOAD=build/libmemcount.so python3 tests/torch/harness.py CASES.json

CASES.json is a list of {"config": {HF config.json fields}, "recipe": {...}}
with recipe keys as vramplan names them (precision, optimizer,
optimizer_impl, micro_batch, seq_len, checkpointing). Prints one JSON object
per case, one per line.
"""
import contextlib
import ctypes
import gc
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import StorageWeakRef
from torch.autograd import Variable
import torch.utils.checkpoint

import checkpoint2x
import fsdp2

from models import (Autocast, BertForSequenceClassification, CausalLM, T5ForConditionalGeneration,
                    adapters_into_modules, add_lora, add_modules_to_save, add_prefix, add_prompt, float8_weights,
                    freeze, quantize_4bit, quantize_8bit, trained_in_registration_order)
from optimizers import SM3, Adafactor, HFAdamW

# oneDNN's bf16 GEMMs allocate scratch buffers of their own on the CPU (heap
# memory, no tensor, transient inside each matmul) that a GPU run does not
# have; ATen's own CPU kernels do not.
torch.backends.mkldnn.enabled = False

_lib = ctypes.CDLL(None)
_current = _lib.memcount_current
_current.restype = ctypes.c_longlong
_peak = _lib.memcount_peak
_peak.restype = ctypes.c_longlong
_reset = _lib.memcount_reset_peak

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# numpy storage of each dtype's bits: numpy's memory comes from malloc, which
# the counter does not see, as a GPU run does not see pinned host memory
HOST_STORAGE = {torch.float32: np.float32, torch.bfloat16: np.int16, torch.float16: np.int16,
                torch.float64: np.float64, torch.int64: np.int64, torch.int32: np.int32, torch.uint8: np.uint8,
                torch.bool: np.bool_}


def dense(t):
    """Whether t is non-overlapping and dense: torch.empty_like keeps its strides."""
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def host_like(t):
    """A host array with t's strides (torch.empty_like's layout), outside the counted allocator."""
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    host = np.empty([t.shape[d] for d in order], dtype=HOST_STORAGE[t.dtype])
    return host.transpose(np.argsort(order))


def contiguous_copy(t):
    """t.clone(memory_format=torch.contiguous_format), made as a 3-D copy:
    the CPU's copy of a transposed matrix takes a 60 x 60 block buffer of
    its own, which a GPU's does not."""
    with torch.no_grad():
        copy = torch.empty(t.shape, dtype=t.dtype)
        copy.unsqueeze(0).copy_(t.unsqueeze(0))
    return copy


class SaveOnHost(torch.autograd.graph.saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu(pin_memory=True) for a CPU run: every
    tensor autograd saves is copied into host memory (contiguous, its own
    elements) and comes back in backward as a new tensor (.to(device)).
    packed_bytes adds up the pinned blocks the GPU run would take from the
    caching host allocator (each request rounded up to a power of two).

    With `streams` (torchtune's OffloadActivations with use_streams, its
    default from PyTorch 2.5, torchtune/training/_activation_offloading.py):
    an offloaded tensor stays in the forward's stash until `window` packs
    later (every pack counts, kept ones too) and is handed back as it is if
    backward asks for it first; a tensor brought back stays in the backward
    stash until the next node that brings one back has run, whose post-hook
    lets go of the earlier nodes' and of the forward's stash; the end of
    backward lets go of the rest. PyTorch 1.13 has no
    _current_autograd_node: `watch` puts a post-hook on every node of the
    graph, and the unpacks between two of them are one node's.

    With `trl` (TRL 1.8+'s copy, trl/models/activation_offloading.py, read
    at c26ba878; `params`: the model's parameters when the context is made):
    a save whose storage key (storage pointer plus offset, dtype) the stash
    tracks stays, and the key then tracks it; so does a view of a
    parameter's storage; a non-contiguous tensor, or one at an offset, goes
    through a contiguous copy, which the stash keeps; a broadcast tensor's
    storage goes to the host as it is and comes back viewed as_strided.
    With `clone_views` (axolotl 0.18's patch of TRL's hook), such a tensor
    but a parameter, a broadcast one too, is cloned contiguous first, and
    the hook sees the clone."""

    def __init__(self, torchtune=False, streams=False, window=5, trl=False, params=(), clone_views=False):
        self.packed_bytes = 0
        self.packs = 0
        self.fwd, self.back = {}, {}  # pack id -> tensor, oldest first
        self.earlier = []  # of back's, the ids the running node found there
        self.in_node = False  # the running node has unpacked an offloaded tensor
        self.queued = False
        self.keys, self.key_of = {}, {}  # TRL's storage_to_tensor_id, _storage_key_by_tensor_id
        # TRL's key is an address: a tensor later placed where an offloaded
        # one's freed original was (the stash keeping a copy) would be taken
        # for it, as the allocator decides (malloc here, the caching
        # allocator on a GPU: Gemma 3's k norm landed in its q norm's
        # block, an autocast cast of v_proj's weight in k_proj's). A weak
        # reference to each key's storage tells those apart: the engine
        # models the storages, not the addresses
        self.storages = {}
        param_storages = {p.storage().data_ptr() for p in params}

        def track(key, pid, tensor):
            self.keys[key] = pid
            self.key_of[pid] = key
            self.storages[key] = StorageWeakRef(tensor.storage())

        def release(pid):
            key = self.key_of.pop(pid, None)
            if key is not None and self.keys.get(key) == pid:
                del self.keys[key]

        self.release = release

        def pack(tensor):
            if clone_views and not isinstance(tensor, torch.nn.Parameter) and \
                    (not tensor.is_contiguous() or tensor.storage_offset() != 0):
                tensor = contiguous_copy(tensor)
            self.packs += 1
            pid = self.packs
            key = (tensor.storage().data_ptr() + tensor.storage_offset(), tensor.dtype)
            if trl and key in self.keys and not self.storages[key].expired():
                track(key, pid, tensor)
                return tensor
            # torchtune's OffloadActivations (torchtune/training/
            # _activation_offloading.py): a parameter, or a tensor of fewer
            # than min_offload_size = 1024 bytes, stays where it is
            if torchtune and (isinstance(tensor, torch.nn.Parameter) or
                              tensor.numel() * tensor.element_size() < 1024):
                return tensor
            if trl and tensor.storage().data_ptr() in param_storages:
                return tensor
            if streams:  # the stash lets go of what was packed `window` packs ago, oldest first
                for old in list(self.fwd):
                    if old > pid - window:
                        break
                    del self.fwd[old]
                    release(old)
            if trl:
                return trl_pack(tensor, pid, key)
            # torchtune's host copy is torch.empty_like(activation): a
            # dense tensor (a transposed weight) keeps its strides there,
            # and the copy needs nothing on the GPU (TensorIterator sees
            # both sides alike); save_on_cpu's torch.empty(size) is contiguous
            keeps = torchtune and dense(tensor)
            host = host_like(tensor) if keeps else np.empty(tuple(tensor.shape), dtype=HOST_STORAGE[tensor.dtype])
            with torch.no_grad():
                # CUDA copies a non-contiguous tensor to the host through a
                # contiguous copy on the GPU (copy_requires_temporaries in
                # ATen's Copy.cu: src.expand_as(dst).contiguous()); made
                # here as a 3-D copy, since the CPU's copy of a transposed
                # matrix takes a 60 x 60 block buffer of its own
                source = tensor
                if not tensor.is_contiguous() and not keeps:
                    source = torch.empty(tensor.shape, dtype=tensor.dtype)
                    source.unsqueeze(0).copy_(tensor.unsqueeze(0))
                torch.from_numpy(host).view(tensor.dtype).copy_(source)
                del source
            n = tensor.numel() * tensor.element_size()
            self.packed_bytes += 1 << (n - 1).bit_length() if n else 0
            if streams:
                self.fwd[pid] = tensor
            return tensor.dtype, host, pid, None

        def trl_pack(tensor, pid, key):
            with torch.no_grad():
                if 0 in tensor.stride():  # the storage's raw elements, not the broadcast
                    n = tensor.storage().size()
                    host = np.empty((n,), dtype=HOST_STORAGE[tensor.dtype])
                    raw = torch.as_strided(tensor, (n,), (1,), 0)
                    torch.from_numpy(host).view(tensor.dtype).copy_(raw)
                    del raw
                    kept = tensor
                else:
                    kept = tensor
                    if not tensor.is_contiguous() or tensor.storage_offset() != 0:
                        kept = contiguous_copy(tensor)
                    host = host_like(kept)
                    torch.from_numpy(host).view(tensor.dtype).copy_(kept)
            n = host.size * host.itemsize
            self.packed_bytes += 1 << (n - 1).bit_length() if n else 0
            layout = (tuple(tensor.shape), tuple(kept.stride()), kept.storage_offset())
            if streams:
                self.fwd[pid] = kept
                track(key, pid, tensor)
            return tensor.dtype, host, pid, layout

        def unpack(packed):
            if isinstance(packed, torch.Tensor):
                return packed
            dtype, host, pid, layout = packed
            release(pid)
            if dtype == torch.float64 and host.ndim == 0:
                # a wrapped Python number (`x * scaling`) lives on the CPU in
                # a GPU run too: .to(its device) is the pinned copy itself
                return torch.from_numpy(host)
            if not streams:
                return back_on_device(host, dtype, layout)
            if not self.queued:  # wait_and_del_remaining_references, at the end of backward
                self.queued = True
                Variable._execution_engine.queue_callback(self._flush)
            if not self.in_node:
                self.in_node = True
                self.earlier = list(self.back)
            if pid in self.fwd:
                return self.fwd[pid]
            t = back_on_device(host, dtype, layout)
            self.back[pid] = t
            return t

        def back_on_device(host, dtype, layout):
            t = torch.from_numpy(host).view(dtype).clone()
            if layout is not None:  # TRL: the original shape and strides over what came back
                t = torch.as_strided(t, layout[0], layout[1], layout[2])
            return t

        super().__init__(pack, unpack)

    def watch(self, loss):
        """A post-hook on every node of loss's graph but AccumulateGrad's
        (whose stealing of its incoming gradient a hook would change)."""
        seen, todo = set(), [loss.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if type(node).__name__ != "AccumulateGrad":
                node.register_hook(self._node_done)
            todo.extend(n for n, _ in node.next_functions)

    def _node_done(self, grad_inputs, grad_outputs):
        if self.in_node:  # the hook OffloadActivations registered on it
            for pid in self.fwd:
                self.release(pid)
            self.fwd.clear()
            for pid in self.earlier:
                del self.back[pid]
            self.earlier = []
        self.in_node = False

    def _flush(self):
        self.fwd.clear()
        self.back.clear()
        self.earlier = []
        self.in_node = False
        self.queued = False


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def storage_bytes(tensors):
    """The bytes of the storages under `tensors`, each once (views of one buffer)."""
    seen = {}
    for t in tensors:
        if t is not None:
            seen[t.storage().data_ptr()] = t.storage().size() * t.element_size()
    return sum(seen.values())


class MasterWeights:
    """The 16-bit model / fp32 master recipe of Megatron-LM's
    Float16OptimizerWithFloat16Params: the inner optimizer steps on fp32
    copies; gradients are copied up and the 16-bit ones dropped."""

    def __init__(self, params, make_inner):
        self.params = list(params)
        self.masters = [p.detach().float().requires_grad_() for p in self.params]
        self.inner = make_inner(self.masters)

    def step(self):
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad.float()
            p.grad = None
        self.inner.step()
        for p, m in zip(self.params, self.masters):
            p.data.copy_(m.data)

    def zero_grad(self, set_to_none=True):
        self.inner.zero_grad(set_to_none=set_to_none)
        for p in self.params:
            p.grad = None

    def state_tensors(self):
        return optimizer_state(self.inner)


class OptimizerInBackward:
    """torchtune's optimizer in backward (torchtune/modules/optim.py
    OptimizerInBackward, training/memory.py register_optim_in_bwd_hooks): an
    optimizer of its own for every trained parameter, whose step() and
    zero_grad() (set_to_none, 2.x's default) run in the parameter's
    register_post_accumulate_grad_hook. PyTorch 1.13 has no such hook: a post
    hook on the parameter's AccumulateGrad node (how DDP's reducer reaches
    it) runs at the same moment, after .grad is set, while the node's input
    is still alive, and frees nothing earlier."""

    def __init__(self, params, make):
        self.optimizers = [make([p]) for p in params]
        self.nodes = []  # held: the parameters' AccumulateGrad nodes must outlive the graphs
        for p, opt in zip(params, self.optimizers):
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            node.register_hook(self._step_and_clear(opt))
            self.nodes.append(node)

    @staticmethod
    def _step_and_clear(opt):
        def hook(grad_inputs, grad_outputs):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return hook

    def state_tensors(self):
        return [t for opt in self.optimizers for t in optimizer_state(opt)]


def convert_to_fp32(outputs):
    """accelerate's convert_to_fp32 (accelerate/utils/operations.py,
    recursively_apply), which ConvertOutputsToFp32 applies to what the
    forward returns under native amp: tuples and lists rebuilt with each
    fp16 / bf16 tensor's .float() in its place, any other object (a
    DynamicCache) passed as it is."""
    if isinstance(outputs, (tuple, list)):
        return type(outputs)(convert_to_fp32(o) for o in outputs)
    if torch.is_tensor(outputs) and outputs.dtype in (torch.float16, torch.bfloat16):
        return outputs.float()
    return outputs


def optimizer_state(opt):
    # the per-parameter step counters live on the host on a GPU run
    return [v for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v) and k != "step"]


def make_optimizer(name, impl, params, first_moment=False, weight_decay=None):
    """The recipe's optimizer; weight_decay None: its library's default
    (torch's AdamW 0.01, the others 0; SM3 has none)."""
    foreach = impl == "foreach"
    decay = {} if weight_decay is None else {"weight_decay": weight_decay}
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=foreach, **decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, foreach=foreach, **decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=foreach, **decay)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach, **decay)
    if name == "adamw-hf":
        return HFAdamW(params, **decay)
    if name == "adafactor":
        return Adafactor(params, beta1=0.9 if first_moment else None, **decay)
    if name == "sm3":
        return SM3(params, momentum=0.9 if first_moment else 0.0)
    if name == "none":
        return None
    raise ValueError(name)


def torchtitan_policy():
    """torchtitan's op-level selective checkpointing policy
    (torchtitan/distributed/activation_checkpoint.py at 8a6c9fe6e, _save_list
    and _custom_policy; engine/policy/sac_policy.c is the engine's copy):
    the outputs of mm (every second one recomputed, counted per call and per
    pass), SDPA's flash and memory-efficient kernels, reduce_scatter_tensor,
    max and flex_attention are saved, the rest recomputed. PyTorch 1.13 has
    none of the SDPA, collective or flex ops."""
    saved = {torch.ops.aten.max.default}
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention"):
        if hasattr(torch.ops.aten, name):  # PyTorch 2.0+
            saved.add(getattr(torch.ops.aten, name).default)
    counts = {False: 0, True: 0}

    def policy(is_recompute, func, *args, **kwargs):
        if func == torch.ops.aten.mm.default:
            counts[is_recompute] += 1
            return counts[is_recompute] % 2 == 1
        return func in saved
    return policy


def selective_checkpoint(fn, args, early_stop):
    """torchtitan's checkpoint_wrapper call on a PyTorch that has the
    selective checkpoint API (2.4+; not the CPU harness's 1.13)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def context_fn():
        policy = torchtitan_policy()
        return create_selective_checkpoint_contexts(
            lambda ctx, func, *a, **k: CheckpointPolicy.MUST_SAVE if policy(ctx.is_recompute, func, *a, **k)
            else CheckpointPolicy.PREFER_RECOMPUTE)
    with torch.utils.checkpoint.set_checkpoint_early_stop(early_stop):
        return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=False,
                                                 context_fn=context_fn)


def checkpoint_fn(every, ac, reentrant=True, early_stop=False, layers_k=0, op_selective=False):
    """HF's checkpointing. Reentrant: its backward reruns the layer inside a
    fresh autocast region (ctx.gpu_autocast_kwargs) whose exit clears the
    weight-cast cache; the forward's casts stay cached until the forward's
    own region ends. Not reentrant: 1.13's own (no early stop), or 2.x's
    written out (checkpoint2x); its rerun, the function's second call, runs
    in a fresh autocast region too, left as the rerun ends or stops.
    op_selective: every layer under torchtitan's per-op policy
    (checkpoint_wrapper with create_selective_checkpoint_contexts; 2.x's
    non-reentrant checkpoint written out, with or without early stop)."""
    if not every:
        return None

    def run(fn, *args):
        # torchtitan's selective layer checkpointing (ac_freq = K): layer i
        # is wrapped when i % K == 0, the others run as they are
        if layers_k:
            index = run.calls
            run.calls += 1
            if index % layers_k:
                return fn(*args)
        if reentrant:
            def body(*a):
                out = fn(*a)
                if torch.is_grad_enabled():  # the recomputation in backward
                    ac.clear()
                return out
            return torch.utils.checkpoint.checkpoint(body, *args, use_reentrant=True, preserve_rng_state=False)
        calls = []

        def body(*a):
            calls.append(None)
            if len(calls) == 1:
                return fn(*a)
            try:
                return fn(*a)
            finally:
                ac.clear()
        if op_selective and hasattr(torch.utils.checkpoint, "create_selective_checkpoint_contexts"):
            return selective_checkpoint(body, args, early_stop)  # PyTorch 2.4+: its own
        if op_selective:
            return checkpoint2x.checkpoint(body, *args, early_stop=early_stop,
                                           context_fn=lambda: checkpoint2x.selective_contexts(torchtitan_policy()))
        if early_stop:
            return checkpoint2x.checkpoint(body, *args)
        return torch.utils.checkpoint.checkpoint(body, *args, use_reentrant=False, preserve_rng_state=False)

    run.every = every  # layers a checkpointed call runs (models/common.py, chunks)
    run.calls = 0  # chunks called since the forward began (layers-K), reset by measure()
    return run


def measure(case, rank=None):
    cfg, recipe = case["config"], case["recipe"]
    precision = recipe.get("precision", "fp32")
    b, s = recipe["micro_batch"], recipe["seq_len"]
    ckpt_kind = recipe.get("checkpointing", "none")
    every = 1 if ckpt_kind == "full" else int(ckpt_kind[6:]) if ckpt_kind.startswith("every-") else 0
    layers_k = int(ckpt_kind[7:]) if ckpt_kind.startswith("layers-") else 0
    op_selective = ckpt_kind == "op-selective"  # non-reentrant, every layer
    every = every or (1 if layers_k or op_selective else 0)
    reentrant = str(recipe.get("use_reentrant", "true")) == "true" and not op_selective
    torch.manual_seed(0)
    gc.collect()
    base = _current()

    cfg = dict(cfg, experts_implementation=recipe.get("experts_implementation", "modules"),
               liger_rms_norm=str(recipe.get("liger_rms_norm", "false")) == "true",
               liger_swiglu=str(recipe.get("liger_swiglu", "false")) == "true",
               liger_before_load=str(recipe.get("liger_before_load", "true")) == "true")
    classifier = cfg["model_type"] == "bert"
    seq2seq = cfg["model_type"] in ("t5", "mt5")
    if classifier:
        model = BertForSequenceClassification(cfg)
    elif seq2seq:
        model = T5ForConditionalGeneration(cfg)
    else:
        model = CausalLM(cfg)
    model.use_cache = str(recipe.get("use_cache", "true")) == "true"
    model.loss = recipe.get("loss", "cross-entropy")
    model.loss_chunks = int(recipe.get("loss_chunks", 8))
    model.train()
    # FSDP2 (fsdp2.py) keeps fp32 shards and gathers them in param_dtype
    sharded = recipe.get("framework") == "fsdp2"
    model_dtype = torch.float32 if sharded else torch.bfloat16 if precision in ("bf16", "bf16-autocast", "mixed-bf16", "fp8-torchao") else torch.float32
    model.to(model_dtype)
    # amp-bf16 autocasts over fp32 weights, bf16-autocast over bf16 ones (the Trainer's bf16=True)
    ac = Autocast(torch.bfloat16 if precision in ("amp-bf16", "bf16-autocast") else None)
    if precision == "fp8-torchao":  # mixed-bf16 with torchao's Float8Linear
        ac.float8 = float8_weights(model)
        ac.float8_recipe = recipe.get("fp8_recipe", "tensorwise")
    finetune = recipe.get("finetune", "full")
    if finetune == "qlora":
        # loaded in the compute dtype and quantized; under amp-bf16 the rest
        # is fp32, as prepare_model_for_kbit_training leaves it
        if recipe.get("quant") == "int8":
            quantize_8bit(model, ac, float(recipe.get("llm_int8_threshold", 6.0)))
        else:
            # bnb_4bit_compute_dtype (fp16 matmuls do not run on this CPU)
            compute = {"bf16": torch.bfloat16, "fp32": torch.float32}[recipe.get("compute_dtype", "bf16")]
            quantize_4bit(model, ac, str(recipe.get("double_quant", "true")) == "true", compute, compute)
    if finetune in ("lora", "qlora", "prompt", "prefix"):
        # PEFT upcasts 16-bit adapters to fp32 (autocast_adapter_dtype) unless
        # the framework casts the whole module (the mixed-* recipes); before
        # PEFT 0.12 (and in fsdp_qlora, torchtune) they keep the base's dtype
        rule = recipe.get("lora_dtype", "auto")
        if rule == "base":
            adapter_dtype = model_dtype
        elif rule == "fp32":
            adapter_dtype = torch.float32
        else:
            adapter_dtype = model_dtype if precision.startswith("mixed") else torch.float32
        if finetune in ("lora", "qlora"):
            add_lora(model, ac, recipe, adapter_dtype)
        elif finetune == "prefix":
            add_prefix(model, cfg, recipe, adapter_dtype)
        else:
            add_prompt(model, recipe, adapter_dtype)
        # PeftModelForSequenceClassification (task_type SEQ_CLS) adds its head to modules_to_save
        saved = recipe.get("modules_to_save", "")
        if cfg["model_type"] == "bert":
            saved = ",".join(t for t in (saved, "classifier") if t)
        add_modules_to_save(model, dict(recipe, modules_to_save=saved))
        # enable_input_require_grads: PeftModel's, or prepare_model_for_kbit_training's for reentrant checkpoints
        if every and (finetune != "qlora" or reentrant):
            name = {"gpt2": "wte", "bloom": "word_embeddings"}.get(cfg["model_type"], "embed_tokens")
            embedding = model.shared if seq2seq else model.word_embeddings if cfg["model_type"] == "bert" else \
                getattr(model.model, name)
            embedding.register_forward_hook(lambda module, inputs, output: output.requires_grad_(True))
    elif finetune == "freeze":
        freeze(model, int(recipe.get("trainable_layers", 0)))
        add_modules_to_save(model, recipe, wrapped=False)  # no PEFT here: trained as they are
    net = model
    if sharded:  # one rank of dp, written out (fsdp2.py): every decoder layer a unit, the root the rest
        if finetune == "lora":  # PEFT's LoRA layers hold their adapters: sharded with the block
            adapters_into_modules(model, ac)
        elif finetune != "full":
            raise ValueError("fsdp2: full fine-tuning and LoRA are mirrored")
        if precision not in ("fp32", "amp-bf16", "mixed-bf16"):  # the shards are fp32 here
            raise ValueError(f"fsdp2: precision {precision} is not mirrored")
        if not hasattr(getattr(model, "model", None), "layers"):
            raise ValueError("fsdp2: mirrored for decoders whose blocks are model.model.layers")
        mixed = precision.startswith("mixed")
        reduce = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(recipe.get("reduce_dtype"))
        net = fsdp2.FullyShard(model, model.model.layers, int(recipe["dp"]),
                               param_dtype=torch.bfloat16 if mixed else None,
                               reduce_dtype=reduce if mixed else None,
                               reshard_after_forward=str(recipe.get("reshard_after_forward", "true")) == "true",
                               rerun_reshards=str(recipe.get("fsdp2_rerun_reshards", "false")) == "true")
        # accelerate wraps the model's forward, inside FSDP2's hooks: its autocast region ends, then the
        # copies are made, before the root's post-forward lets go of the last all-gather output
        if str(recipe.get("outputs_fp32", "false")) == "true":
            net.convert_outputs = lambda outputs: (ac.clear(), convert_to_fp32(outputs))[1]
    all_params = [p for p in model.parameters()]
    params = trained_in_registration_order(model, ac)
    # FSDP2's shards and their gradients are views of padded storage: counted by it
    state_bytes = storage_bytes if sharded else tensor_bytes
    if rank is not None and not sharded:  # DistributedDataParallel over gloo, one process per rank
        # gloo cannot broadcast GPT-2's bool mask buffers: DDP is told to skip them
        model._ddp_params_and_buffers_to_ignore = [n for n, b in model.named_buffers() if b.dtype == torch.bool]
        net = torch.nn.parallel.DistributedDataParallel(
            model, gradient_as_bucket_view=bool(recipe.get("ddp_bucket_view", False)), broadcast_buffers=False)
    name, impl = recipe.get("optimizer", "adamw"), recipe.get("optimizer_impl", "foreach")
    first_moment = str(recipe.get("first_moment", "false")) == "true"
    decay = float(recipe["weight_decay"]) if "weight_decay" in recipe else None
    in_backward = None
    if str(recipe.get("optimizer_in_backward", "false")) == "true":
        in_backward = OptimizerInBackward(params, lambda ps: make_optimizer(name, impl, ps, first_moment, decay))
        opt = None
    elif (precision.startswith("mixed") and not sharded) or precision == "fp8-torchao":
        opt = MasterWeights(params, lambda ps: make_optimizer(name, impl, ps, first_moment, decay)) \
            if name != "none" else None
    else:
        opt = make_optimizer(name, impl, params, first_moment, decay)
    set_to_none = str(recipe.get("grads_set_to_none", "true")) == "true"
    vocab = cfg["vocab_size"]
    ckpt = checkpoint_fn(every, ac, reentrant, str(recipe.get("checkpoint_early_stop", "false")) == "true",
                         layers_k, op_selective)
    offload = str(recipe.get("offload_activations", "false")) == "true"
    offload_torchtune = str(recipe.get("offload_torchtune", "false")) == "true"
    offload_streams = offload_torchtune and str(recipe.get("offload_streams", "false")) == "true"
    offload_trl = offload_torchtune and str(recipe.get("offload_trl", "false")) == "true"
    clone_views = offload_trl and str(recipe.get("offload_clone_views", "false")) == "true"
    # torchtune's get_act_offloading_ctx_manager: a NoOpManager around the
    # output projection; the recipe's loss runs outside the context. TRL's
    # SFTTrainer.training_step runs forward, loss and backward inside it,
    # its NoOpManager on lm_head's forward hooks
    model.head_outside_hooks = offload and offload_torchtune and not offload_trl
    model.head_noop_hooks = offload and offload_trl
    result = {}

    # gradient accumulation as a training loop runs it: `for batch in
    # loader: loss, logits = model(batch); loss.backward()`, the step after
    # the last; the rebinding keeps the last micro-batch's batch until the
    # next has arrived and its outputs (and graph) until the next forward
    # returns
    accum = int(recipe.get("grad_accum", 1))
    outputs_fp32 = str(recipe.get("outputs_fp32", "false")) == "true"
    if accum > 1 and rank is not None:
        raise ValueError("grad_accum under DDP (no_sync) is not mirrored")
    for step in range(3):
        measuring = step == 2
        if measuring:
            gc.collect()
            # FSDP2 under a reentrant checkpoint carries the last rerun's
            # all-gather output over the step's end (fsdp2.py): not resident
            start = _current() - (net.held_bytes() if sharded else 0)
            _reset()
        loss = logits = input_ids = labels = None
        extra = {}
        for micro in range(accum):
            first = micro == 0
            new_ids = torch.randint(vocab, (b, s))
            new_extra = {}
            if cfg.get("prefix_lm"):  # PaliGemmaProcessor's batch with a suffix: the mask, then 0 on the prefix
                new_extra["attention_mask"] = torch.ones((b, s), dtype=torch.long)
                new_extra["token_type_ids"] = (torch.arange(s) >= cfg["prefix_lm"]).long().expand(b, s).contiguous()
            if seq2seq:  # a seq2seq batch: the tokenizer's attention mask, labels of the target length
                new_extra["attention_mask"] = torch.ones((b, s), dtype=torch.long)
                new_labels = torch.randint(vocab, (b, recipe.get("target_len", s)))
            elif classifier:
                new_labels = torch.randint(cfg.get("num_labels", 2), (b,))
            else:
                new_labels = new_ids.clone()
            input_ids, labels, extra = new_ids, new_labels, new_extra
            del new_ids, new_labels, new_extra
            host = SaveOnHost(offload_torchtune, offload_streams, trl=offload_trl, params=all_params,
                              clone_views=clone_views) \
                if offload else None
            if ckpt is not None:
                ckpt.calls = 0
            if offload_trl:  # exited after backward, below
                host.__enter__()
            with host if offload and not offload_trl else contextlib.nullcontext():
                loss, logits = net(ac, input_ids, labels, ckpt, **extra)
            ac.clear()
            if outputs_fp32 and not sharded:  # the forward accelerate prepared returns its outputs converted
                loss, logits = convert_to_fp32((loss, logits))
            if offload and measuring:
                result["host_packed_bytes"] = max(result.get("host_packed_bytes", 0), host.packed_bytes)
            if str(recipe.get("keep_logits", "true")) == "false":  # HF's Trainer returns the loss alone
                logits = None
            if measuring and first:
                after_forward = _current()
            if host is not None and offload_streams:
                host.watch(loss)
            loss.backward()
            if offload_trl:
                host.__exit__(None, None, None)
            if logits is None:  # Trainer.training_step returns loss.detach(): the graph (and what it holds) goes before the step
                loss = loss.detach()
        if measuring:
            result["grads_bytes"] = state_bytes(p.grad for p in params)
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
        elif set_to_none:
            for p in params:
                p.grad = None
        else:
            for p in params:
                p.grad.zero_()
        del loss, logits, input_ids, labels, extra
        if measuring:
            dynamic_peak = _peak() - start
            result["activations_bytes"] = after_forward - start
            result["end_balance"] = _current() - start - (net.held_bytes() if sharded else 0)

    result["params_bytes"] = state_bytes(all_params) + tensor_bytes(getattr(model, "quant_tensors", []))
    result["buffers_bytes"] = tensor_bytes(model.buffers())
    if isinstance(opt, MasterWeights):
        result["master_bytes"] = tensor_bytes(opt.masters)
        result["optimizer_bytes"] = tensor_bytes(opt.state_tensors())
    elif in_backward is not None:
        result["master_bytes"] = 0
        result["optimizer_bytes"] = tensor_bytes(in_backward.state_tensors())
    else:
        result["master_bytes"] = 0
        result["optimizer_bytes"] = tensor_bytes(optimizer_state(opt)) if opt is not None else 0
    # The resident state as tensors: on CPU, oneDNN keeps caches of its own
    # (bf16 matmul) that are heap memory but no tensor, allocated at the
    # first step and constant after; they are reported, not counted.
    resident = sum(result[k] for k in ("params_bytes", "buffers_bytes", "master_bytes", "optimizer_bytes"))
    if not set_to_none:  # zero_grad(set_to_none=False): the zeroed gradients stay between steps
        resident += state_bytes(p.grad for p in params)
    if net is not model and not sharded:  # DDP's flat gradient buckets, as the Reducer reports them
        sizes = str(net._get_ddp_logging_data()["bucket_sizes"])
        result["bucket_bytes"] = sum(int(b) for b in sizes.split(",") if b.strip())
        resident += result["bucket_bytes"]
    result["resident_bytes"] = resident
    result["non_tensor_resident_bytes"] = start - base - resident
    result["peak_allocated_bytes"] = resident + dynamic_peak
    del model, net, opt, in_backward, params, all_params
    gc.collect()
    return result


def _rank(rank, world, case, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = measure(case, rank)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(result)


def measure_ddp(case, port):
    """Every rank of plain DDP is alike: rank 0's measurement."""
    world = case["recipe"]["dp"]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(world, case, port, queue), nprocs=world)
    return queue.get()


def main():
    torch.set_num_threads(1)
    cases = json.load(open(sys.argv[1]))
    for i, case in enumerate(cases):
        if case["recipe"].get("dp", 1) > 1 and case["recipe"].get("framework") != "fsdp2":
            result = measure_ddp(case, 29500 + (os.getpid() + i) % 2000)
        else:
            result = measure(case)
        print(json.dumps({"name": case.get("name", ""), **result}), flush=True)


if __name__ == "__main__":
    main()
