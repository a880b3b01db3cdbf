"""PyTorch 2.1-2.9's non-reentrant torch.utils.checkpoint, written out on
1.13's saved-tensor hooks so that the CPU harness can measure it (Debian's
PyTorch is 1.13, whose own use_reentrant=False has no early stop).

As torch/utils/checkpoint.py's _checkpoint_without_reentrant_generator does
it: the forward runs with grad enabled and every tensor autograd saves is a
_Holder (a weak reference kept in the frame); the arguments stay with the
frame, which the hooks of the saved variables reference, so they go with the
last of those. The first unpack reruns the function under grad; the k-th
tensor the rerun saves (detached) fills the k-th holder if it is alive, and
the rerun's own graph keeps it until the rerun ends; with early stop the rerun
raises once it has saved as many tensors as the forward did. Unpacking hands
the tensor over and drops the frame's reference to it. The call's tensors
are saved variables of a node off the backward path (_NoopSaveInputs), so
that save_on_cpu around the call packs them; the rerun gets them unpacked.

With context_fn (selective checkpointing, PyTorch 2.4+'s
create_selective_checkpoint_contexts, written out on 1.13's
TorchDispatchMode), the forward and the rerun run under the two modes of
selective_contexts.
"""
import contextlib
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode, _pop_mode_temporarily
from torch.utils._pytree import tree_map


class _Holder:
    __slots__ = ("handle", "__weakref__")

    def __init__(self):
        self.handle = None


class _Handle:
    __slots__ = ("__weakref__",)


class _StopRecomputation(Exception):
    pass


_SAVED = object()  # where a saved tensor goes back among the arguments


class _SaveInputs(torch.autograd.Function):
    """_NoopSaveInputs: the call's tensors as saved variables of a node off
    the backward path (a dummy that requires grad makes it), so that the
    hooks around the call (save_on_cpu) pack them."""

    @staticmethod
    def forward(ctx, dummy, *tensors):
        ctx.save_for_backward(*tensors)
        return torch.empty((0,))

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("never on the backward path")


def _detached(x):
    # _maybe_detach: a floating-point output is kept as a detached alias
    return x.detach() if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()) else x


class _Caching(TorchDispatchMode):
    """_CachingTorchDispatchMode (create_selective_checkpoint_contexts,
    PyTorch 2.4+): in the forward, the outputs of the ops the policy saves
    are kept, per op, in the order they come."""

    def __init__(self, policy, storage):
        super().__init__()
        self.policy, self.storage = policy, storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.policy(False, func, *args, **kwargs):
            self.storage.setdefault(func, []).append(tree_map(_detached, out))
        return out


class _Cached(TorchDispatchMode):
    """_CachedTorchDispatchMode: in the rerun, a saved op is not run again;
    its outputs are taken from the storage (popped: the storage lets go)."""

    def __init__(self, policy, storage):
        super().__init__()
        self.policy, self.storage = policy, storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.policy(True, func, *args, **kwargs):
            return self.storage[func].pop(0)
        return func(*args, **kwargs)


def subclass_op(func, fn, *args):
    """An op the selective policy sees as `func` while its work runs inside
    a tensor subclass's __torch_dispatch__, below the policy's mode:
    torchao's torch.mm on Float8TrainingTensor operands (float8_linear.py,
    matmul_with_hp_or_float8_args) reaches the mode as aten.mm.default, and
    the copies and torch._scaled_mm of its float8_mm are not seen. In the
    forward the output is saved if the policy says so; in the rerun a saved
    one is taken from the storage and fn does not run."""
    mode = _get_current_dispatch_mode()
    if not isinstance(mode, (_Caching, _Cached)):
        return fn(*args)
    rerun = isinstance(mode, _Cached)
    if mode.policy(rerun, func, *args):
        if rerun:
            return mode.storage[func].pop(0)
        with _pop_mode_temporarily():
            out = fn(*args)
        mode.storage.setdefault(func, []).append(_detached(out))
        return out
    with _pop_mode_temporarily():
        return fn(*args)


def selective_contexts(policy):
    """create_selective_checkpoint_contexts(policy_fn): the forward's and
    the rerun's modes over one storage, which lives as long as the frame.
    policy(is_recompute, func, *args, **kwargs) says whether func's outputs
    are saved (MUST_SAVE) or recomputed."""
    storage = {}
    return _Caching(policy, storage), _Cached(policy, storage)


class _Frame:
    def __init__(self, fn, args, early_stop):
        self.fn = fn
        # the positional tensors saved, the other arguments (a tuple) as they are
        self.others = [_SAVED if torch.is_tensor(a) else a for a in args]
        dummy = torch.empty((0,), requires_grad=True)
        self.input_saver = _SaveInputs.apply(dummy, *[a for a in args if torch.is_tensor(a)])
        self.early_stop = early_stop
        self.weak_holders = []
        self.recomputed = weakref.WeakKeyDictionary()
        self.counter = 0
        self.is_recomputed = False


def checkpoint(fn, *args, early_stop=True, context_fn=None):
    if not torch.is_grad_enabled():
        return fn(*args)
    frame = _Frame(fn, args, early_stop)
    forward_context, recompute_context = context_fn() if context_fn else (None, None)

    def pack(x):
        holder = _Holder()
        frame.weak_holders.append(weakref.ref(holder))
        return holder

    def recompute_pack(x):
        x = x.detach() if x.requires_grad else x
        index = frame.counter
        frame.counter += 1
        holder = frame.weak_holders[index]()
        if holder is not None:
            holder.handle = _Handle()
            frame.recomputed[holder.handle] = x
        if frame.early_stop and frame.counter == len(frame.weak_holders):
            raise _StopRecomputation
        return x

    def unpack(holder):
        if not frame.is_recomputed:
            saved = iter(frame.input_saver.grad_fn.saved_tensors)
            args = [next(saved) if a is _SAVED else a for a in frame.others]
            try:
                with torch.autograd.graph.saved_tensors_hooks(recompute_pack, lambda x: x), torch.enable_grad(), \
                        recompute_context or contextlib.nullcontext():
                    frame.fn(*args)
            except (_StopRecomputation, RuntimeError) as stop:
                # 1.13 hands an exception raised in a pack hook back as a
                # RuntimeError that names it
                if not isinstance(stop, _StopRecomputation) and "_StopRecomputation" not in str(stop):
                    raise
            frame.is_recomputed = True
        tensor = frame.recomputed[holder.handle]
        holder.handle = None
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack), forward_context or contextlib.nullcontext():
        return fn(*args)
