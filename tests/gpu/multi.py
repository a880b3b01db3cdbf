"""The multi-GPU check, for a machine with several GPUs (PyTorch 2.x with
NCCL): what one GPU cannot show. Not yet run: written for the first session
lent a machine of several GPUs (tests/gpu/run_multi.sh).

    python3 tests/gpu/multi.py --out DIR [--layers 8] [--micro-batch 2] [--seq-len 2048]

One process per GPU (torch.multiprocessing), each writing DIR/rank<R>.json:

1. NCCL's buffers: the device's used memory outside the caching allocator
   (the CUDA context and what NCCL allocates itself) before the process
   group exists, after init_process_group and a first all_reduce, and after
   an all_gather_into_tensor and a reduce_scatter_tensor (FSDP2's
   collectives): vramplan's per_gpu.nccl_bytes for dp = the GPUs, one
   communicator (docs/reserved.md).
2. FSDP2 as torchtitan wraps a Llama (fully_shard on the embeddings, on
   each block, the last kept gathered after forward, and on the root),
   MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32
   shards, fused AdamW, three steps, the third measured:
   max_memory_allocated / max_memory_reserved and the used memory per rank,
   and the cached segments by stream after the step (memory_snapshot): where
   the flat all-gather outputs, backward's prefetches included, are cached
   (vramplan puts them on the all-gather stream's pool, as foreach_all_gather
   makes them under the copy-in stream; the axolotl GPT-OSS rows moved by
   3-6 GiB with that, docs/validation.md).
   vramplan: framework = fsdp2, dp = the GPUs, precision mixed-bf16,
   optimizer_impl fused, model_code transformers (the harness's model code
   is transformers' written out), loss cross-entropy.
3. The same under the HF Trainer's way (accelerate's fsdp2_prepare_model:
   every block resharded, no embeddings unit) with transformers' default
   reentrant checkpointing of each block, keys prefixed trainer_: a rerun
   inside backward runs FSDP2's forward hooks again, which PyTorch 2.10
   changed (pytorch#164009: no reshard there); vramplan models 2.10 on
   (docs/how-it-works.md), recipe framework = fsdp2, model_code
   transformers, checkpointing full, use_reentrant true.
"""
import argparse
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))


def used_outside_allocator():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def llama_config(layers):
    # the GPU check's LLaMA shape (tests/gpu/cases.json), SDPA attention
    return {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": layers, "num_attention_heads": 16,
            "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000, "_attn_implementation": "sdpa"}


def nccl_buffers(rank, world, result):
    torch.zeros(1, device="cuda")
    result["used_before_group_bytes"] = used_outside_allocator()
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    x = torch.ones(1024, device="cuda")
    dist.all_reduce(x)
    result["used_after_all_reduce_bytes"] = used_outside_allocator()
    shard = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(world << 20, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_into_tensor(gathered, shard)
    out = torch.empty(1 << 20, device="cuda", dtype=torch.float32)
    dist.reduce_scatter_tensor(out, gathered.float())
    result["used_after_fsdp_collectives_bytes"] = used_outside_allocator()
    del x, shard, gathered, out


def reentrant(fn, *args):
    """transformers' gradient checkpointing default: reentrant, per block."""
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=True, preserve_rng_state=False)


def fsdp2_step(rank, args, result, trainer=False):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from models import Autocast, CausalLM

    cfg = llama_config(args.layers)
    torch.set_default_device(torch.device("cuda", rank))
    torch.manual_seed(0)
    model = CausalLM(cfg)  # fp32, as torchtitan's sharded parameters are
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layers = list(model.model.layers)
    if trainer:
        for layer in layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    else:
        fully_shard(model.model.embed_tokens, mp_policy=policy)
        for i, layer in enumerate(layers):
            fully_shard(layer, mp_policy=policy, reshard_after_forward=i < len(layers) - 1)
        fully_shard(model, mp_policy=policy, reshard_after_forward=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ac = Autocast(None)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the engine's step starts from the resident state
    b, s = args.micro_batch, args.seq_len
    for step in range(3):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        ids = torch.randint(cfg["vocab_size"], (b, s))
        loss, logits = model(ac, ids, ids.clone(), reentrant if trainer else None)
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss, ids
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    by_stream = {}
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") == rank:
            key = str(segment.get("stream"))
            by_stream[key] = by_stream.get(key, 0) + segment["total_size"]
    prefix = "trainer_" if trainer else ""
    result[prefix + "reserved_by_stream_bytes"] = by_stream
    result["default_stream"] = str(torch.cuda.current_stream().cuda_stream)
    result.update({"config": cfg, "micro_batch": b, "seq_len": s,
                   prefix + "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                   prefix + "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                   prefix + "device_used_bytes": total - free})
    del model, opt
    torch.cuda.empty_cache()


def worker(rank, world, args):
    torch.cuda.set_device(rank)
    result = {"rank": rank, "world": world, "torch": torch.__version__, "cuda": torch.version.cuda,
              "nccl": str(torch.cuda.nccl.version()), "device_name": torch.cuda.get_device_name()}
    for name, part in (("nccl", lambda: nccl_buffers(rank, world, result)),
                       ("fsdp2", lambda: fsdp2_step(rank, args, result)),
                       ("trainer_fsdp2", lambda: fsdp2_step(rank, args, result, trainer=True))):
        try:
            part()
        except Exception:  # reported; what was measured stays
            result[name + "_error"] = traceback.format_exc()[-2000:]
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    if dist.is_initialized():
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=2048)
    args = ap.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        sys.exit("multi.py: needs two GPUs or more")
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(worker, args=(world, args), nprocs=world, join=True)
    for rank in range(world):
        print(open(os.path.join(args.out, f"rank{rank}.json")).read(), flush=True)


if __name__ == "__main__":
    main()
