"""A differential sweep, run on demand: random small configurations of every
family the harness mirrors, each measured by the harness and estimated by
vramplan, printing those whose activations or peak differ by more than
compare.py allows (host bytes under save_on_cpu too) or whose model states
differ at all.

    python3 tests/torch/sweep.py SEED COUNT [wide] [more] [v5] [gpt_oss] [params] [autocast] [liger] [accelerate] [fsdp2]
        [tune] [trl]

The same SEED draws the same configurations. `more` adds BERT,
DeepSeekMoE and DeepSeek-V2 (fp32: its modeling code's only precision) to
the families drawn, DDP over two processes, and every
layer frozen under a small vocabulary (the forward's own lifetimes). `wide` varies more, from a
stream of its own (the plain draws stay as they were): longer checkpointed
chunks, the mixtures' router logits (output_router_logits), LoRA's
dropout, DoRA, QLoRA, activation offload (around checkpointed calls too),
the logits dropped (HF's Trainer), and last the model's dropout, LLaMA's
tied embeddings, the other optimizers the harness has, LoRA's rank,
gradient accumulation, use_cache, a small vocabulary, Adafactor's and
SM3's first moment, modules_to_save, frozen layers, weight decay, the
gradients kept between steps and QLoRA's fp32 compute dtype. `v5` runs
the mixtures (and transformers' DeepSeek-V2, added to the families drawn)
under transformers 5's 3-D experts, `experts_implementation` eager or
grouped_mm, drawn from a stream of its own. `gpt_oss` draws GPT-OSS alone
(its experts by either implementation; half the cases LoRA with PEFT's
target_parameters on them); with `v5`, `params` does the same for the
mixtures' 3-D experts. `autocast` turns most bf16 draws into
bf16-autocast (the Trainer's autocast over a bf16 model); `liger` turns
on Liger-Kernel's RMSNorm, SwiGLU or both on half the draws; `accelerate`
converts the outputs of most autocast draws to fp32 as accelerate does
(outputs_fp32), the loop keeping them or not; `fsdp2` runs most full
fine-tuning and plain LoRA draws under FSDP2 on one rank of 2-4 (fsdp2.py);
`tune` makes the offloading draws torchtune's OffloadActivations (with
streams on half of them, its chunked loss outside); `trl` makes them TRL's
(offload_trl: the loss inside, streams on half, axolotl's view clones on
some). What it finds becomes a fixed
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
# drawn too with `more` (left out of FAMILIES so that earlier seeds draw as they did)
MORE_FAMILIES = {
    "bert": lambda r: C.bert(layers=r.choice([1, 2, 3]), dropout=r.choice([0.0, 0.1])),
    "deepseek": lambda r: C.deepseek(layers=r.choice([2, 3]), norm=r.choice([True, False]),
                                     alpha=r.choice([0.0, 0.001])),
    # DeepSeek-V2's own modeling code: fp32 only (draw() keeps its precision draw, then sets fp32)
    "deepseek_v2": lambda r: C.deepseek_v2(layers=r.choice([2, 3]), q_lora=r.choice([32, None]),
                                           groups=r.choice([1, 4]), topk_groups=2, norm=r.choice([True, False]),
                                           yarn=r.choice([True, False])),
}


def draw(r, i, families=FAMILIES):
    family = r.choice(sorted(families))
    config = families[family](r)
    precision = r.choice(["fp32", "bf16", "amp-bf16", "mixed-bf16"])
    if family == "deepseek_v2":
        precision = "fp32"
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


MIXTURES = ("mixtral", "qwen_moe", "qwen3_moe")
# the dropout probabilities a family's config has (the LLaMA family: attention_dropout)
DROPOUT_KEYS = {
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "phi": ("resid_pdrop",),
    "neox": ("hidden_dropout", "attention_dropout"),
    "bloom": ("hidden_dropout", "attention_dropout"),
    "t5": ("dropout_rate",),
}


def widen(w, case):
    """More of the recipe varied, drawn from w (a stream of the case's own)."""
    name, config, recipe = case
    family = name.split()[1]
    config, recipe = dict(config), dict(recipe)
    layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
    if recipe["checkpointing"] != "none" and family != "t5" and w.random() < 0.5:
        config["num_hidden_layers" if "num_hidden_layers" in config else "n_layer" if "n_layer" in config
               else "num_layers"] = layers = w.choice([3, 4, 5])
        recipe["checkpointing"] = f"every-{w.choice([3, 4])}"
    if family in MIXTURES and w.random() < 0.5:
        config["output_router_logits"] = True
    if recipe["finetune"] == "lora" and w.random() < 0.5:
        recipe["lora_dropout"] = 0.1
    if recipe["finetune"] == "lora" and w.random() < 0.4:
        recipe["use_dora"] = "true"
    # QLoRA and LLM.int8 over the harness's bitsandbytes layers
    if recipe["finetune"] == "lora" and w.random() < 0.4:
        recipe["finetune"] = "qlora"
        recipe["quant"] = w.choice(["nf4", "nf4", "fp4", "int8"])
        recipe["double_quant"] = w.choice(["true", "true", "false"])
    if recipe["checkpointing"] == "none" and w.random() < 0.2:
        recipe["offload_activations"] = "true"
    if w.random() < 0.3:
        recipe["keep_logits"] = "false"
    # use_reentrant=False: 1.13's own checkpoint, or 2.x's with early stop (checkpoint2x.py)
    if recipe["checkpointing"] != "none" and w.random() < 0.4:
        recipe["use_reentrant"] = "false"
        if w.random() < 0.5:
            recipe["checkpoint_early_stop"] = "true"
    # save_on_cpu around checkpointed calls too (drawn last: the draws above stay as they were)
    if recipe["checkpointing"] != "none" and "offload_activations" not in recipe and w.random() < 0.15:
        recipe["offload_activations"] = "true"
    # dropout, untied embeddings, other optimizers, ranks and gradient
    # accumulation (drawn after all of the above)
    more = []
    if w.random() < 0.2:
        config.update({k: 0.1 - config.get(k, 0.0) for k in DROPOUT_KEYS.get(family, ("attention_dropout",))})
        more.append("dropout flipped")
    if family == "llama" and w.random() < 0.2:
        config["tie_word_embeddings"] = not config["tie_word_embeddings"]
        more.append("tied" if config["tie_word_embeddings"] else "untied")
    if w.random() < 0.25:
        recipe["optimizer"] = w.choice(["adam", "sgd-momentum", "adamw-hf", "adafactor", "sm3"])
        more.append(recipe["optimizer"])
    if recipe["finetune"] in ("lora", "qlora") and w.random() < 0.2:
        recipe["lora_rank"], recipe["lora_alpha"] = w.choice([(4, 16), (16, 8), (1, 2)])
        more.append(f"r{recipe['lora_rank']}")
    if w.random() < 0.2:
        recipe["grad_accum"] = w.choice([2, 3])
        more.append(f"accum{recipe['grad_accum']}")
    if recipe["checkpointing"] == "none" and w.random() < 0.15:  # config.use_cache off: no cache in the outputs
        recipe["use_cache"] = "false"
        more.append("no cache")
    # a small vocabulary: a layer's weights, not the embedding or head, are
    # the optimizer step's largest tensors (its order of parameters shows)
    if w.random() < 0.15:
        config["vocab_size"] = 32
        more.append("vocab 32")
    if recipe["optimizer"] in ("adafactor", "sm3") and w.random() < 0.5:  # beta1 / momentum
        recipe["first_moment"] = "true"
        more.append("first moment")
    # modules_to_save (PEFT's wrapped copies; GPT-2's and BLOOM's ln_f,
    # BERT's LayerNorm and T5's names end otherwise than "norm"), and frozen layers
    if recipe["finetune"] in ("lora", "qlora", "prompt") and family not in ("t5", "gpt2", "bloom", "bert") and \
            w.random() < 0.15:
        recipe["modules_to_save"] = w.choice(["lm_head", "norm", "embed_tokens,lm_head"])
        more.append(f"save {recipe['modules_to_save']}")
    if recipe["finetune"] == "full" and family != "t5" and w.random() < 0.15:
        recipe["finetune"], recipe["trainable_layers"] = "freeze", w.choice([0, 1, 2])
        more.append(f"freeze {recipe['trainable_layers']}")
    if recipe["optimizer"] != "none" and w.random() < 0.15:
        recipe["weight_decay"] = w.choice([0.0, 0.1])
        more.append(f"decay {recipe['weight_decay']}")
    if w.random() < 0.1:  # refused with mixed-bf16
        recipe["grads_set_to_none"] = "false"
        more.append("grads kept")
    if recipe["finetune"] == "qlora" and recipe.get("quant") != "int8" and w.random() < 0.3:
        recipe["compute_dtype"] = "fp32"
        more.append("fp32 compute")
    tags = [k for k in ("output_router_logits",) if config.get(k)] + [
        k for k in ("lora_dropout", "use_dora", "offload_activations", "keep_logits", "use_reentrant",
                    "checkpoint_early_stop") if k in recipe] + more
    return (f"{name.split()[0]} {family} {recipe['precision']} {recipe['checkpointing']} {recipe['finetune']}"
            + "".join(f" +{t}" for t in tags), config, recipe)


# the blocks transformers 5 runs by experts_implementation (with `v5`)
V5_FAMILIES = MIXTURES + ("deepseek_v3", "deepseek_v2_hf", "gpt_oss")


def experts_v5(r, case):
    """With `v5`: a mixture's experts as transformers 5 holds them, run by its
    loop or its grouped GEMMs. Not the grouped GEMMs under save_on_cpu: the
    harness's GroupedMm is an autograd.Function, whose saved tensors are
    packed after it computes, where the C++ op packs them before, so the
    contiguous copy of the weight's transposed view that save_on_cpu makes
    lands on top of the output in the harness only (docs/validation.md)."""
    name, config, recipe = case
    if name.split()[1] not in V5_FAMILIES:
        return case
    impl = "eager" if recipe.get("offload_activations") == "true" else r.choice(["eager", "grouped_mm"])
    return name + f" +{impl}", config, dict(recipe, experts_implementation=impl)


def over_ddp(r, case):
    """With `more`: now and then plain DDP over two gloo processes (fp32
    gradients: gloo reduces no bf16; no accumulation, which no_sync would need)."""
    name, config, recipe = case
    if recipe["precision"] in ("fp32", "amp-bf16") and "grad_accum" not in recipe and r.random() < 0.15:
        recipe = dict(recipe, dp=2)
        name += " +ddp"
    return name, config, recipe


def frozen(r, case):
    """With `more`: now and then every layer frozen under a small
    vocabulary, so that the forward's own lifetimes make the peak (what
    autograd does not save shows only there)."""
    name, config, recipe = case
    family = name.split()[1]
    if family != "t5" and recipe["finetune"] in ("full", "freeze") and "framework" not in recipe and r.random() < 0.25:
        config = dict(config, vocab_size=32)
        recipe = dict(recipe, finetune="freeze", trainable_layers=0, optimizer="none")
        name += " +all frozen"
    return name, config, recipe


def target_parameters(r, case):
    """gpt_oss: PEFT's target_parameters on the experts, on a LoRA recipe
    or one made LoRA, of every layer or of one."""
    name, config, recipe = case
    if r.random() < 0.5 or recipe.get("finetune") not in (None, "full", "lora"):
        return case
    layers = config["num_hidden_layers"]
    params = r.choice([["gate_up_proj"], ["down_proj"], ["gate_up_proj", "down_proj"]])
    prefix = r.choice(["", f"{r.randrange(layers)}."])
    entries = ",".join(f"{prefix}mlp.experts.{p}" for p in params)
    recipe = dict(recipe, finetune="lora", lora_target_parameters=entries)
    recipe.setdefault("lora_targets", r.choice(["q_proj", "o_proj,k_proj"]))
    recipe.pop("modules_to_save", None)
    return name + " +target_parameters " + entries, config, recipe


def autocast_weights(r, case):
    """With `autocast`: a bf16 draw now and then as the Trainer's bf16=True
    over a bf16 model (bf16-autocast); DeepSeekMoE's rows turn fp32 there,
    which PyTorch refuses (as vramplan does)."""
    name, config, recipe = case
    if recipe["precision"] != "bf16" or r.random() < 0.3:
        return case
    parts = name.split(" ")
    parts[2] = "bf16-autocast"
    return " ".join(parts), config, dict(recipe, precision="bf16-autocast")


def liger_kernels(r, case):
    """With `liger`: Liger-Kernel's RMSNorm and SwiGLU on half the draws,
    each on its own or both (where Liger has no patch for the model type
    both change nothing, as in the harness's models/liger.py)."""
    name, config, recipe = case
    if r.random() < 0.5:
        return case
    keys = r.choice([("liger_rms_norm",), ("liger_swiglu",), ("liger_rms_norm", "liger_swiglu")])
    return name + " +" + "+".join(keys), config, dict(recipe, **{k: "true" for k in keys})


def accelerate_outputs(r, case):
    """With `accelerate`: most autocast draws (amp-bf16, bf16-autocast) run
    under accelerate's convert_outputs_to_fp32, half of those with the
    outputs dropped before backward as the Trainer does."""
    name, config, recipe = case
    if recipe["precision"] not in ("amp-bf16", "bf16-autocast") or r.random() < 0.2:
        return case
    recipe = dict(recipe, outputs_fp32="true")
    if r.random() < 0.5:
        recipe["keep_logits"] = "false"
    return name + " +outputs_fp32" + (" -logits" if recipe.get("keep_logits") == "false" else ""), config, recipe


def torchtune_offload(r, case):
    """With `tune`: an offloading draw's save_on_cpu made torchtune's
    OffloadActivations, its chunked loss outside the hooks as its recipes
    run it, with streams (PyTorch 2.5's default) on half of them."""
    name, config, recipe = case
    # (the harness's chunked loss adds no router loss: torchtune's recipes have none)
    if recipe.get("offload_activations") != "true" or config["model_type"] in ("t5", "mt5", "bert") or \
            config.get("output_router_logits"):
        return case
    streams = r.random() < 0.5
    recipe = dict(recipe, offload_torchtune="true", loss="chunked", keep_logits="false",
                  offload_streams="true" if streams else "false")
    return name + (" +torchtune streams" if streams else " +torchtune"), config, recipe


def trl_offload(r, case):
    """With `trl`: an offloading draw's save_on_cpu made TRL's
    OffloadActivations (offload_trl, TRL 1.8+): the loss inside the hooks,
    lm_head alone outside, with streams on half of them; its checkpoints
    non-reentrant (TRL's SFTConfig default: the reentrant rerun is refused)."""
    name, config, recipe = case
    if recipe.get("offload_activations") != "true" or config["model_type"] in ("t5", "mt5", "bert"):
        return case
    streams = r.random() < 0.5
    recipe = dict(recipe, offload_torchtune="true", offload_trl="true", keep_logits="false",
                  offload_streams="true" if streams else "false")
    if recipe.get("checkpointing", "none") != "none":
        recipe["use_reentrant"] = "false"
    clone = r.random() < 0.4  # axolotl 0.18's patch: views cloned before the hook
    if clone:
        recipe["offload_clone_views"] = "true"
    return name + (" +trl streams" if streams else " +trl") + (" clone" if clone else ""), config, recipe


def over_fsdp2(r, case):
    """With `fsdp2`: most full fine-tuning and plain LoRA draws (fp32, amp-bf16, bf16 made
    mixed-bf16) run under FSDP2 on one rank of 2-4 (fsdp2.py): the reduce
    dtype, reshard_after_forward (or the rerun's resharding before PyTorch
    2.10) and the ranks drawn; accelerate's
    preparation (model_code transformers), as the harness's model code is."""
    name, config, recipe = case
    if recipe.get("finetune", "full") not in ("full", "lora") or recipe.get("dp", 1) > 1 or r.random() < 0.2:
        return case
    # PEFT's plain LoRA only: DoRA and modules_to_save are not mirrored under it
    if str(recipe.get("use_dora", "false")) == "true" or "modules_to_save" in recipe:
        return case
    # the factored optimizers' states follow a parameter's shape, which a
    # DTensor reports whole where the harness's plain shard is its rows
    if recipe.get("optimizer") in ("adafactor", "sm3"):
        return case
    precision = {"bf16": "mixed-bf16"}.get(recipe["precision"], recipe["precision"])
    if precision not in ("fp32", "amp-bf16", "mixed-bf16"):
        return case
    recipe = dict(recipe, precision=precision, framework="fsdp2", model_code="transformers", dp=r.choice([2, 3, 4]))
    if precision == "mixed-bf16":
        recipe["reduce_dtype"] = r.choice(["fp32", "bf16"])
    if r.random() < 0.25:
        recipe["reshard_after_forward"] = "false"
    elif r.random() < 0.4:  # PyTorch before 2.10: a reentrant rerun reshards and records its place
        recipe["fsdp2_rerun_reshards"] = "true"
    parts = name.split(" ")
    parts[2] = precision
    return " ".join(parts) + f" +fsdp2 dp {recipe['dp']}" + (" no reshard" if "reshard_after_forward" in recipe else "") \
        + (" pre-2.10" if "fsdp2_rerun_reshards" in recipe else ""), config, recipe


def main():
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    wide, more, v5 = "wide" in sys.argv[3:], "more" in sys.argv[3:], "v5" in sys.argv[3:]
    r = random.Random(seed)
    families = dict(FAMILIES, **MORE_FAMILIES) if more else dict(FAMILIES)
    if v5:  # transformers' own DeepSeek-V2 class, whose 5.x block is modelled
        families["deepseek_v2_hf"] = lambda r: C.deepseek_v2_hf(layers=r.choice([2, 3]), q_lora=r.choice([32, None]),
                                                                 groups=r.choice([1, 4]), topk_groups=2)
    if "gpt_oss" in sys.argv[3:]:
        families = {"gpt_oss": lambda r: C.gpt_oss(layers=r.choice([1, 2, 3]), kv=r.choice([1, 2, 4]),
                                                   window=r.choice([8, 64]))}
        v5 = True
    cases = [draw(r, i, families) for i in range(count)]
    if wide:
        cases = [widen(random.Random(f"wide {seed} {i}"), case) for i, case in enumerate(cases)]
    if v5:
        cases = [experts_v5(random.Random(f"v5 {seed} {i}"), case) for i, case in enumerate(cases)]
    if "gpt_oss" in sys.argv[3:]:
        cases = [target_parameters(random.Random(f"tp {seed} {i}"), case) for i, case in enumerate(cases)]
    elif v5 and "params" in sys.argv[3:]:  # the mixtures' 3-D experts under transformers 5
        cases = [target_parameters(random.Random(f"tp {seed} {i}"), case)
                 if case[2].get("experts_implementation") else case for i, case in enumerate(cases)]
    if "autocast" in sys.argv[3:]:
        cases = [autocast_weights(random.Random(f"autocast {seed} {i}"), case) for i, case in enumerate(cases)]
    if "liger" in sys.argv[3:]:
        cases = [liger_kernels(random.Random(f"liger {seed} {i}"), case) for i, case in enumerate(cases)]
    if "accelerate" in sys.argv[3:]:
        cases = [accelerate_outputs(random.Random(f"accelerate {seed} {i}"), case) for i, case in enumerate(cases)]
    if "tune" in sys.argv[3:]:
        cases = [torchtune_offload(random.Random(f"tune {seed} {i}"), case) for i, case in enumerate(cases)]
    if "trl" in sys.argv[3:]:
        cases = [trl_offload(random.Random(f"trl {seed} {i}"), case) for i, case in enumerate(cases)]
    if "fsdp2" in sys.argv[3:]:
        cases = [over_fsdp2(random.Random(f"fsdp2 {seed} {i}"), case) for i, case in enumerate(cases)]
    if more:
        cases = [over_ddp(random.Random(f"ddp {seed} {i}"), case) for i, case in enumerate(cases)]
        cases = [frozen(random.Random(f"frozen {seed} {i}"), case) for i, case in enumerate(cases)]
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
        host = e["host_bytes"] - m["host_packed_bytes"] if "host_packed_bytes" in m else 0
        bad = abs(activations) > C.BYTES_TOLERANCE or abs(peak) > C.BYTES_TOLERANCE or states or \
            abs(host) > C.HOST_TOLERANCE
        differ += bool(bad)
        print(f"{'DIFFERS' if bad else 'ok':8} {name:40} activations {activations:+8} peak {peak:+8}"
              + (f" host {host:+6}" if host else "")
              + (f" states {states}\n         {json.dumps(config)}\n         {json.dumps(recipe)}" if bad else ""),
              flush=True)
    print(f"\n{count} drawn, {refused} refused by vramplan, {unmirrored} not mirrored, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
