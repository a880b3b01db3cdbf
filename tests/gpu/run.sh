#!/bin/sh
# The GPU session's one command (a machine with CUDA and PyTorch 2.x; run
# tests/gpu/prepare.sh here first): every case with the default allocator,
# SDPA's backend and workspaces (sdpa_probe.py), every case again with
# expandable segments, allocation traces of the SDPA and LoRA cases, and
# two cases with compiled layers. Each part has its own time limit and
# writes its JSON into $OUT (a folder in /tmp by default) as it goes, so a
# part cut short keeps what it measured; at most 8 files come back from a
# lent machine, so the traces go to one folder of their own. On the H200,
# 2026-12-04, the parts took about 40, 10, 40, 15 and 60 seconds.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
timeout 150 python3 tests/gpu/check.py --out "$OUT/default.json"
timeout 60 python3 tests/gpu/sdpa_probe.py "$OUT/sdpa.json"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 150 python3 tests/gpu/check.py \
    --out "$OUT/expandable.json"
mkdir -p "$OUT/traces"
timeout 90 python3 tests/gpu/check.py --trace "$OUT/traces" --out "$OUT/traced.json" \
    --cases "llama-1b bf16 sdpa" --cases "dora" --cases "qwen2.5"
timeout 150 python3 tests/gpu/check.py --compile --cases "llama-1b bf16 sdpa" --cases "llama-1b amp-bf16 eager" \
    --out "$OUT/compiled.json"
nvidia-smi --query-gpu=memory.used --format=csv
echo "results in $OUT"
