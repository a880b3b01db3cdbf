"""A differential sweep, run on demand: random small configurations of every
family the harness mirrors, each measured by the harness and estimated by
vramplan, printing those whose activations or peak differ by more than
compare.py allows or whose model states differ at all.

    python3 tests/torch/sweep.py SEED COUNT

The same SEED draws the same configurations. What it finds becomes a fixed
case in compare.py once understood. Recipes vramplan refuses (a family
without PEFT's default LoRA targets, say) are skipped and counted.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import compare as C

FAMILIES = {
    "llama": lambda r: C.llama(layers=r.choice([1, 2, 3]), kv=r.choice([1, 2, 4])),
    "gpt2": lambda r: C.gpt2(layers=r.choice([1, 2, 3])),
    "phi3": lambda r: C.phi3(layers=2),
    "gemma": lambda r: C.gemma(layers=2),
    "gemma2": lambda r: C.gemma2(layers=2),
    "gemma3": lambda r: C.gemma3(layers=3),
    "neox": lambda r: C.neox(layers=2, parallel=r.choice([True, False])),
    "phi": lambda r: C.phi(layers=2),
    "qwen3_moe": lambda r: C.qwen3_moe(layers=2),
    "mixtral": lambda r: C.mixtral(layers=2),
    "qwen_moe": lambda r: C.qwen_moe(layers=2),
    "olmo2": lambda r: C.olmo2(layers=2),
    "granite": lambda r: C.granite(layers=2),
    "bloom": lambda r: C.bloom(layers=2),
    "t5": lambda r: C.t5(layers=r.choice([1, 2]), proj=r.choice(["relu", "gated-gelu"])),
    "deepseek_v3": lambda r: C.deepseek_v3(layers=3),
}


def draw(r, i):
    family = r.choice(sorted(FAMILIES))
    config = FAMILIES[family](r)
    precision = r.choice(["fp32", "bf16", "amp-bf16", "mixed-bf16"])
    ckpt = r.choice(["none", "full", "every-2"])
    finetune = r.choice(["full", "lora", "lora", "prompt"])
    extra = dict(b=r.choice([1, 2, 3]), s=r.choice([16, 48, 64]))
    if family == "t5":
        extra["target_len"] = r.choice([8, 40, 96])
        if finetune == "full" and r.random() < 0.3:
            finetune = "prefix"
    if finetune == "lora" and r.random() < 0.5:
        extra["lora_targets"] = "all-linear"
    if finetune in ("prompt", "prefix"):
        extra["num_virtual_tokens"] = r.choice([3, 6])
    if finetune == "prefix":
        ckpt = "none"  # PEFT refuses prefix tuning with gradient checkpointing
    recipe = C.recipe(precision, optimizer=r.choice(["adamw", "none", "sgd"]),
                      impl="for-loop" if precision == "mixed-bf16" else "foreach", ckpt=ckpt, finetune=finetune,
                      **extra)
    return (f"{i} {family} {precision} {ckpt} {finetune}", config, recipe)


def main():
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    r = random.Random(seed)
    cases = [draw(r, i) for i in range(count)]
    differ = refused = unmirrored = 0
    for name, config, recipe in cases:
        with tempfile.TemporaryDirectory() as workdir:
            try:
                e = C.engine(name, config, recipe, workdir)
            except subprocess.CalledProcessError:
                refused += 1  # vramplan refused the recipe with a message
                continue
            try:
                m = C.measure([(name, config, recipe)], workdir)[0]
            except subprocess.CalledProcessError:
                unmirrored += 1  # the harness has no mirror of it
                print(f"{'NOMIRROR':8} {name}", flush=True)
                continue
        activations = e["activations_bytes"] - m["activations_bytes"]
        peak = e["peak_allocated_bytes"] - m["peak_allocated_bytes"]
        states = [k for k in C.EXACT if e[k] != m[k]]
        bad = abs(activations) > C.BYTES_TOLERANCE or abs(peak) > C.BYTES_TOLERANCE or states
        differ += bool(bad)
        print(f"{'DIFFERS' if bad else 'ok':8} {name:40} activations {activations:+8} peak {peak:+8}"
              + (f" states {states}\n         {json.dumps(config)}\n         {json.dumps(recipe)}" if bad else ""),
              flush=True)
    print(f"\n{count} drawn, {refused} refused by vramplan, {unmirrored} not mirrored, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
