#!/bin/sh
# golden.sh DIR: record what build/vramplan prints for a broad matrix (every
# model x a spread of recipes, timeline and folded, plus every compare.py
# configuration) so that a refactor can be proven byte-identical:
#   tools/golden.sh /tmp/golden-base      # on the untouched baseline
#   tools/golden.sh /tmp/golden-new && diff -r -x '.*' /tmp/golden-base /tmp/golden-new
# Each case keeps the exit status, stderr verbatim and a hash of stdout (the
# timelines are megabytes each; rerun one case by hand to see a difference),
# JSON with its keys sorted (jq -S).
# GOLDEN_JOBS sets the parallelism (default 2: the build machine is shared).
set -eu
out=${1:?usage: tools/golden.sh DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${VRAMPLAN:-$root/build/vramplan}  # VRAMPLAN: another binary (a saved baseline)
jobs=${GOLDEN_JOBS:-2}
mkdir -p "$out"
cases="$out/.cases"
: > "$cases"

# one case per line: NAME<TAB>ARGS (ARGS split on spaces: no value has one)
recipes='default|
full|--set checkpointing=full
lora|--set precision=amp-bf16 --set finetune=lora --set lora_targets=all-linear
qlora|--set finetune=qlora --set precision=amp-bf16 --set checkpointing=full
zero3|--set framework=deepspeed --set zero=3 --set dp=8
megatron|--set framework=megatron --set tp=2 --set pp=2 --set dp=2 --set sequence_parallel=true
eager|--set attention=eager
prefix|--set finetune=prefix --set num_virtual_tokens=20
prompt|--set finetune=prompt --set num_virtual_tokens=8 --set precision=bf16
offload|--set offload_activations=true
every2|--set use_reentrant=false --set checkpointing=every-2'
for model in $("$bin" list models --json | sed -n 's/^ *"name":"\([^"]*\)",*$/\1/p'); do
    extra=""
    case $model in gpt2*) extra="--set seq_len=1024" ;; bert*) extra="--set seq_len=512" ;; esac
    printf '%s\n' "$recipes" | while IFS='|' read -r rname rargs; do
        printf '%s\t%s\n' "$model.$rname.timeline" "estimate $model --json --timeline $extra $rargs" >> "$cases"
        printf '%s\t%s\n' "$model.$rname.folded" "estimate $model --json $extra $rargs" >> "$cases"
        # and at the default length, which the learned position tables refuse:
        # which of two problems a recipe meets first is part of the output
        [ -z "$extra" ] || printf '%s\t%s\n' "$model.$rname.long" "estimate $model --json $rargs" >> "$cases"
    done
done

# the compare.py set: the engine's side of each PyTorch comparison
# the configurations go to one fixed place: their path is part of the output
python3 - "$root" "$root/build/golden-configs" >> "$cases" <<'PY'
import json, os, sys
root, cfgdir = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "tests", "torch"))
import compare
os.makedirs(cfgdir, exist_ok=True)
for i, (name, config, rec) in enumerate(compare.CASES):
    path = os.path.join(cfgdir, "case%03d.json" % i)
    with open(path, "w") as f:
        json.dump(config, f)
    args = ["estimate", path, "--json", "--set", "device=cpu", "--set", "torch_version=1.13",
            "--set", "attention=eager"] + [a for k, v in rec.items() for a in ("--set", f"{k}={v}")]
    for mode in ("timeline", "folded"):
        extra = ["--timeline"] if mode == "timeline" else []
        print("compare%03d.%s\t%s" % (i, mode, " ".join(args + extra)))
PY

# GOLDEN_SKIP: an extended regex of case names to leave out (a quick pass
# between steps without the slowest timelines: see DIR/.times, in ms)
if [ -n "${GOLDEN_SKIP:-}" ]; then
    grep -Ev "^(${GOLDEN_SKIP})	" "$cases" > "$cases.kept" || true
    mv "$cases.kept" "$cases"
fi
: > "$out/.times"
export out bin
# one fresh sh per case, GOLDEN_JOBS at a time (no trailing blanks: xargs -L
# would join the next line)
sed 's/[[:space:]]*$//' "$cases" | tr '\t' ' ' | xargs -P "$jobs" -L 1 sh -c '
    name=$1; shift
    start=$(date +%s%N)
    rc=0; "$bin" "$@" > "$out/$name.stdout" 2> "$out/$name.stderr" || rc=$?
    # the JSON objects key order changes from run to run (Lua seeds its
    # string hashes per process): compare them with their keys sorted
    jq -S . "$out/$name.stdout" > "$out/$name.sorted" 2>/dev/null || cp "$out/$name.stdout" "$out/$name.sorted"
    { echo "rc $rc"; sha256sum < "$out/$name.sorted" | cut -d" " -f1; cat "$out/$name.stderr"; } > "$out/$name"
    rm -f "$out/$name.stdout" "$out/$name.stderr" "$out/$name.sorted"
    echo "$name $(( ($(date +%s%N) - start) / 1000000 ))" >> "$out/.times"' sh
echo "$(wc -l < "$cases") cases in $out"
