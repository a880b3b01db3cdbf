"""FSDP2 (torch.distributed fully_shard, PyTorch 2.6) on one rank, written
out for the harness's PyTorch 1.13, which has no FSDP2: every decoder layer
one unit, the rest of the model (embeddings, final norm, head) the root's.
Only the allocations matter here, so the collectives move no data (the
harness measures rank 0 of `world` in one process: nothing crosses ranks);
every tensor they fill is made, kept and freed where FSDP2 makes, keeps and
frees it (torch/distributed/_composable/fsdp at the 2.6 branch cut:
_fsdp_param.py, _fsdp_param_group.py, _fsdp_collectives.py, _fsdp_state.py):

- a parameter's shard is ceil(dim 0 / world) rows (torch.chunk's), padded
  with zeros on every rank (new_zeros of the padded size), the sharded
  parameter a view of its true rows (FSDPParam._init_sharded_param);
- an all-gather makes the unit's flat output of world x the padded shards'
  sum in param_dtype (the 16-bit inputs first, cast into one flat tensor,
  freed as foreach_all_gather returns), then each parameter's own buffer of
  world x its padded shard, the unsharded parameter a view of it, copied
  out of the flat one (foreach_all_gather_copy_out); in forward the flat
  output stays until the next unit's copy-out (comm_ctx.all_gather_state),
  in backward it goes at once;
- resharding frees the parameters' buffers' storage (resize to 0): what
  autograd saved of them keeps the storage object, emptied;
- the pre-backward hook (on the unit's outputs) gathers the unit again and
  prefetches the unit that ran before it in forward (its flat output only);
- the post-backward (RegisterPostBackwardFunction on the unit's inputs)
  takes the unsharded gradients off the parameters, reshards, frees the
  previous unit's reduce-scatter input, makes its own (world x the padded
  shards, reduce_dtype), copies the gradients in, frees them, makes the
  reduce-scatter output (the padded shards) whose views become the sharded
  parameters' .grad (or are added to it); the input stays until the next
  unit's (comm_ctx.reduce_scatter_state);
- the root is never resharded after forward (FSDPState._lazy_init); its
  post-forward drops the forward's last flat output; its gradients are
  reduced in the final callback of backward, which then frees the last
  reduce-scatter input.

A reentrant checkpoint's rerun inside backward runs the unit's forward
hooks again. From PyTorch 2.10 (pytorch#164009, is_bw()) its post-forward
neither reshards nor records its place; before (rerun_reshards) it did
both: the unit's pre-backward then gathers it again and prefetches the unit
recorded before the rerun (post_forward_order with multiplicity, each unit
popping its last place), for the rerun of a block whose backward is done
already (a mistargeted prefetch), whose flat output stays until the final
callback (finalize_backward)."""
import torch
from torch import nn
from torch.autograd import Variable


class Comm:
    """FSDPCommContext: the buffers that outlive their collective."""

    def __init__(self):
        self.all_gather_state = None
        self.reduce_scatter_state = None
        self.post_forward_order = []
        self.in_backward = False  # torch._C._current_graph_task_id() != -1
        self.rerun_reshards = False  # PyTorch before 2.10


