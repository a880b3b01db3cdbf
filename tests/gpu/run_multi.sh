#!/bin/sh
# The multi-GPU session's one command (a machine of several GPUs, PyTorch
# 2.x with NCCL): NCCL's buffers and an FSDP2 step per rank
# (tests/gpu/multi.py), each rank's JSON into $OUT (a folder in /tmp by
# default). Not yet run.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi topo -m
timeout 300 python3 tests/gpu/multi.py --out "$OUT"
echo "results in $OUT"
