#!/bin/sh
# The GPU session's one command (a machine with CUDA and PyTorch 2.x; run
# tests/gpu/prepare.sh here first): every case measured with the default
# allocator, BERT-large's step traced, every case again with expandable
# segments, and two cases with compiled layers. Each part has its own time
# limit and writes its JSON into $OUT as it goes (OUT defaults to a folder
# in /tmp), so a part cut short keeps what it measured.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
timeout 200 python3 tests/gpu/check.py --out "$OUT/default.json"
timeout 60 python3 tests/gpu/check.py --cases "bert-large fp32 batch 4" --trace "$OUT/trace_bert.json" \
    --out "$OUT/bert_traced.json"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 150 python3 tests/gpu/check.py \
    --out "$OUT/expandable.json"
timeout 150 python3 tests/gpu/check.py --compile --cases "llama-1b bf16 sdpa" --cases "llama-1b amp-bf16 eager" \
    --out "$OUT/compiled.json"
nvidia-smi --query-gpu=memory.used --format=csv
echo "results in $OUT"
