#!/bin/sh
# Run here, before a GPU session: the engine's figures for tests/gpu/cases.json
# (device=cuda, PyTorch 2.x), written to tests/gpu/expected.json, which
# travels with the tree to the GPU machine.
set -e
cd "$(dirname "$0")/../.."
/usr/bin/python3 - <<'PY'
import json, os, subprocess, tempfile
cases = json.load(open("tests/gpu/cases.json"))
out = []
with tempfile.TemporaryDirectory() as d:
    for c in cases:
        p = os.path.join(d, "config.json")
        json.dump(c["config"], open(p, "w"))
        cmd = ["build/vramplan", "estimate", p, "--json", "--gpu", "h200"]
        for k, v in c["recipe"].items():
            cmd += ["--set", f"{k}={v}"]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        out.append({"name": c["name"], "per_gpu": r["per_gpu"]})
json.dump(out, open("tests/gpu/expected.json", "w"), indent=1, sort_keys=True)
print("wrote tests/gpu/expected.json")
PY
