"""The GPU check: run on a machine with CUDA. Trains each configuration of
cases.json for three steps with real torch.autocast and CUDA kernels (SDPA
where a config's _attn_implementation asks for it: PyTorch 2.x), and
prints torch.cuda.max_memory_allocated(), memory_reserved() and the device's
used memory beside the engine's figures (expected.json, made by prepare.sh).
It also prints the CUDA context (the device's used memory the caching
allocator does not hold) after initialisation and after the cases: the
figure behind cuda_context_mib, for this GPU generation and CUDA release.
Each case is measured through the field kit (tools/measure.py), and its
third step is timed with CUDA events; three more steps are timed without
the kit or a trace (step_seconds_clean, and the host's share,
host_seconds_clean).

    python3 tests/gpu/check.py [--out FILE] [--cases TEXT] [--compile] [--trace DIR]

--out writes every case's measurement (the field kit's record, the step
time, the context) as JSON; --cases keeps the cases whose name holds TEXT
(given again: any of them);
--compile compiles each decoder layer (nn.Module.compile, as torchtune's
compile_model does); --trace records the measured step's allocations and
frees (size, stream, the harness's own frames, address) of every case kept
into DIR/trace_N.json.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from measure import Measure  # noqa: E402
from models import Autocast, BertForSequenceClassification, CausalLM, add_lora  # noqa: E402
from offload import Offload  # noqa: E402


def compact_trace(snapshot):
    """The allocator's events of the recorded step: action, size, stream,
    the innermost frames of the harness's models (or torch's own), address."""
    events = []
    for e in snapshot["device_traces"][0]:
        frames = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in e.get("frames", [])
                  if "tests/torch" in f["filename"] or "/torch/" in f["filename"]][:4]
        events.append([e["action"], e["size"], e.get("stream", 0), frames, e.get("addr", 0)])
    return events


def ckpt_reentrant(rec):
    return rec.get("checkpointing") == "full" and str(rec.get("use_reentrant", "true")) == "true"


def run(case, compile_layers=False, trace=False):
    cfg, rec = case["config"], case["recipe"]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    # the mirrors make their masks, positions and rotary tables without a
    # device argument, as transformers makes them on the inputs' device
    torch.set_default_device(dev)  # PyTorch 2.x, which the check needs (SDPA)
    dtype = torch.bfloat16 if rec["precision"] in ("bf16", "bf16-autocast", "mixed-bf16") else torch.float32
    classifier = cfg["model_type"] == "bert"
    if rec.get("transformers_version"):  # the sdpa path of that release (models/llama_blocks.py)
        cfg = dict(cfg, _transformers_version=rec["transformers_version"])
    model = (BertForSequenceClassification(cfg) if classifier else CausalLM(cfg)).to(dev, dtype)
    model.train()
    ac = Autocast(None)  # real autocast below
    if rec.get("finetune") == "lora":  # LoRA or DoRA (use_dora): fp32 adapters, as PEFT's autocast_adapter_dtype
        add_lora(model, ac, rec, torch.float32)
    if rec.get("finetune") == "lora" and ckpt_reentrant(rec):
        # PEFT's enable_input_require_grads: reentrant checkpoints need an input that requires grad
        model.model.embed_tokens.register_forward_hook(lambda module, inputs, output: output.requires_grad_(True))
    if compile_layers:  # torchtune's compile_model: each decoder layer compiled on its own
        for layer in model.model.layers:
            layer.compile()
    trained = [p for p in model.parameters() if p.requires_grad]
    impl = rec["optimizer_impl"]
    opt = torch.optim.AdamW(trained, lr=1e-4, foreach=impl == "foreach", fused=impl == "fused")
    kit = Measure(None, model=case["name"], recipe=rec, gpu="h200")
    # what building the model in fp32 and casting it left cached would stay
    # reserved through the steps: the engine's steady step starts from the
    # resident state alone (the H200 run of 2026-12-04 did not free it, and
    # one case reserved 13.64 GB in one process, 14.98 GB in another)
    torch.cuda.synchronize()
    reserved_after_build = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ckpt = None
    if rec.get("checkpointing") == "full":
        reentrant = ckpt_reentrant(rec)  # False: 2.x's own, early stop on

        def ckpt(fn, *args):
            # the default device again inside: a reentrant checkpoint runs
            # fn in a Function's forward, where set_default_device's mode is
            # popped (Gemma 2's masks were made on the CPU there)
            def on_device(*inner):
                with torch.device(dev):
                    return fn(*inner)
            return torch.utils.checkpoint.checkpoint(on_device, *args, use_reentrant=reentrant)
    b, s = rec["micro_batch"], rec["seq_len"]
    low = torch.float16 if rec["precision"] == "amp-fp16" else torch.bfloat16
    offload = str(rec.get("offload_activations", "false")) == "true"
    # OffloadActivations (offload.py): torchtune's around the forward, its
    # head and chunked loss outside; TRL's around forward, loss and
    # backward, lm_head alone outside
    tune = offload and str(rec.get("offload_torchtune", "false")) == "true"
    trl = tune and str(rec.get("offload_trl", "false")) == "true"
    streams = tune and str(rec.get("offload_streams", "false")) == "true"
    if not classifier:
        model.loss = rec.get("loss", "cross-entropy")
        model.loss_chunks = int(rec.get("loss_chunks", 8))
        model.head_outside_hooks = tune and not trl
        model.head_noop_hooks = trl

    def train_step(after_backward=None):
        ids = torch.randint(cfg["vocab_size"], (b, s), device=dev)
        labels = torch.randint(cfg.get("num_labels", 2), (b,), device=dev) if classifier else ids.clone()
        hooks = Offload(model, streams=streams, trl=trl) if tune else None
        if trl:
            hooks.__enter__()
        around_forward = torch.autograd.graph.save_on_cpu(pin_memory=True) if offload and not tune \
            else hooks if tune and not trl else contextlib.nullcontext()
        with torch.autocast("cuda", dtype=low, enabled=rec["precision"].startswith("amp-")
                            or rec["precision"].endswith("-autocast")), around_forward:
            loss, logits = model(ac, ids, labels, ckpt)
        loss.backward()
        if trl:
            hooks.__exit__(None, None, None)
        if after_backward:
            after_backward(model)
        opt.step()
        opt.zero_grad(set_to_none=True)

    events = None
    for step in range(3):
        measuring = step == 2
        if measuring and trace:
            torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
        with kit.step(measuring=measuring):
            if measuring:
                start.record()
            train_step(kit.after_backward if measuring else None)
            if measuring:
                end.record()
        if measuring and trace:
            events = compact_trace(torch.cuda.memory._snapshot())
            torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    record = kit.result(model, opt)
    result = {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
              "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
              "device_used_bytes": total - free,
              "step_seconds": start.elapsed_time(end) / 1000,
              "reserved_after_build_bytes": reserved_after_build,
              "field_kit": record}
    if events is not None:
        result["trace"] = events
    # the step time again without the field kit or a memory trace (the
    # measured step above has both): three steps after a synchronize, each
    # timed on the GPU (CUDA events) and on the host (the Python loop's
    # launches, up to the last one), the medians kept. A step whose host time
    # is near its GPU time is launch-bound: the engine's step time has no
    # per-kernel host cost yet (docs/step-time.md), and these are the
    # figures to fit one to.
    clean = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        train_step()
        end.record()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        clean.append((start.elapsed_time(end) / 1000, host))
    result["step_seconds_clean"] = sorted(c[0] for c in clean)[1]
    result["host_seconds_clean"] = sorted(c[1] for c in clean)[1]
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--cases", action="append", default=[])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--trace")
    args = ap.parse_args()
    cases = [c for c in json.load(open(os.path.join(HERE, "cases.json")))
             if not args.cases or any(text in c["name"] for text in args.cases)]
    expected = {e["name"]: e["per_gpu"] for e in json.load(open(os.path.join(HERE, "expected.json")))}
    torch.zeros(1, device="cuda")  # the context, and nothing else yet
    context_init = context_bytes()
    print_context("after init", context_init)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}, compile={args.compile}")
    print(f"{'case':30} {'figure':22} {'measured':>14} {'vramplan':>14} {'ratio':>7}")
    results = []
    for i, case in enumerate(cases):
        t0 = time.time()
        try:
            m = run(case, args.compile, trace=bool(args.trace))
        except Exception as exc:  # an out-of-memory or a kernel missing: reported, the next case runs
            print(f"{case['name']}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            results.append({"name": case["name"], "error": f"{type(exc).__name__}: {str(exc)[:2000]}"})
            torch.cuda.empty_cache()
            continue
        if "trace" in m:
            with open(os.path.join(args.trace, f"trace_{i}.json"), "w") as f:
                json.dump({"name": case["name"], "events": m.pop("trace")}, f)
        e = expected.get(case["name"])
        for key, ekey in (("peak_allocated_bytes", "peak_allocated_bytes"),
                          ("peak_reserved_bytes", "peak_reserved_bytes"),
                          ("device_used_bytes", "peak_total_bytes")):
            est = e[ekey] if e else 0
            print(f"{case['name']:30} {key:22} {m[key]:>14} {est:>14} {est / m[key]:7.3f}", flush=True)
        print(f"{case['name']:30} step {m['step_seconds']:.4f} s (clean {m['step_seconds_clean']:.4f} s, host "
              f"{m['host_seconds_clean']:.4f} s), case {time.time() - t0:.1f} s", flush=True)
        results.append(dict(m, name=case["name"]))
        if args.out:  # written after every case: a run cut short keeps what it measured
            write(args.out, context_init, results, args)
    # after training: the kernels the cases loaded (cuBLAS, SDPA, AdamW's) on top
    context_after = context_bytes()
    print_context("after the cases", context_after)
    if args.out:
        write(args.out, context_init, results, args, context_after)


def write(path, context_init, results, args, context_after=None):
    major, minor = torch.cuda.get_device_capability()
    doc = {"device_name": torch.cuda.get_device_name(), "capability": f"sm_{major}{minor}",
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "compile": args.compile,
           "context_after_init_bytes": context_init, "context_after_cases_bytes": context_after,
           "cases": results}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