class Param:
    def __init__(self, module, name, world, param_dtype):
        full = module._parameters[name]
        self.module, self.name, self.world = module, name, world
        self.shape, self.numel, self.orig_dtype = full.shape, full.numel(), full.dtype
        rows = -(-full.shape[0] // world)
        rest = self.numel // full.shape[0]
        self.padded = rows * rest
        local = min(rows, full.shape[0]) * rest
        self.data = full.new_zeros(self.padded)  # _sharded_param_data
        with torch.no_grad():
            self.data[:local].copy_(full.detach().reshape(-1)[:local])
        self.sharded = nn.Parameter(self.data[:local].view(min(rows, full.shape[0]), *full.shape[1:]),
                                    requires_grad=full.requires_grad)
        self.key = getattr(full, "vp_key", None)  # the harness's name for a LoRA layer's weight
        if self.key is not None:
            self.sharded.vp_key = self.key
        self.aliases = []  # (module, name) of the modules that share it (tied embeddings)
        module._parameters[name] = self.sharded  # the full one goes with its last reference
        del full
        self.dtype = param_dtype or self.orig_dtype
        self.output = None  # all_gather_outputs[0]
        self.unsharded = None

    def alloc(self):
        """init_all_gather_outputs the first time, alloc_all_gather_outputs after."""
        if self.output is None:
            self.output = torch.empty(self.world * self.padded, dtype=self.dtype)
            self.unsharded = nn.Parameter(self.output[:self.numel].view(self.shape),
                                          requires_grad=self.sharded.requires_grad)
            if self.key is not None:
                self.unsharded.vp_key = self.key
        else:
            self.output.storage().resize_(self.world * self.padded)

    def _set(self, param):
        for module, name in [(self.module, self.name)] + self.aliases:
            module._parameters[name] = param

    def free(self):
        self.output.storage().resize_(0)
        self._set(self.sharded)

    def to_unsharded(self):
        self._set(self.unsharded)


class RegisterPostBackward(torch.autograd.Function):
    """RegisterPostBackwardFunction: its backward runs once the unit's inputs' gradients are made."""

    @staticmethod
    def forward(ctx, group, *inputs):
        ctx.group = group
        return inputs

    @staticmethod
    def backward(ctx, *grads):
        ctx.group.post_backward()
        return (None,) + grads


class Group:
    """An FSDPParamGroup with its unit's hooks."""

    def __init__(self, owned, world, comm, param_dtype, reduce_dtype, reshard_after_forward, root=False):
        self.world, self.comm, self.root = world, comm, root
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
        self.reshard_after_forward = reshard_after_forward and not root
        self.params = []
        first = {}  # a shared parameter: one FSDPParam, set on every module that holds it
        for m, n in owned:
            p = m._parameters[n]
            if id(p) in first:
                first[id(p)].aliases.append((m, n))
                m._parameters[n] = first[id(p)].sharded
                continue
            param = Param(m, n, world, param_dtype)
            first[id(p)] = param
            self.params.append(param)
        self.result = None  # _all_gather_result
        self.unsharded = False
        self.in_backward = False
        self.indices = []  # its places in post_forward_order (_post_forward_indices)

    def unshard(self):
        if self.result is not None or self.unsharded:
            return
        sizes = [p.padded for p in self.params]
        total = sum(sizes)
        with torch.no_grad():
            if self.param_dtype is not None:  # _get_param_all_gather_inputs' flat_foreach_copy_input
                cast = torch.empty(total, dtype=self.param_dtype)
                inputs = list(torch.split(cast, sizes))
                for dst, p in zip(inputs, self.params):
                    dst.copy_(p.data)
            else:
                inputs = [p.data for p in self.params]
            flat = torch.empty(self.world * total, dtype=self.params[0].dtype)
            for dst, src in zip(torch.split(flat.narrow(0, 0, total), sizes), inputs):
                dst.copy_(src)
            del inputs
            if self.param_dtype is not None:
                del cast
        self.result = flat

    def wait_for_unshard(self, forward):
        if self.result is None:
            return
        flat, self.result = self.result, None
        if forward:
            self.comm.all_gather_state = None
        total = sum(p.padded for p in self.params)
        rows = flat.view(self.world, total)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.alloc()
                # through .data: no version bump for what autograd saved of it
                # (FSDP2: torch.autograd._unsafe_preserve_version_counter)
                p.output.data.view(self.world, p.padded).copy_(rows[:, offset:offset + p.padded])
                offset += p.padded
        del rows
        for p in self.params:
            p.to_unsharded()
        self.unsharded = True
        if forward:
            self.comm.all_gather_state = flat

    def reshard(self):
        if not self.unsharded:
            return
        for p in self.params:
            p.free()
        self.unsharded = False

    def pre_forward(self, args):
        if self.in_backward:  # a checkpoint's rerun inside backward: FSDPState._pre_forward returns
            return args
        self.unshard()
        self.wait_for_unshard(forward=True)
        grads = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad]
        if not grads:
            return args
        passed = RegisterPostBackward.apply(self, *(args[i] for i in grads))
        args = list(args)
        for i, t in zip(grads, passed):
            args[i] = t
        return tuple(args)

    def post_forward(self, outputs):
        if self.in_backward:  # likewise _post_forward
            return
        # a reentrant checkpoint's rerun inside backward neither reshards nor
        # records its place (FSDPParamGroup.post_forward's is_bw(), PyTorch
        # 2.10: pytorch#164009), before 2.10 it did both; its outputs get the
        # pre-backward hook
        if not self.comm.in_backward or self.comm.rerun_reshards:
            if self.reshard_after_forward:
                self.reshard()
            self.indices.append(len(self.comm.post_forward_order))
            self.comm.post_forward_order.append(self)
        for t in outputs:
            if torch.is_tensor(t) and t.requires_grad:
                t.register_hook(self._pre_backward_hook)

    def _pre_backward_hook(self, grad):
        self.pre_backward()

    def pre_backward(self):
        self.comm.in_backward = True
        if self.in_backward:
            return
        self.in_backward = True
        self.unshard()
        self.wait_for_unshard(forward=False)
        if self.indices:  # _backward_prefetch: the unit recorded before its last place
            target = self.indices.pop() - 1
            if target >= 0:
                self.comm.post_forward_order[target].unshard()

    def post_backward(self):
        self.in_backward = False
        with torch.no_grad():
            owned = [p for p in self.params if p.unsharded is not None and p.unsharded.grad is not None]
            grads = []
            for p in owned:
                grads.append(p.unsharded.grad)
                p.unsharded.grad = None
            self.reshard()
            if not owned:  # nothing to reduce: the last unit's input stays
                return
            self.comm.reduce_scatter_state = None
            total = sum(p.padded for p in owned)
            dtype = self.reduce_dtype or grads[0].dtype
            rs_input = torch.empty(self.world * total, dtype=dtype)  # foreach_reduce
            rows = rs_input.view(self.world, total)
            offset = 0
            for p, g in zip(owned, grads):  # _chunk_cat: each rank's rows, zero-padded
                flat = g.reshape(-1)
                for r in range(self.world):
                    start = min(r * p.padded, p.numel)
                    n = min(p.padded, p.numel - start)
                    rows[r, offset:offset + n].copy_(flat[start:start + n])
                    rows[r, offset + n:offset + p.padded].zero_()
                offset += p.padded
                del flat
            del rows, g
            grads.clear()
            rs_output = torch.empty(total, dtype=dtype)  # reduce_output (the collective fills it)
            rs_output.copy_(rs_input[:total])
            if dtype != owned[0].orig_dtype:
                rs_output = rs_output.to(owned[0].orig_dtype)
            offset = 0
            for p in owned:
                view = rs_output.narrow(0, offset, p.sharded.numel()).view(p.sharded.shape)
                if p.sharded.grad is None:
                    p.sharded.grad = view
                else:
                    p.sharded.grad += view
                offset += p.padded
            del rs_output, view
            self.comm.reduce_scatter_state = rs_input


