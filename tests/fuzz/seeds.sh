#!/bin/sh
# seeds.sh DIR — the fuzz target's seed corpus from the tree's example
# files, each behind the byte that picks its importer (fuzz_import.lua):
# 0 config.json, 1 model script, 2 recipe script, 3 DeepSpeed JSON,
# 4 YAML config, 5 architecture script with a model script of its family.
set -e
out=$1
mkdir -p "$out"
seed() { # seed SELECTOR NAME FILE...
    s=$1; name=$2; shift 2
    { printf '%s' "$s"; cat "$@"; } > "$out/$s-$name"
}
for f in tests/fixtures/*.json; do seed 0 "$(basename "$f")" "$f"; done
for f in models/*.lua; do seed 1 "$(basename "$f")" "$f"; done
for f in scripts/recipes/*.lua; do seed 2 "$(basename "$f")" "$f"; done
for f in $(find tests/fixtures/configs -name '*.json' | sort); do seed 3 "$(basename "$f")" "$f"; done
for f in $(find tests/fixtures/configs -name '*.yaml' -o -name '*.yml' | sort); do seed 4 "$(basename "$f")" "$f"; done
printf '\n--@model\n' > "$out/.separator"
for f in models/arch/*.lua; do
    family=$(basename "$f" .lua)
    model=$(grep -l "^return $family {" models/*.lua | head -n 1)
    [ -n "$model" ] && seed 5 "$family.lua" "$f" "$out/.separator" "$model"
done
rm -f "$out/.separator"
