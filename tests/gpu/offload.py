"""OffloadActivations for the GPU check, written from the rules of
torchtune's (torchtune/training/_activation_offloading.py, 0.4-0.6) and of
TRL's copy as it is from 1.8 (trl/models/activation_offloading.py at
c26ba878), which the engine models (`offload_torchtune`, `offload_streams`,
`offload_trl`; docs/how-it-works.md, "Activation offload"). Neither library
is installed on the GPU machine, so the check brings its own; the CPU twin
of the same rules is tests/torch/harness.py's SaveOnHost.

What both do with a tensor autograd saves (each save is a pack, numbered):
- a parameter, or fewer than 1024 bytes, stays where it is;
- otherwise its elements are copied to pinned host memory, with streams on
  a stream of its own, and the GPU tensor is kept (the forward's stash)
  until an offloaded pack five packs later; backward takes it as it is if
  it is still there, and otherwise brings the host copy back on that
  stream, keeping it until a later node that brings one back has run;
- torchtune's host copy is torch.empty_like (a dense tensor keeps its
  strides, no GPU copy).
TRL's, besides:
- a save whose storage (pointer plus offset, dtype) the stash tracks stays
  on the GPU, and the key then follows that save (streams only);
- a tensor whose storage is one of the model's parameters' stays;
- a non-contiguous tensor, or one at an offset, is copied .contiguous()
  first on the side stream, and the stash keeps that copy; a broadcast
  tensor's storage goes as it is and comes back viewed as_strided.
What this leaves out (the engine too): record_stream when a node's output
aliases what it brought back.
"""
import torch


def _key(t):
    return t.untyped_storage().data_ptr() + t.storage_offset(), t.dtype


class Offload(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, model, streams=True, trl=False, min_bytes=1024, window=5):
        self.streams, self.trl = streams, trl
        self.packs = 0
        self.fwd = {}       # pack -> (GPU tensor kept, its copy's event), oldest first
        self.back = {}      # pack -> tensor brought back
        self.events = {}    # pack -> the compute stream's event after its node
        self.keys, self.key_of = {}, {}
        self.node = None
        self.queued = False
        self.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.s0 = torch.cuda.default_stream()
        self.s1 = torch.cuda.Stream() if streams else self.s0

        def track(key, pack):
            self.keys[key] = pack
            self.key_of[pack] = key

        def release(pack):
            key = self.key_of.pop(pack, None)
            if key is not None and self.keys.get(key) == pack:
                del self.keys[key]

        self.release = release

        def pack(t):
            self.packs += 1
            n = self.packs
            key = _key(t)
            if trl and key in self.keys:
                track(key, n)
                return t
            if isinstance(t, torch.nn.Parameter) or t.numel() * t.element_size() < min_bytes or t.device.type != "cuda":
                return t
            if trl and t.untyped_storage().data_ptr() in self.param_storages:
                return t
            if streams:
                for old in list(self.fwd):
                    if old > n - window:
                        break
                    self.s0.wait_event(self.fwd.pop(old)[1])
                    release(old)
                self.s1.wait_stream(self.s0)
            layout = None
            with torch.cuda.stream(self.s1):
                if trl and 0 in t.stride():  # the storage's raw elements
                    size = t.untyped_storage().size() // t.element_size()
                    host = torch.empty(size, dtype=t.dtype, pin_memory=True)
                    host.copy_(torch.as_strided(t, (size,), (1,), 0), non_blocking=True)
                    layout = (t.shape, t.stride(), t.storage_offset())
                else:
                    if trl and (not t.is_contiguous() or t.storage_offset() != 0):
                        t = t.clone(memory_format=torch.contiguous_format)
                    host = torch.empty_like(t, pin_memory=True, device="cpu")
                    host.copy_(t, non_blocking=True)
                    if trl:
                        layout = (t.shape, t.stride(), t.storage_offset())
            if streams:
                self.fwd[n] = (t, self.s1.record_event())
                if trl:
                    track(key, n)
            return n, host, layout

        def bring_back(host, layout):
            t = host.to("cuda", non_blocking=True)
            return torch.as_strided(t, *layout) if layout is not None else t

        def unpack(packed):
            if isinstance(packed, torch.Tensor):
                return packed
            n, host, layout = packed
            release(n)
            if not streams:
                return bring_back(host, layout)
            if not self.queued:  # the end of backward lets go of what is left
                self.queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._flush)
            node = torch._C._current_autograd_node()
            earlier = []
            if node is not self.node:
                self.node = node
                earlier = list(self.back)
            brought = n not in self.fwd
            if brought:
                with torch.cuda.stream(self.s1):
                    t = bring_back(host, layout)
                self.s0.wait_stream(self.s1)
                self.back[n] = t
            else:  # still in the forward's stash: as it is
                t = self.fwd[n][0]

            def after_node(grad_inputs, grad_outputs):
                if brought:
                    self.events[n] = self.s0.record_event()
                for old in list(self.fwd):
                    self.s0.wait_event(self.fwd.pop(old)[1])
                    release(old)
                for old in earlier:
                    event = self.events.pop(old, None)
                    if event is not None:
                        self.s1.wait_event(event)
                    self.back.pop(old, None)

            node.register_hook(after_node)
            return t

        super().__init__(pack, unpack)

    def _flush(self):
        for n in list(self.back):
            event = self.events.pop(n, None)
            if event is not None:
                self.s1.wait_event(event)
        self.back.clear()
        self.fwd.clear()
        self.keys.clear()
        self.key_of.clear()
        self.node = None
        self.queued = False
