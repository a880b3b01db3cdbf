"""vramplan's field kit: measure a real training step and write what
`vramplan compare MEASURED.json` puts beside the estimate.

Around your own training step (on the GPU it runs on):

    import sys; sys.path.insert(0, "path/to/vramplan/tools")
    from measure import Measure

    m = Measure("measured.json", model="llama3-8b", gpu="h100-80gb",
                recipe={"precision": "amp-bf16", "micro_batch": 4, "seq_len": 2048})
    for step in range(3):                      # measure a steady step (the third)
        with m.step(measuring=step == 2):
            loss = model(**batch).loss
            loss.backward()
            m.after_backward(model)            # the gradients at their peak
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    m.write(model, optimizer)

`model`, `recipe` and `gpu` are what vramplan needs to estimate the same run
(a model name or file, recipe keys as `--set` takes them, a GPU name); the
file also records what was measured and the environment.

What is recorded:
- on CUDA: torch.cuda.max_memory_allocated and max_memory_reserved over the
  measured step (the peak statistics are reset when it starts), the caching
  allocator's retries and out-of-memory count (torch.cuda.memory_stats), the
  device's used memory as nvidia-smi reports it at the step's end, the
  device name, PyTorch's and CUDA's versions, and the allocator's options
  (PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF, which `vramplan compare`
  applies as the recipe's alloc_conf);
- on any device: the resident tensors by category, counted from the
  tensors themselves: parameters, buffers, gradients (after backward) and
  the optimizer's states (the per-parameter `step` counters left out: they
  live on the host on a CUDA run);
- which of Liger-Kernel's modules the model runs (its RMSNorm and its
  SwiGLU / GEGLU MLPs and experts, swapped in as classes or as bound
  forwards), which `vramplan compare` applies as liger_rms_norm and
  liger_swiglu, and whether the attention's q_norm / k_norm modules are
  Liger's (a patch made before the model was built swaps their class too:
  liger_before_load);
- whether accelerate wrapped the model's forward in its
  convert_outputs_to_fp32 (the Trainer's fp16 / bf16 under native amp),
  which `vramplan compare` applies as outputs_fp32.
"""
import contextlib
import json
import os
import subprocess

import torch

FORMAT = "vramplan-measured-1"


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def optimizer_state_bytes(optimizer):
    if optimizer is None:
        return 0
    return tensor_bytes(v for state in optimizer.state.values() for k, v in state.items()
                        if torch.is_tensor(v) and k != "step")


def liger_modules(model):
    """Liger-Kernel's patches found in the model: a module of a Liger class,
    or one whose forward is a Liger module's (its instance patching binds
    LigerRMSNorm.forward, LigerSwiGLUMLP.forward, ... to transformers'
    modules). Returns {"rms_norm": bool, "swiglu": bool}, and "qk_norms":
    bool where the model has q_norm / k_norm modules."""
    found = {"rms_norm": False, "swiglu": False}
    for path, module in model.named_modules():
        names = [type(module).__name__]
        forward = getattr(module, "forward", None)
        qualname = getattr(getattr(forward, "__func__", forward), "__qualname__", "")
        names.append(qualname.split(".")[0])
        if path.rsplit(".", 1)[-1] in ("q_norm", "k_norm"):
            found["qk_norms"] = found.get("qk_norms", False) or any(n.startswith("Liger") for n in names)
        for name in names:
            if not name.startswith("Liger"):
                continue
            if "RMSNorm" in name:
                found["rms_norm"] = True
            elif "GLU" in name or "Experts" in name or "BlockSparseTop2MLP" in name:
                found["swiglu"] = True
    return found


def accelerate_converts_outputs(model):
    """Whether accelerate's prepare_model wrapped the forward of the model
    (or of the module a DistributedDataParallel holds) in
    convert_outputs_to_fp32: a function whose __wrapped__ is a
    ConvertOutputsToFp32 (accelerate/utils/operations.py)."""
    for m in (model, getattr(model, "module", None)):
        forward = getattr(m, "forward", None)
        fn = getattr(forward, "__func__", forward)
        if type(getattr(fn, "__wrapped__", None)).__name__ == "ConvertOutputsToFp32":
            return True
    return False


def nvidia_smi_used_bytes(index):
    """The device's used memory as nvidia-smi reports it (MiB), or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                              "-i", str(index)], capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.strip().splitlines()[0]) * (1 << 20)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class Measure:
    def __init__(self, path, model, recipe=None, gpu=None, device=None):
        self.path = path
        self.setup = {"model": model, "recipe": dict(recipe or {}), "gpu": gpu}
        self.device = torch.device(device) if device else (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
        self.measured = {}

    @contextlib.contextmanager
    def step(self, measuring=True):
        """The training step; with measuring, its peaks are recorded."""
        cuda = self.device.type == "cuda"
        if measuring and cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        yield
        if measuring and cuda:
            torch.cuda.synchronize(self.device)
            stats = torch.cuda.memory_stats(self.device)
            self.measured.update({
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(self.device),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(self.device),
                "alloc_retries": stats.get("num_alloc_retries", 0),
                "ooms": stats.get("num_ooms", 0),
                "nvidia_smi_used_bytes": nvidia_smi_used_bytes(self.device.index or 0),
            })

    def after_backward(self, model):
        """Call right after loss.backward(): the gradients at their peak."""
        self.measured["grads_bytes"] = tensor_bytes(p.grad for p in model.parameters())

    def result(self, model, optimizer=None):
        """What write() saves: the setup, the measurement, the environment."""
        measured = dict(self.measured)
        measured["params_bytes"] = tensor_bytes(model.parameters())
        measured["buffers_bytes"] = tensor_bytes(model.buffers())
        measured["optimizer_bytes"] = optimizer_state_bytes(optimizer)
        env = {"torch": torch.__version__, "device": str(self.device), "liger": liger_modules(model),
               "outputs_fp32": accelerate_converts_outputs(model)}
        if self.device.type == "cuda":
            env["cuda"] = torch.version.cuda
            env["device_name"] = torch.cuda.get_device_name(self.device)
            # the caching allocator's options (PYTORCH_ALLOC_CONF, read first since PyTorch 2.9)
            conf = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
            if conf:
                env["alloc_conf"] = conf
        return {"format": FORMAT, "vramplan": self.setup, "measured": measured, "environment": env}

    def write(self, model, optimizer=None):
        with open(self.path, "w") as f:
            json.dump(self.result(model, optimizer), f, indent=1, sort_keys=True)
            f.write("\n")
