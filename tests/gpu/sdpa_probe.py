"""What torch.nn.functional.scaled_dot_product_attention allocates on this
GPU for the shapes of tests/gpu/cases.json: the backend's kernels (read off
the profiler), the bytes forward keeps beside its output (the logsumexp and
whatever else the backend saves), forward's peak, and backward's peak above
its start (the gradients of q, k and v plus the backend's workspace).

    python3 tests/gpu/sdpa_probe.py OUT.json
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

# (name, batch, heads, seq, head_dim, window): the cases' attention calls,
# k and v repeated to every head before the call as transformers does
SHAPES = [
    ("llama-1b 4 x 2048", 4, 16, 2048, 128, None),
    ("llama-1b 8 x 4096", 8, 16, 4096, 128, None),
    ("llama3-8b 2 x 4096", 2, 32, 4096, 128, None),
    ("qwen2.5-0.5b 8 x 2048", 8, 14, 2048, 64, None),
    ("phi3-1b 2 x 2048, window 1023 (a float mask)", 2, 16, 2048, 128, 1023),
]


def window_mask(batch, seq, window, dtype):
    """transformers' 4-D float mask: 0 where a query sees a key (causal, within
    the window), the dtype's minimum elsewhere, expanded to the batch."""
    q = torch.arange(seq, device="cuda")[:, None]
    k = torch.arange(seq, device="cuda")[None, :]
    seen = (k <= q) & (k > q - window)
    mask = torch.zeros(seq, seq, dtype=dtype, device="cuda").masked_fill_(~seen, torch.finfo(dtype).min)
    return mask[None, None].expand(batch, 1, seq, seq)


def probe(batch, heads, seq, dim, window, dtype=torch.bfloat16):
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    mask = window_mask(batch, seq, window, dtype) if window else None
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=dtype)
    result = {}
    for attempt in range(2):  # the second: kernels loaded, workspaces cached
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
            torch.cuda.synchronize()
            out_bytes = out.numel() * out.element_size()
            result["forward_kept_bytes"] = torch.cuda.memory_allocated() - base - out_bytes
            result["forward_peak_above_bytes"] = torch.cuda.max_memory_allocated() - base
            start = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out.backward(grad)
            torch.cuda.synchronize()
            result["backward_peak_above_bytes"] = torch.cuda.max_memory_allocated() - start
            result["grads_bytes"] = sum(t.grad.numel() * t.grad.element_size() for t in (q, k, v))
        result["output_bytes"] = out_bytes
        result["kernels"] = sorted({e.key[:120] for e in prof.key_averages()
                                    if not e.key.startswith(("aten::", "cuda", "Memcpy", "Memset"))
                                    and (getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0))})
        del out
        for t in (q, k, v):
            t.grad = None
    return result


def main(path):
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": torch.cuda.get_device_name(),
           "flash_sdp": torch.backends.cuda.flash_sdp_enabled(),
           "mem_efficient_sdp": torch.backends.cuda.mem_efficient_sdp_enabled(),
           "cudnn_sdp": torch.backends.cuda.cudnn_sdp_enabled(), "math_sdp": torch.backends.cuda.math_sdp_enabled(),
           "shapes": []}
    for name, *shape in SHAPES:
        try:
            r = probe(*shape)
        except Exception as exc:  # reported; the next shape runs
            r = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        r["name"] = name
        print(json.dumps(r), flush=True)
        doc["shapes"].append(r)
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
