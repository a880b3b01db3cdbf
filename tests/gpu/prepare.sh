#!/bin/sh
# Run here, before a GPU session: the engine's figures for tests/gpu/cases.json
# (device=cuda, PyTorch 2.x), written to tests/gpu/expected.json, which
# travels with the tree to the GPU machine. Each case gets the default
# allocator's figures (per_gpu), the simulated allocator's (simulated), the
# simulated allocator's with expandable segments (expandable), the compiled
# blocks' for the decoders (compiled, or compiled_error where refused) and the step time (time).
set -e
cd "$(dirname "$0")/../.."
/usr/bin/python3 - <<'PY'
import json, os, subprocess, tempfile
cases = json.load(open("tests/gpu/cases.json"))
variants = {"per_gpu": [], "simulated": ["allocator=simulated"],
            "expandable": ["allocator=simulated", "alloc_conf=expandable_segments:True"],
            "compiled": ["compile=true"]}
out = []
with tempfile.TemporaryDirectory() as d:
    for c in cases:
        p = os.path.join(d, "config.json")
        json.dump(c["config"], open(p, "w"))
        base = ["build/vramplan", "estimate", p, "--json", "--gpu", "h200"]
        for k, v in c["recipe"].items():
            base += ["--set", f"{k}={v}"]
        entry = {"name": c["name"]}
        for name, extra in variants.items():
            if name == "compiled" and c["config"]["model_type"] == "bert":
                continue
            cmd = base + [a for kv in extra for a in ("--set", kv)]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:  # a variant the engine refuses (compile with MoE blocks, say)
                entry[name + "_error"] = run.stderr.strip()
                continue
            r = json.loads(run.stdout)
            entry[name] = r["per_gpu"]
            if name == "per_gpu":
                entry["time"] = r["time"]
        out.append(entry)
json.dump(out, open("tests/gpu/expected.json", "w"), indent=1, sort_keys=True)
print("wrote tests/gpu/expected.json")
PY
