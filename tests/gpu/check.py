"""The GPU check: run on a machine with CUDA. Trains each configuration of
cases.json for three steps with real torch.autocast and CUDA kernels (SDPA
where a config's _attn_implementation asks for it: PyTorch 2.x), and
prints torch.cuda.max_memory_allocated(), memory_reserved() and the device's
used memory beside the engine's figures (expected.json, made by prepare.sh).
It also prints the CUDA context (the device's used memory the caching
allocator does not hold) after initialisation and after the cases: the
figure behind cuda_context_mib, for this GPU generation and CUDA release.

    python3 tests/gpu/check.py
"""
import contextlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from models import Autocast, BertForSequenceClassification, CausalLM, add_lora  # noqa: E402


def run(case):
    cfg, rec = case["config"], case["recipe"]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    # the mirrors make their masks, positions and rotary tables without a
    # device argument, as transformers makes them on the inputs' device
    torch.set_default_device(dev)  # PyTorch 2.x, which the check needs (SDPA)
    dtype = torch.bfloat16 if rec["precision"] in ("bf16", "mixed-bf16") else torch.float32
    classifier = cfg["model_type"] == "bert"
    model = (BertForSequenceClassification(cfg) if classifier else CausalLM(cfg)).to(dev, dtype)
    model.train()
    ac = Autocast(None)  # real autocast below
    if rec.get("finetune") == "lora":  # LoRA or DoRA (use_dora): fp32 adapters, as PEFT's autocast_adapter_dtype
        add_lora(model, ac, rec, torch.float32)
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-4, foreach=rec["optimizer_impl"] == "foreach")
    ckpt = None
    if rec.get("checkpointing") == "full":
        reentrant = str(rec.get("use_reentrant", "true")) == "true"  # False: 2.x's own, early stop on

        def ckpt(fn, *args):
            return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=reentrant)
    b, s = rec["micro_batch"], rec["seq_len"]
    for step in range(3):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(cfg["vocab_size"], (b, s), device=dev)
        labels = torch.randint(cfg.get("num_labels", 2), (b,), device=dev) if classifier else ids.clone()
        low = torch.float16 if rec["precision"] == "amp-fp16" else torch.bfloat16
        offload = str(rec.get("offload_activations", "false")) == "true"
        with torch.autocast("cuda", dtype=low, enabled=rec["precision"].startswith("amp-")), \
                torch.autograd.graph.save_on_cpu(pin_memory=True) if offload else contextlib.nullcontext():
            loss, logits = model(ac, ids, labels, ckpt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, logits, ids, labels
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    result = {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
              "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
              "device_used_bytes": total - free}
    del model, opt
    return result


def context_bytes():
    """The device's used memory that the caching allocator does not hold:
    the CUDA context and the kernels loaded so far (on a device no other
    process uses)."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def print_context(when, nbytes):
    # the figure vramplan's cuda_context_mib stands for (docs/how-it-works.md,
    # "Runtime"): one line per GPU generation, with what sets it
    major, minor = torch.cuda.get_device_capability()
    print(f"cuda context {when}: {nbytes} bytes ({nbytes / 2**20:.1f} MiB) on {torch.cuda.get_device_name()} "
          f"(sm_{major}{minor}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', '(unset: LAZY since CUDA 12.2)')}",
          flush=True)


def main():
    cases = json.load(open(os.path.join(HERE, "cases.json")))
    expected = {e["name"]: e["per_gpu"] for e in json.load(open(os.path.join(HERE, "expected.json")))}
    torch.zeros(1, device="cuda")  # the context, and nothing else yet
    print_context("after init", context_bytes())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'case':30} {'figure':22} {'measured':>14} {'vramplan':>14} {'ratio':>7}")
    for case in cases:
        m = run(case)
        e = expected[case["name"]]
        for key, ekey in (("peak_allocated_bytes", "peak_allocated_bytes"),
                          ("peak_reserved_bytes", "peak_reserved_bytes"),
                          ("device_used_bytes", "peak_total_bytes")):
            print(f"{case['name']:30} {key:22} {m[key]:>14} {e[ekey]:>14} {e[ekey] / m[key]:7.3f}", flush=True)
    # after training: the kernels the cases loaded (cuBLAS, SDPA, AdamW's) on top
    print_context("after the cases", context_bytes())


if __name__ == "__main__":
    main()