def owned(module, skip=()):
    """(module, name) of each parameter under `module` but those in `skip`,
    a shared one (tied embeddings) once for each module that holds it."""
    return [(m, n) for m in module.modules() for n, p in m._parameters.items() if p is not None and id(p) not in skip]


class FullyShard(nn.Module):
    """The root: fully_shard(layer) for each decoder layer, then fully_shard(model)."""

    def __init__(self, model, layers, world, param_dtype=None, reduce_dtype=None, reshard_after_forward=True,
                 rerun_reshards=False):
        super().__init__()
        self.model = model
        self.convert_outputs = None  # outputs -> outputs, run before the root's post-forward
        self.comm = Comm()
        self.comm.rerun_reshards = rerun_reshards
        self.groups = []
        for layer in layers:
            group = Group(owned(layer), world, self.comm, param_dtype, reduce_dtype, reshard_after_forward)
            layer.register_forward_pre_hook(lambda m, args, g=group: g.pre_forward(args))
            layer.register_forward_hook(
                lambda m, args, out, g=group: g.post_forward(out if isinstance(out, tuple) else (out,)))
            self.groups.append(group)
        # the root owns what no layer does
        held = {id(q.sharded) for g in self.groups for q in g.params}
        self.root = Group(owned(model, held), world, self.comm, param_dtype, reduce_dtype, reshard_after_forward,
                          root=True)

    def held_bytes(self):
        """What the step leaves held beyond the model's states: a reentrant
        checkpoint's last rerun all-gather output (comm_ctx.all_gather_state)."""
        state = self.comm.all_gather_state
        return 0 if state is None else state.numel() * state.element_size()

    def forward(self, *args, **kwargs):
        self.comm.post_forward_order = []
        for g in self.groups + [self.root]:
            g.indices = []
        self.root.pre_forward(args)
        outputs = self.model(*args, **kwargs)
        if self.convert_outputs is not None:  # accelerate's wrapper of the module's own forward
            outputs = self.convert_outputs(outputs)
        self.root.post_forward([t for t in outputs if torch.is_tensor(t)])
        self.comm.all_gather_state = None
        for t in outputs:
            if torch.is_tensor(t) and t.requires_grad:
                t.register_hook(self._queue_final_callback)
        return outputs

    def _queue_final_callback(self, grad):
        if not getattr(self, "_queued", False):
            self._queued = True
            Variable._execution_engine.queue_callback(self._final_callback)

    def _final_callback(self):
        """_root_post_backward_final_callback: the root's reduce-scatter, then the last input freed."""
        self._queued = False
        # every state in order, the root's first: a post-backward the autograd
        # graph did not run (a block whose input needs no gradient: LoRA's first
        # block), then finalize_backward (a mistargeted prefetch goes)
        for g in [self.root] + self.groups:
            if g is self.root or g.in_backward:
                g.post_backward()
            g.result = None
        self.comm.in_backward = False
        self.comm.reduce_scatter_state = None
