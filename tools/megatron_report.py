"""Megatron-LM's theoretical memory report, for vramplan's reference tests.

    python3 tools/megatron_report.py tests/reference/megatron_report.json
    python3 tools/megatron_report.py --check tests/reference/megatron_report.json

Megatron prints "Theoretical memory footprints: weight and optimizer=X MB,
activation=Y MB" at start-up (megatron/training/theoretical_memory_usage.py,
NVIDIA/Megatron-LM @ 00caa53af30912914981c86f39db123961678bbd). Megatron
is not installable here, so this tool restates that report's arithmetic for
the configurations in the file and writes the two figures back into it, in
MiB as Megatron prints them; the tests compare vramplan's per-stage
results with them. A restatement, kept to what the report does for dense
GPT-style models (no MoE, MLA or MTP terms):

weights and optimizer, on the most loaded shard (the first stage, or the
only one):
  per layer  2h(ffn * (3/2 if swiglu) + norm) + 2h^2 (1 + groups/heads) q/h
             with norm = 1 for RMSNorm, 2 for LayerNorm and q = kv_channels x
             heads; biases and position embeddings are not counted
  shard      (L x layer + norm x h) / pp + h x vocab [+ h x vocab when untied
             and pp = 1], all / tp
  bytes      18 a parameter (2 model, 4 main, 4 grad, 8 Adam), or 6 + 12/dp
             with the distributed optimizer

activations of the first stage (Korthikanti et al. 2022, Table 2):
  with sequence parallelism and selective recompute
             [sbh (18 + 4 ffn/h) L + 8sb pp + sbh pp] x in-flight factor
             + (pp = 1) 4sbh (1 + vocab/h), all / tp
  otherwise  [sbh (10 + 24/tp) L + 8sb pp + sbh pp] x in-flight factor
             + (pp = 1) 2(sbv/tp + sbh), all x 1.05
  in-flight  interleaved: 1 + (pp - 1)/(pp v); 1F1B: min(1, microbatches/pp)
"""
import json
import sys

MIB = 1 << 20


def weights_and_optimizer(c):
    h, heads = c["hidden"], c["heads"]
    groups = c.get("query_groups", heads)
    kv_channels = c.get("kv_channels", h // heads)
    norm = 1 if c.get("normalization") == "RMSNorm" else 2
    gated = 1.5 if c.get("swiglu") else 1.0
    attention = 2 * h * h * ((1 + groups / heads) * (kv_channels * heads / h))
    layer = 2 * h * (c["ffn"] * gated + norm) + attention
    block = layer * c["layers"] + norm * h
    embedding = h * c["padded_vocab"]
    tp, pp = c.get("tp", 1), c.get("pp", 1)
    shard = (block / pp + embedding) / tp
    if c.get("untie") and pp == 1:
        shard += embedding / tp
    per_param = 6 + 12 / c.get("dp", 1) if c.get("distributed_optimizer") else 18
    return shard * per_param


def in_flight_factor(c):
    pp, v = c.get("pp", 1), c.get("virtual_stages")
    if v:
        return 1 + (pp - 1) / (pp * v)
    if pp > 1:
        return min(1, c["microbatches"] / pp)
    return 1


def activations(c):
    s, b, h = c["seq_len"], c["micro_batch"], c["hidden"]
    tp, pp, v = c.get("tp", 1), c.get("pp", 1), c["padded_vocab"]
    embedding = 8 * s * b * pp + s * b * h * pp
    if c.get("sequence_parallel") and c.get("recompute") == "selective":
        total = (s * b * h * (18 + 4 * c["ffn"] / h) * c["layers"] + embedding) * in_flight_factor(c)
        if pp == 1:
            total += s * b * h * 4 * (1 + v / h)
        return total / tp
    total = (s * b * h * (10 + 24 / tp) * c["layers"] + embedding) * in_flight_factor(c)
    if pp == 1:
        total += (s * b * v / tp + s * b * h) * 2
    return total * 1.05


def report(c):
    return {
        "report_weight_and_optimizer_mib": round(weights_and_optimizer(c) / MIB, 2),
        "report_activation_mib": round(activations(c) / MIB, 2),
    }


def main(argv):
    check = argv[:1] == ["--check"]
    path = argv[-1]
    with open(path) as f:
        cases = json.load(f)
    stale = []
    for case in cases:
        for key, value in report(case["megatron"]).items():
            if case.get(key) != value:
                stale.append(f"{path}: {case['id']}: {key} is {case.get(key)}, the report gives {value}")
            case[key] = value
    if check:
        for line in stale:
            print(line, file=sys.stderr)
        return 1 if stale else 0
    with open(path, "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
