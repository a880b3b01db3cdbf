"""The engine's caching allocator (engine/core/allocator.c, through
tests/allocator/driver.c) against tools/allocator_replay.py's, written
apart, on random malloc/free sequences under each PYTORCH_CUDA_ALLOC_CONF
option: memory_reserved must agree after every call.

    python3 tests/allocator/differential.py DRIVER [SEEDS]

Prints one line per configuration; exits 1 on the first disagreement."""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import allocator_replay  # noqa: E402

MIB = 1 << 20
CONFIGS = ["", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
           "expandable_segments:True,max_split_size_mb:128", "roundup_power2_divisions:2,max_split_size_mb:64"]


def sequence(seed, n=400):
    """Mallocs of small (<4 KiB), medium (<3 MiB) and large (<300 MiB) sizes, frees of random live ones."""
    rnd = random.Random(seed)
    ops, live = [], []
    for _ in range(n):
        if live and rnd.random() < 0.45:
            ops.append(("f", live.pop(rnd.randrange(len(live)))))
            continue
        kind = rnd.random()
        top = 4096 if kind < 0.3 else 3 * MIB if kind < 0.6 else 300 * MIB
        ident = len(ops)
        ops.append(("a", ident, rnd.randint(1, top)))
        live.append(ident)
    return ops


def engine(driver, conf, ops):
    text = conf + "\n" + "".join(" ".join(map(str, op)) + "\n" for op in ops)
    done = subprocess.run([driver], input=text, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"driver failed ({conf!r}): {done.stdout}{done.stderr}")
    return [int(x) for x in done.stdout.split()]


def python(conf, ops):
    alloc, blocks, out = allocator_replay.CachingAllocator(allocator_replay.parse_alloc_conf(conf)), {}, []
    for op in ops:
        if op[0] == "a":
            blocks[op[1]] = alloc.malloc(op[2])
        else:
            alloc.release(blocks.pop(op[1]))
        out.append(alloc.reserved)
    return out


def main():
    driver, seeds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
    for conf in CONFIGS:
        for seed in range(seeds):
            ops = sequence(seed)
            for k, (c, p) in enumerate(zip(engine(driver, conf, ops), python(conf, ops))):
                if c != p:
                    print(f"{conf!r} seed {seed}: after call {k} ({ops[k]}) the engine reserves {c}, the tool {p}")
                    sys.exit(1)
        print(f"{conf or 'default'!r}: {seeds} sequences agree")


if __name__ == "__main__":
    main()
