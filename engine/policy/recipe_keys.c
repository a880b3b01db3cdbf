/* recipe_keys.c — the recipe keys, each declared once (recipe_keys.h), and
 * the recipe's defaults taken from them. */
#include "recipe_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "finetune_method.h"
#include "framework.h"
#include "modules.h"
#include "optimizer.h"
#include "precision.h"

/* Option fields are enums stored as int-sized values. */
_Static_assert(sizeof(vp_precision_id) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(vp_framework) == sizeof(int), "enum fields are int-sized");

#define FIELD(f) offsetof(vp_recipe, f)

/* ---- text keys: their own parsers ---- */

/* A whole K >= 1 after `prefix` ("every-", "layers-"), or 0. */
static unsigned every_k(const char *s, const char *prefix) {
    size_t n = strlen(prefix);
    if (!s || strncmp(s, prefix, n) != 0 || s[n] < '1' || s[n] > '9') return 0;
    char *end = NULL;
    unsigned long k = strtoul(s + n, &end, 10);
    return end && !*end && k >= 1 && k <= 100000 ? (unsigned)k : 0;
}

/* "none", "full" (every layer), "selective", "every-K" (chunks of K
 * layers), "layers-K" (every K-th layer checkpointed alone: torchtitan's
 * selective layer checkpointing, ac_freq; the others not at all) or
 * "op-selective" (torchtitan's per-op policy in every layer). */
static bool parse_checkpointing(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                                size_t size) {
    r->selective = false;
    r->checkpoint_layers = 0;
    r->checkpoint_ops = false;
    if (s && strcmp(s, "none") == 0) r->checkpoint_every = 0;
    else if (s && strcmp(s, "full") == 0) r->checkpoint_every = 1;
    else if (s && strcmp(s, "selective") == 0) {
        r->checkpoint_every = 0;
        r->selective = true;
    } else if (every_k(s, "every-")) {
        r->checkpoint_every = every_k(s, "every-");
    } else if (every_k(s, "layers-")) {
        r->checkpoint_every = 1;
        r->checkpoint_layers = every_k(s, "layers-");
    } else if (s && strcmp(s, "op-selective") == 0) {
        /* torch.utils.checkpoint's selective checkpointing runs non-reentrant */
        r->checkpoint_every = 1;
        r->checkpoint_ops = true;
        r->use_reentrant = false;
    } else {
        snprintf(message, size,
                 "%s: must be none, full, selective, op-selective, every-K or layers-K for a whole K >= 1 (got %s)",
                 key, shown);
        return false;
    }
    return true;
}

/* "q_proj,v_proj" or "all-linear": a set of module names. */
static bool parse_module_list(vp_module_set *out, const char *key, const char *s, char *message, size_t size) {
    if (!s) {
        snprintf(message, size, "%s: must be module names, as \"q_proj,v_proj\" or \"all-linear\"", key);
        return false;
    }
    const char *bad;
    unsigned len;
    if (!vp_module_parse(s, out, &bad, &len)) {
        int n = snprintf(message, size, "%s: no module is called '%.*s' (known: all-linear", key, (int)len, bad);
        for (unsigned i = 1; vp_module_names[i] && n > 0 && (size_t)n < size; i++)
            n += snprintf(message + n, size - (size_t)n, ", %s", vp_module_names[i]);
        if (n > 0 && (size_t)n < size) snprintf(message + n, size - (size_t)n, ")");
        return false;
    }
    if (!*out) {
        snprintf(message, size, "%s: names no module", key);
        return false;
    }
    return true;
}

/* PYTORCH_CUDA_ALLOC_CONF's text (engine/core/alloc_conf.c). */
static bool parse_alloc_conf(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                             size_t size) {
    (void)shown;
    if (!s) {
        snprintf(message, size, "%s: must be text, as \"expandable_segments:True,max_split_size_mb:128\"", key);
        return false;
    }
    return vp_alloc_config_parse(s, &r->alloc_conf, message, size);
}

/* A name no core module has, kept for the model's Lua blocks to match
 * (PEFT matches target_modules against each module's own name, the last
 * of its path: tuners_utils.py check_target_module_exists; modules_to_save
 * against the end of its path, _set_trainable's key.endswith): a Python
 * identifier, at most VP_LORA_NAMES of them, each stored after `missing`
 * (the message that says the model lacks it) in rows of `row` bytes. */
static bool own_name(char *names, size_t row, unsigned *n, const char *missing, const char *name, unsigned len) {
    bool identifier = len < VP_LORA_NAME && !(name[0] >= '0' && name[0] <= '9');
    for (unsigned i = 0; i < len && identifier; i++)
        identifier = name[i] == '_' || (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
                     (name[i] >= '0' && name[i] <= '9');
    if (!identifier || *n == VP_LORA_NAMES) return false;
    size_t skip = strlen(missing);
    for (unsigned i = 0; i < *n; i++)
        if (strlen(names + i * row + skip) == len && strncmp(names + i * row + skip, name, len) == 0) return true;
    snprintf(names + (*n)++ * row, row, "%s%.*s", missing, (int)len, name);
    return true;
}

static bool lora_name(void *ctx, const char *name, unsigned len) {
    vp_recipe *r = ctx;
    return own_name(r->lora_names[0], sizeof r->lora_names[0], &r->n_lora_names, VP_LORA_MISSING, name, len);
}

static bool saved_name(void *ctx, const char *name, unsigned len) {
    vp_recipe *r = ctx;
    return own_name(r->saved_names[0], sizeof r->saved_names[0], &r->n_saved_names, VP_SAVED_MISSING, name, len);
}

/* A list of module names of which those no core module has go to
 * `other` (lora_name, saved_name), which counts them in *n. */
static bool parse_open_list(vp_recipe *r, vp_module_set *set, unsigned *n,
                            bool (*other)(void *ctx, const char *name, unsigned len), const char *key, const char *s,
                            char *message, size_t size) {
    if (!s) return parse_module_list(set, key, s, message, size);
    *n = 0;
    const char *bad;
    unsigned len;
    if (!vp_module_parse_open(s, set, &bad, &len, other, r)) {
        snprintf(message, size, "%s: '%.*s' is not a module's name (a Python identifier of fewer than %d characters; "
                 "at most %d names no core module has)", key, (int)len, bad, VP_LORA_NAME, VP_LORA_NAMES);
        return false;
    }
    if (!*set && !*n) {
        snprintf(message, size, "%s: names no module", key);
        return false;
    }
    return true;
}

static bool parse_lora_targets(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                               size_t size) {
    (void)shown;
    return parse_open_list(r, &r->lora_targets, &r->n_lora_names, lora_name, key, s, message, size);
}

static bool parse_modules_to_save(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                                  size_t size) {
    (void)shown;
    return parse_open_list(r, &r->modules_to_save, &r->n_saved_names, saved_name, key, s, message, size);
}

/* The parameter an entry of target_parameters names: its last component. */
static const char *const lora_param_names[] = {NULL, "gate_up_proj", "down_proj"};

/* PEFT's target_parameters: each entry matches a parameter whose full name
 * ends with it (tuners_utils.py, _inject_parameters: key.endswith("." +
 * target)), so "mlp.experts.gate_up_proj" names every layer's and
 * "22.mlp.experts.down_proj" (or with axolotl's checkpoint wrapper,
 * "22._checkpoint_wrapped_module.mlp.experts.down_proj") layer 22's. Read
 * here: the parameter (the last component, after "experts") and the layer
 * (a component of digits, if any). */
static bool parse_lora_params(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                              size_t size) {
    (void)shown;
    r->n_lora_params = 0;
    while (s && *s) {
        size_t len = strcspn(s, ",");
        /* the components in turn: the last two kept, the first of digits read as the layer */
        const char *part = s, *name = NULL, *before = NULL;
        size_t name_len = 0, before_len = 0;
        int layer = -1;
        while (part <= s + len) {
            size_t n = strcspn(part, ".,");
            if (part + n > s + len) n = (size_t)(s + len - part);
            bool digits = n > 0 && n < 7;
            for (size_t i = 0; digits && i < n; i++) digits = part[i] >= '0' && part[i] <= '9';
            if (digits && layer < 0) layer = atoi(part);
            before = name, before_len = name_len;
            name = part, name_len = n;
            part += n + 1;
        }
        vp_param_target param = VP_PARAM_NONE;
        bool experts = before && before_len == 7 && strncmp(before, "experts", 7) == 0;
        for (unsigned i = 1; experts && i < sizeof lora_param_names / sizeof *lora_param_names; i++)
            if (strlen(lora_param_names[i]) == name_len && strncmp(name, lora_param_names[i], name_len) == 0)
                param = (vp_param_target)i;
        if (!param || r->n_lora_params == VP_LORA_PARAMS) {
            snprintf(message, size, "%s: '%.*s' is not a mixture's experts parameter, as mlp.experts.gate_up_proj or "
                     "22.mlp.experts.down_proj (at most %d)", key, (int)len, s, VP_LORA_PARAMS);
            return false;
        }
        r->lora_params[r->n_lora_params++] = (vp_lora_param){layer, param};
        s += len + (s[len] == ',');
    }
    if (!r->n_lora_params) {
        snprintf(message, size, "%s: names no parameter", key);
        return false;
    }
    return true;
}

/* "8,8,8,8": the layers of each stage, in order */
static bool parse_pp_layers(vp_recipe *r, const char *key, const char *s, const char *shown, char *message,
                            size_t size) {
    (void)shown;
    unsigned n = 0;
    while (s && *s && n < VP_MAX_STAGES) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 100000 || (*end && *end != ',')) {
            s = NULL;
            break;
        }
        r->pp_layers[n++] = (unsigned)v;
        s = *end ? end + 1 : end;
    }
    if (!s || n == 0) {
        snprintf(message, size, "%s: must list the layers of each stage, as \"8,8,8,8\"", key);
        return false;
    }
    r->n_pp_layers = n;
    return true;
}

/* ---- options whose names or storage are not a plain array ---- */

/* the registries' names: each table lists its entries once */
static const char *optimizer_name(unsigned index) {
    const vp_optimizer_kind *kind = vp_optimizer_at(index);
    return kind ? kind->name : NULL;
}
static const char *precision_name(unsigned index) {
    const vp_precision *precision = index < VP_PREC_COUNT ? vp_precision_get((vp_precision_id)index) : NULL;
    return precision ? precision->name : NULL;
}
static const char *framework_name(unsigned index) {
    const vp_framework_kind *framework = vp_framework_at(index);
    return framework ? framework->name : NULL;
}
static const char *finetune_name(unsigned index) {
    const vp_finetune_method *method = vp_finetune_method_at(index);
    return method ? method->name : NULL;
}

static const char *const compute_dtype_names[] = {"bf16", "fp16", "fp32", NULL};
static void store_compute_dtype(vp_recipe *r, unsigned index) {
    static const vp_dtype dtypes[] = {VP_BF16, VP_FP16, VP_FP32};
    r->compute_dtype = dtypes[index];
}

/* ---- values the echo derives from the resolved recipe ---- */

static void set_integer(vp_key_value *out, int64_t v) {
    out->kind = VP_VALUE_INTEGER;
    out->integer = v;
}
static void set_bool(vp_key_value *out, bool v) {
    out->kind = VP_VALUE_BOOL;
    out->boolean = v;
}
static void set_string(vp_key_value *out, const char *s) {
    out->kind = VP_VALUE_STRING;
    out->string = s;
}

static void value_weight_decay(const vp_recipe *r, vp_key_value *out) {
    out->kind = VP_VALUE_NUMBER;
    out->number = vp_optimizer_weight_decay(vp_optimizer_at(r->optimizer), r);
}
static void value_target_len(const vp_recipe *r, vp_key_value *out) {
    set_integer(out, (int64_t)(r->target_len ? r->target_len : r->seq_len));
}
static void value_checkpointing(const vp_recipe *r, vp_key_value *out) {
    if (r->selective) set_string(out, "selective");
    else if (r->checkpoint_ops) set_string(out, "op-selective");
    else if (r->checkpoint_layers) {
        snprintf(out->text, sizeof out->text, "layers-%u", r->checkpoint_layers);
        set_string(out, out->text);
    } else if (r->checkpoint_every == 0) set_string(out, "none");
    else if (r->checkpoint_every == 1) set_string(out, "full");
    else {
        snprintf(out->text, sizeof out->text, "every-%u", r->checkpoint_every);
        set_string(out, out->text);
    }
}
static void value_early_stop(const vp_recipe *r, vp_key_value *out) { set_bool(out, vp_recipe_checkpoint_early_stop(r)); }
static void value_offload_streams(const vp_recipe *r, vp_key_value *out) { set_bool(out, vp_recipe_offload_streams(r)); }
static void value_sdpa_enable_gqa(const vp_recipe *r, vp_key_value *out) { set_bool(out, vp_recipe_sdpa_enable_gqa(r)); }
static void value_rerun_reshards(const vp_recipe *r, vp_key_value *out) {
    set_bool(out, vp_recipe_fsdp2_rerun_reshards(r));
}
/* DeepSpeed's overlap_comm defaults to on for stage 3 only */
static void value_overlap(const vp_recipe *r, vp_key_value *out) {
    set_bool(out, r->overlap_comm >= 0 ? r->overlap_comm : r->zero == 3);
}
static void value_etp(const vp_recipe *r, vp_key_value *out) { set_integer(out, r->etp ? r->etp : r->tp); }
static void value_microbatches(const vp_recipe *r, vp_key_value *out) { set_integer(out, vp_recipe_microbatches(r)); }
static void value_global_batch(const vp_recipe *r, vp_key_value *out) {
    set_integer(out, (int64_t)vp_recipe_microbatches(r) * (int64_t)r->micro_batch * r->dp);
}
static unsigned recipe_gpus(const vp_recipe *r) { return r->dp * r->tp * r->pp * r->cp; }
static void value_gpus(const vp_recipe *r, vp_key_value *out) { set_integer(out, recipe_gpus(r)); }
static void value_gpus_per_node(const vp_recipe *r, vp_key_value *out) {
    unsigned gpus = recipe_gpus(r);
    set_integer(out, r->gpus_per_node ? r->gpus_per_node : (gpus < 8 ? gpus : 8));
}
static void value_alloc_conf(const vp_recipe *r, vp_key_value *out) {
    vp_alloc_config_format(&r->alloc_conf, out->text, sizeof out->text);
    set_string(out, out->text);
}
static void value_load(const vp_recipe *r, vp_key_value *out) { set_string(out, vp_load_names[vp_recipe_load(r)]); }
static void value_lora_targets(const vp_recipe *r, vp_key_value *out) {
    if (r->lora_targets == vp_module_all_linear()) snprintf(out->text, sizeof out->text, "all-linear");
    else vp_module_format(vp_lora_targets(r), out->text, sizeof out->text);
    for (unsigned i = 0; i < r->n_lora_names; i++) {
        size_t used = strlen(out->text);
        snprintf(out->text + used, sizeof out->text - used, "%s%s", used ? "," : "", vp_lora_name(r, i));
    }
    set_string(out, out->text);
}
static void value_lora_params(const vp_recipe *r, vp_key_value *out) {
    out->text[0] = '\0';
    for (unsigned i = 0; i < r->n_lora_params; i++) {
        size_t used = strlen(out->text);
        const vp_lora_param *p = &r->lora_params[i];
        if (p->layer >= 0)
            snprintf(out->text + used, sizeof out->text - used, "%s%d.mlp.experts.%s", used ? "," : "", p->layer,
                     lora_param_names[p->param]);
        else
            snprintf(out->text + used, sizeof out->text - used, "%smlp.experts.%s", used ? "," : "",
                     lora_param_names[p->param]);
    }
    set_string(out, out->text);
}
static void value_modules_to_save(const vp_recipe *r, vp_key_value *out) {
    vp_module_format(r->modules_to_save, out->text, sizeof out->text);
    for (unsigned i = 0; i < r->n_saved_names; i++) {
        size_t used = strlen(out->text);
        snprintf(out->text + used, sizeof out->text - used, "%s%s", used ? "," : "", vp_saved_name(r, i));
    }
    set_string(out, out->text);
}
/* QLoRA's base is NF4 unless the recipe names another format */
static void value_quant(const vp_recipe *r, vp_key_value *out) {
    set_string(out, r->quant == VP_QUANT_NONE ? "nf4" : vp_quant_names[r->quant]);
}
static void value_compute_dtype(const vp_recipe *r, vp_key_value *out) { set_string(out, vp_dtype_names[r->compute_dtype]); }

/* ---- which keys the echo shows for which recipe ---- */

static bool with_adapters(const vp_recipe *r) { return vp_finetune_method_of(r)->frozen_base; }
static bool with_virtual_tokens(const vp_recipe *r) { return vp_finetune_method_of(r)->virtual_tokens != VP_VIRTUAL_NONE; }
static bool with_chunked_loss(const vp_recipe *r) {
    return r->loss == VP_LOSS_CHUNKED || r->loss == VP_LOSS_CHUNKED_LINEAR;
}
static bool with_torch_pipeline(const vp_recipe *r) { return r->pp > 1 && vp_pp_torch(r); }
static bool with_freezing(const vp_recipe *r) { return vp_finetune_method_of(r)->trains_last_layers; }
static bool with_quantized_base(const vp_recipe *r) { return vp_finetune_method_of(r)->quantizes_base; }
static bool with_int8_base(const vp_recipe *r) { return with_quantized_base(r) && r->quant == VP_QUANT_INT8; }
static bool with_simulated_allocator(const vp_recipe *r) { return r->allocator == VP_ALLOCATOR_SIMULATED; }
static bool with_sdpa(const vp_recipe *r) { return r->attention == VP_ATTN_SDPA; }
static bool with_fsdp2(const vp_recipe *r) { return vp_framework_of(r) == &vp_framework_fsdp2; }
static bool with_float8(const vp_recipe *r) {
    const vp_precision *p = vp_precision_get(r->precision);
    return p && p->fp8_dynamic;
}
static bool with_float8_fsdp2(const vp_recipe *r) { return with_fsdp2(r) && with_float8(r); }
static bool with_mixed_fsdp2(const vp_recipe *r) { return with_fsdp2(r) && vp_precision_is_mixed(r->precision); }
static bool with_zero3(const vp_recipe *r) { return r->framework == VP_FRAMEWORK_DEEPSPEED && r->zero == 3; }
static bool with_offload_torchtune(const vp_recipe *r) { return r->offload_activations && r->offload_torchtune; }
static bool with_offload_trl(const vp_recipe *r) { return with_offload_torchtune(r) && r->offload_trl; }

#define UINT_KEY(key, f, lo, hi, def) .name = key, .kind = VP_KEY_UINT, .offset = FIELD(f), .min = lo, .max = hi, .fallback = def
#define U64_KEY(key, f, lo, hi, def) .name = key, .kind = VP_KEY_U64, .offset = FIELD(f), .min = lo, .max = hi, .fallback = def
#define NUMBER_KEY(key, f, lo, hi, def) .name = key, .kind = VP_KEY_NUMBER, .offset = FIELD(f), .min = lo, .max = hi, .fallback = def
#define ELEMENTS_KEY(key, f, lo, hi, def) .name = key, .kind = VP_KEY_ELEMENTS, .offset = FIELD(f), .min = lo, .max = hi, .fallback = def
#define BOOL_KEY(key, f, def) .name = key, .kind = VP_KEY_BOOL, .offset = FIELD(f), .fallback = def
#define TRISTATE_KEY(key, f) .name = key, .kind = VP_KEY_TRISTATE, .offset = FIELD(f), .fallback = -1
#define OPTION_KEY(key, f, names, def) .name = key, .kind = VP_KEY_OPTION, .offset = FIELD(f), .choices = names, .fallback = def
#define TEXT_KEY(key, parser) .name = key, .kind = VP_KEY_TEXT, .parse_text = parser

/* In the order `vramplan keys`, the JSON echo and the docs list them. */
static const vp_recipe_key keys[] = {
    {OPTION_KEY("precision", precision, NULL, VP_PREC_MIXED_BF16), .choice_at = precision_name,
     .doc = "fp32, bf16, fp16 train the model in that dtype; amp-* autocasts over fp32 weights; bf16-autocast and "
            "fp16-autocast over 16-bit weights (the Trainer's bf16=True over a model loaded in bf16); mixed-* keeps 16-bit "
            "weights and fp32 master weights; fp8 is Transformer Engine's; fp8-torchao is torchao's Float8Linear "
            "(dynamic scaling, fp8_recipe; torchtitan's float8 converter)"},
    /* torchao's Float8LinearConfig.from_recipe_name (float8/config.py);
     * torchtitan's float8.recipe_name */
    {OPTION_KEY("fp8_recipe", fp8_recipe, vp_float8_recipe_names, VP_FLOAT8_TENSORWISE), .applies = with_float8,
     .doc = "precision fp8-torchao: torchao's recipe, dynamic scaling per tensor, per row (every cast, e4m3 "
            "throughout), or per row with grad_weight in bf16 (rowwise_with_gw_hp) [tensorwise]"},
    {OPTION_KEY("optimizer", optimizer, NULL, 0), .choice_at = optimizer_name,
     .doc = "the optimizer (none: forward and backward only)"},
    {OPTION_KEY("optimizer_impl", optimizer_impl, vp_optimizer_impl_names, VP_IMPL_AUTO),
     .doc = "the optimizer's kernels; auto picks foreach for torch.optim, fused for DeepSpeed"},
    {OPTION_KEY("kernels", kernels, vp_kernels_names, VP_KERNELS_AUTO),
     .doc = "the model code's element-wise kernels, for the step time: eager (transformers' and torchtitan's modules: "
            "an RMSNorm or a rotary embedding written in Python runs a kernel per op) or fused (Megatron-LM, "
            "Transformer Engine, Liger, torch.compile); auto: fused under framework megatron or compile [auto]"},
    {NUMBER_KEY("weight_decay", weight_decay, 0, 1e6, -1), .value = value_weight_decay,
     .doc = "weight decay; by default the optimizer's own (AdamW 0.01, others 0)"},
    {BOOL_KEY("first_moment", first_moment, false),
     .doc = "adafactor or sm3: keep a first moment, one state per parameter (Adafactor's beta1 set: fp32; SM3's "
            "momentum > 0: the gradient's dtype); their libraries' default is none [false]"},
    /* torchtune's optimizer_in_bwd (torchtune/modules/optim.py OptimizerInBackward,
     * training/memory.py register_optim_in_bwd_hooks) */
    {BOOL_KEY("optimizer_in_backward", optimizer_in_backward, false),
     .doc = "torchtune's optimizer in backward: one optimizer per parameter, stepped in its post-accumulate-grad hook "
            "and its gradient set to None at once, so gradients never all live together; one GPU, no gradient "
            "accumulation, no master weights [false]"},
    /* torchtitan's training.compile (torch.compile per block): each layer's
     * saved tensors are the min-cut partitioner's (compile_region.c,
     * docs/compile.md) */
    {BOOL_KEY("compile", compile, false),
     .doc = "torch.compile as torchtitan applies it (framework fsdp2) and torchtune's compile_model (framework "
            "torch): each block a compiled region whose saved tensors are AOTAutograd's min cut (docs/compile.md) "
            "[false]"},
    /* torchtune's training.compile_loss (recipes with compile: True):
     * CEWithChunkedOutputLoss.compute_cross_entropy, or the whole loss
     * module, under torch.compile (torchtune/training/_compile.py) */
    {BOOL_KEY("compile_loss", compile_loss, false),
     .doc = "with compile: the loss a compiled region too, as torchtune's compile_loss does (each chunk's "
            "cross-entropy of the chunked loss: its saved tensors the min cut's) [false; stack torchtune: compile]"},
    {U64_KEY("micro_batch", micro_batch, 1, 1 << 24, 1), .doc = "sequences per micro-batch"},
    {U64_KEY("seq_len", seq_len, 1, 1 << 26, 2048), .doc = "tokens per sequence"},
    {U64_KEY("target_len", target_len, 1, 1 << 26, 0), .value = value_target_len,
     .doc = "encoder-decoder models (T5): the decoder's tokens per sequence, the labels' length [seq_len]"},
    {TEXT_KEY("checkpointing", parse_checkpointing), .value = value_checkpointing,
     .doc = "none | full | selective (the attention core, Korthikanti et al.) | every-K (keep the input of every "
            "K-layer chunk) | layers-K (checkpoint every K-th layer alone, the others not at all: torchtitan's "
            "selective layer checkpointing) | op-selective (every layer under torchtitan's op-level policy: matmul "
            "and SDPA outputs saved, every second matmul recomputed; non-reentrant)"},
    /* transformers 4.x's gradient_checkpointing_enable passes
     * use_reentrant=True when given no kwargs (huggingface/transformers
     * #28538); 5.0 passes False (#43203) */
    {BOOL_KEY("use_reentrant", use_reentrant, true),
     .doc = "full or every-K: torch.utils.checkpoint's use_reentrant (gradient_checkpointing_kwargs); false saves "
            "holders in the forward and recomputes on backward's first unpack (transformers 4.x passes true, 5.x "
            "false) [true]"},
    {TRISTATE_KEY("checkpoint_early_stop", checkpoint_early_stop), .value = value_early_stop,
     .doc = "use_reentrant = false: the rerun stops once it has remade every saved tensor "
            "(torch.utils.checkpoint.set_checkpoint_early_stop) [true; false with torch_version 1.13]"},
    /* transformers' default attn_implementation */
    {OPTION_KEY("attention", attention, vp_attention_names, VP_ATTN_SDPA), .doc = "the attention kernel"},
    {OPTION_KEY("sdpa_backend", sdpa_backend, vp_sdpa_backend_names, VP_SDPA_AUTO), .applies = with_sdpa,
     .doc = "attention = sdpa with 16-bit inputs: the backend PyTorch runs; auto is cuDNN's attention on compute "
            "capability 9.x and 10.x (PyTorch 2.11's check_prefer_cudnn_attention, cuDNN 9.15.1+; measured on an "
            "H200, docs/gpu-check.md), the flash kernel elsewhere or without a GPU (the memory-efficient one before "
            "Ampere, which has no flash kernel); flash where "
            "TORCH_CUDNN_SDPA_DEPRIORITIZED=1 or an older PyTorch picks it [auto]"},
    /* integrations/sdpa_attention.py, use_gqa_in_sdpa (huggingface/
     * transformers#39412, 4.54); PyTorch's flash backend takes fewer key
     * heads (sdp_utils.cpp, can_use_flash_attention: check_batch_size_and_
     * num_heads_dense<true>), cuDNN's from 2.8 */
    {TRISTATE_KEY("sdpa_enable_gqa", sdpa_enable_gqa), .applies = with_sdpa, .value = value_sdpa_enable_gqa,
     .doc = "attention = sdpa over a model with fewer key/value heads than query heads, in transformers' modelling "
            "code, SDPA given no mask: the key and value heads handed to SDPA as they are with enable_gqa=True, not "
            "repeated to every query head first (repeat_kv's copies, which SDPA saves); the flash and cuDNN backends "
            "take them, flash's backward expanding the key and value gradients to every head before summing them; "
            "where the memory-efficient kernel runs (32-bit inputs, GPUs before Ampere) SDPA falls back to its math "
            "backend (s x s probabilities kept) unless torch_version is 2.x, the newest, whose kernel takes them. "
            "Heads wider than 256 are repeated all the same; false where the batches are padded (a mask) [auto: true "
            "under transformers 5 (a Trainer stack's default) or a transformers_version from 4.54, with "
            "torch_version 2.5 or later on a GPU; else false]"},
    {OPTION_KEY("model_code", model_code, vp_model_code_names, VP_CODE_AUTO),
     .doc = "whose modelling code runs the model, where layouts differ: transformers' sdpa path before 4.56 makes the "
            "query contiguous, so cuDNN's attention output needs a copy to merge the heads; torchtune's and torchtitan's "
            "hand SDPA a transposed view; auto: torchtitan under framework fsdp2 (transformers with a PEFT "
            "method: torchtitan trains whole models), else transformers "
            "[auto; stack torchtune: torchtune]"},
    /* PreTrainedModel.get_correct_experts_implementation (transformers 5's
     * modeling_utils.py): grouped_mm when none is asked for, unless
     * _grouped_mm_can_dispatch fails (a class without
     * @use_experts_implementation), then eager; set by
     * from_pretrained(experts_implementation=...) */
    {OPTION_KEY("experts_implementation", experts_impl, vp_experts_impl_names, VP_EXPERTS_AUTO),
     .doc = "a mixture's routed experts in transformers: modules is 4.x's ModuleList of nn.Linear experts; eager and "
            "grouped_mm are 5.x's 3-D gate_up_proj and down_proj parameters, run by its per-expert loop (each "
            "expert's weight gradient a select_backward of the whole parameter) or torch._grouped_mm (5.x's "
            "default, grouped_mm whenever the class has @use_experts_implementation); Mixtral's, Qwen3-MoE's, Qwen2-MoE's, "
            "DeepSeek-V2's (transformers' class) and DeepSeek-V3's blocks [auto: grouped_mm under transformers 5 (a "
            "Trainer stack's default, or transformers_version) where vramplan models the block for the recipe, "
            "else modules]"},
    /* set by the stacks (scripts/lib/vramplan/stacks.lua) from transformers_version and the Trainer
     * stacks' default, 5 */
    {UINT_KEY("transformers_major", transformers_major, 0, 5, 0), .hidden = true,
     .doc = "transformers' major version (4 or 5; 0: not named), which the stacks set from transformers_version "
            "or a Trainer stack's default (5): under 5, experts_implementation auto is grouped_mm where the "
            "model's block is modelled [0]"},
    {UINT_KEY("transformers_minor", transformers_minor, 0, 1000, 0), .hidden = true,
     .doc = "transformers' minor version, which the stacks set from a transformers_version such as 4.57.1 (0: not "
            "named): from 4.54, sdpa_enable_gqa auto is true [0]"},
    {OPTION_KEY("framework", framework, NULL, VP_FRAMEWORK_TORCH), .choice_at = framework_name,
     .doc = "the training framework, with its own buffers and defaults; torch is a plain PyTorch loop (DDP with dp)"},
    {OPTION_KEY("torch_version", torch_version, vp_torch_version_names, VP_TORCH_2),
     .doc = "autograd and optimizer behaviour that differs between them: 2.x is the newest (2.10 on); 2.4-2.12 "
            "are 2.x but where a key says otherwise (fsdp2_rerun_reshards)"},
    {OPTION_KEY("device", device, vp_device_names, VP_DEVICE_CUDA),
     .doc = "where the step runs; cpu is the CPU twin the PyTorch harness measures"},
    /* Liger-Kernel's module patches (src/liger_kernel/transformers/monkey_patch.py,
     * apply_liger_kernel_to_llama and the others: rms_norm, swiglu) */
    {BOOL_KEY("liger_rms_norm", liger_rms_norm, false),
     .doc = "Liger-Kernel's RMSNorm (LigerRMSNormFunction) where Liger's patch for the model type swaps it in "
            "(the rmsnorm ops' liger field: not DeepSeek's or Qwen2-MoE's model types, not T5): one kernel keeping "
            "its input and a per-row fp32 rstd, its backward writing the input's gradient over the incoming one "
            "(out of place for Gemma 2 and 3 and OLMo-2), instead of the fp32 copies each step of transformers' "
            "norm saves [false; stack hf-trainer or trl: use_liger_kernel; axolotl: liger_rms_norm; "
            "llama-factory: enable_liger_kernel]"},
    {BOOL_KEY("liger_swiglu", liger_swiglu, false),
     .doc = "Liger-Kernel's gated MLPs (LigerSiLUMulFunction; Gemma's GEGLU alike) where Liger's patch for the "
            "model type swaps them in (the mlp and moe ops' liger field): act(gate) * up in one kernel keeping "
            "gate and up, whose backward writes their gradients over them, instead of the activation's own "
            "output kept beside them; Mixtral's and Qwen3-MoE's experts too (transformers 4.x's modules; 5.x's "
            "LigerExperts, one fused MoE Function) [false; stack hf-trainer or trl: use_liger_kernel; axolotl: "
            "liger_glu_activation; llama-factory: enable_liger_kernel]"},
    /* monkey_patch.py's apply_liger_kernel_to_<model_type>: with no model
     * it swaps transformers' classes (modeling_qwen3.Qwen3RMSNorm =
     * LigerRMSNorm) before the model is built; given the built model
     * (_apply_liger_kernel_to_instance) it patches the modules it names */
    {BOOL_KEY("liger_before_load", liger_before_load, true),
     .doc = "with liger_rms_norm: Liger's patch runs before the model is built and swaps transformers' norm class, "
            "so every norm of that class is Liger's, the attention's q_norm and k_norm included (Qwen3, "
            "Qwen3-MoE, OLMo-2; AutoLigerKernelForCausalLM, axolotl's Liger plugin, LLaMA-Factory); false: "
            "it patches the built model's modules (the Trainer's use_liger_kernel), which leaves Qwen3's and "
            "OLMo-2's q_norm and k_norm transformers' (Gemma 3's are patched either way) [true; stack "
            "hf-trainer or trl: false]"},
    {BOOL_KEY("keep_logits", keep_logits, true), .doc = "the loop keeps the model's outputs (logits) until the step ends"},
    /* accelerate/utils/operations.py: ConvertOutputsToFp32, which
     * Accelerator.prepare_model puts around the model's forward under native
     * amp (accelerator.py) */
    {BOOL_KEY("outputs_fp32", outputs_fp32, false),
     .doc = "accelerate's convert_outputs_to_fp32: as the model's forward returns, every fp16 / bf16 tensor in its "
            "outputs (the logits, router logits, an encoder's last hidden state, a cache returned as "
            "tuples: GPT-2's and BLOOM's presents) is copied to fp32 in place of the 16-bit one, all copies made "
            "before the 16-bit ones go; under the Trainer's fp16 / bf16 autocast outside DeepSpeed and "
            "Megatron-LM [false; stack hf-trainer, trl, axolotl or llama-factory: true under an autocast "
            "precision]"},
    {OPTION_KEY("loss", loss, vp_loss_names, VP_LOSS_CROSS_ENTROPY),
     .doc = "the causal-LM loss (docs/loss.md): cross-entropy is HF's ForCausalLMLoss over full fp32 logits; fused "
            "FlashAttention's cross-entropy kernel on the 16-bit logits, its gradient written into them "
            "(inplace_backward); chunked torchtune's chunked output and CEWithChunkedOutputLoss, the logits freed "
            "before backward; fused-linear Liger's fused linear cross-entropy (gradients made in the forward); cut "
            "Apple's cut cross-entropy (no logits kept); chunked-linear torchtune's LinearCrossEntropyLoss (its "
            "configs' default after 0.6.1, April 2025: the head applied chunk by chunk inside the loss to the "
            "tokens with a target); liger-ce HF's ForCausalLMLoss with Liger-Kernel's cross-entropy in place of "
            "F.cross_entropy (its kernel writes the gradient into the fp32 logits it keeps) [cross-entropy]"},
    /* torchtune's CEWithChunkedOutputLoss and LinearCrossEntropyLoss: num_output_chunks=8 */
    {UINT_KEY("loss_chunks", loss_chunks, 1, VP_LOSS_CHUNKS_MAX, 8), .applies = with_chunked_loss,
     .doc = "loss = chunked, chunked-linear: the tokens split into this many chunks, each through the head and "
            "the loss (torchtune's num_output_chunks), at most 8 [8]"},
    {BOOL_KEY("grads_set_to_none", grads_set_to_none, true),
     .doc = "zero_grad(set_to_none=True): gradients freed between steps"},
    /* PretrainedConfig.use_cache */
    {BOOL_KEY("use_cache", use_cache, true),
     .doc = "the model's outputs keep every layer's keys and values (the configs' default; off under checkpointing) "
            "[true]"},
    {BOOL_KEY("offload_activations", offload_activations, false),
     .doc = "the forward under torch.autograd.graph.save_on_cpu(pin_memory=True): what autograd saves goes to pinned "
            "host memory [false]"},
    /* torchtune/training/_activation_offloading.py (OffloadActivations,
     * torchtune 0.4): saved tensors of min_offload_size = 1024 bytes or more
     * that are not parameters or buffers go to pinned host memory; the
     * recipes enter it around the model's forward only, and
     * get_act_offloading_ctx_manager suspends it around the output
     * projection (NoOpManager): the head and the loss keep theirs */
    {BOOL_KEY("offload_torchtune", offload_torchtune, false),
     .doc = "offload_activations as torchtune's OffloadActivations does it: the decoder's saved tensors of 1 KiB or "
            "more but its parameters; the output head and the loss keep theirs on the GPU [false; stack torchtune: "
            "true]"},
    /* OffloadActivations(use_streams=None): on from PyTorch 2.5 */
    {TRISTATE_KEY("offload_streams", offload_streams), .applies = with_offload_torchtune,
     .value = value_offload_streams,
     .doc = "offload_torchtune: OffloadActivations' use_streams, a copy stream of its own: each offloaded tensor "
            "stays on the GPU until five packs later, and one brought back in backward until the next node that "
            "brings some back has run [true from torch_version 2.5; false with 1.13 and 2.4]"},
    /* trl/models/activation_offloading.py at TRL 1.8 (c26ba878, #6241;
     * #4247 in 0.25 added the storage keys and the parameters' storages,
     * #5694 in 1.4 the contiguous copy); SFTTrainer.training_step enters
     * it around the forward, the loss and backward, and
     * get_act_offloading_ctx_manager's NoOpManager covers lm_head only */
    {BOOL_KEY("offload_trl", offload_trl, false), .applies = with_offload_torchtune,
     .doc = "offload_torchtune: OffloadActivations as TRL 1.8+ (and axolotl's activation_offloading) runs it: a save "
            "of a storage the stash still tracks stays on the GPU, so does a view of a parameter (unless DeepSpeed or "
            "FSDP flatten or gather them); a non-contiguous view goes through a GPU copy the stash keeps; the loss is offloaded, "
            "only lm_head is not [false]"},
    /* axolotl's _patch_trl_offload_compute_stream_clone (src/axolotl/core/
     * trainers/mixins/activation_checkpointing.py, #3833, axolotl 0.18):
     * OffloadActivations' pack hook wrapped so that a saved tensor that is
     * not contiguous or starts at an offset, but a Parameter, is cloned
     * (memory_format=contiguous) on the compute stream first */
    {BOOL_KEY("offload_clone_views", offload_clone_views, false), .applies = with_offload_trl,
     .doc = "offload_trl: axolotl 0.18's patch of it: every saved tensor that is not contiguous or starts at an offset "
            "(a frozen weight's weight.t(), a broadcast), but a parameter itself, is cloned on the compute stream "
            "before the hook sees it, which then offloads or keeps the clone [false; axolotl_version 0.18: true]"},
    {BOOL_KEY("training", training, true), .doc = "dropout active (model.train())"},
    {UINT_KEY("dp", dp, 1, 1 << 20, 1), .doc = "data-parallel ranks (DDP with framework torch)"},
    {UINT_KEY("zero", zero, 0, 3, 0), .doc = "DeepSpeed ZeRO stage 0-3 (framework deepspeed)"},
    {OPTION_KEY("fsdp", fsdp, vp_fsdp_names, VP_FSDP_NONE),
     .doc = "FSDP's sharding strategy (framework fsdp) [full_shard]"},
    {UINT_KEY("fsdp_shard_size", fsdp_shard_size, 1, 1 << 20, 0), .hidden = true,
     .doc = "ranks one model is sharded over: with fsdp = hybrid_shard, or with framework fsdp2 (HSDP: replicated "
            "over dp / fsdp_shard_size; torchtitan's data_parallel_shard_degree) [dp]"},
    /* torchtitan's apply_fsdp (torchtitan/parallelisms/parallelize_llama.py):
     * reshard_after_forward=True for every block but the last */
    {BOOL_KEY("reshard_after_forward", reshard_after_forward, true), .applies = with_fsdp2,
     .doc = "framework fsdp2: each block's gathered parameters freed after its forward and gathered again in "
            "backward (all but the last block and the root, as torchtitan wraps them); false keeps every block "
            "gathered from its forward to its backward [true]"},
    /* FSDPParamGroup.post_forward before and after pytorch#164009 (2.10) */
    {TRISTATE_KEY("fsdp2_rerun_reshards", fsdp2_rerun_reshards), .applies = with_fsdp2, .value = value_rerun_reshards,
     .doc = "framework fsdp2 with reentrant checkpointing: the rerun in backward reshards each block (with "
            "reshard_after_forward) and records its place, so its pre-backward gathers it again and prefetches the "
            "block rerun before it, whose backward is done, held to the end of backward (PyTorch 2.4-2.9) [false; "
            "true with torch_version 2.4-2.9]"},
    /* MixedPrecisionPolicy.reduce_dtype: torchtitan's fp32
     * (parallelize_llama.py, apply_fsdp: mixed_precision_reduce float32);
     * accelerate's set_mixed_precision (utils/dataclasses.py, fsdp_version
     * 2) gives param_dtype and reduce_dtype both the mixed precision's */
    {OPTION_KEY("reduce_dtype", reduce_dtype, vp_reduce_dtype_names, VP_REDUCE_AUTO), .applies = with_mixed_fsdp2,
     .doc = "framework fsdp2 with a mixed precision: the dtype each unit's gradients are reduce-scattered in "
            "(MixedPrecisionPolicy.reduce_dtype; the reduce-scatter input is the unit's unsharded gradients in it, "
            "its output cast to the fp32 shard); auto: fp32 as torchtitan runs it, the 16-bit parameters' dtype "
            "under model_code transformers as accelerate's fsdp_version 2 sets it [auto]"},
    /* torchao's Float8LinearConfig.enable_fsdp_float8_all_gather (float8/config.py,
     * fsdp_utils.py WeightWithDynamicFloat8CastTensor); torchtitan's
     * float8.enable_fsdp_float8_all_gather */
    {BOOL_KEY("fp8_all_gather", fp8_all_gather, false), .applies = with_float8_fsdp2,
     .doc = "framework fsdp2 with precision fp8-torchao: each float8 linear's weight shard cast to float8 before "
            "FSDP2's all-gather (1 byte an element gathered, no weight cast in the GEMMs; torchao's "
            "enable_fsdp_float8_all_gather) [false]"},
    /* torchtitan's enable_async_tensor_parallel (parallelize_llama.py,
     * apply_tp: torch._inductor.config._micro_pipeline_tp = True and
     * enable_symm_mem_for_group on the tp group; prims.c, funcol) */
    {BOOL_KEY("async_tp", async_tp, false), .applies = with_fsdp2,
     .doc = "framework fsdp2 with tp and compile: torchtitan's async tensor parallelism (Inductor's micro-pipeline "
            "TP fuses the compiled blocks' all-gathers into their matmuls and the matmuls into their "
            "reduce-scatters: no funcol cat beside them, plus a symmetric-memory workspace outside the caching "
            "allocator) [false]"},
    {OPTION_KEY("offload_optimizer", offload_optimizer, vp_offload_names, VP_OFFLOAD_NONE),
     .doc = "DeepSpeed's optimizer offload (master weights, states, fp32 gradients)"},
    {OPTION_KEY("offload_params", offload_params, vp_offload_names, VP_OFFLOAD_NONE),
     .doc = "ZeRO-3 parameter offload, FSDP's CPUOffload, FSDP2's CPUOffloadPolicy (parameters, gradients and "
            "optimizer states)"},
    /* DeepSpeed's defaults (deepspeed/runtime/zero/config.py): 5e8, 5e8, 5e7 */
    {ELEMENTS_KEY("reduce_bucket_size", reduce_bucket_size, 1, 1e12, 5e8),
     .doc = "DeepSpeed reduce bucket, elements [5e8]"},
    {ELEMENTS_KEY("allgather_bucket_size", allgather_bucket_size, 1, 1e12, 5e8), .hidden = true,
     .doc = "DeepSpeed all-gather bucket, elements [5e8]"},
    {ELEMENTS_KEY("stage3_prefetch_bucket_size", prefetch_bucket_size, 0, 1e12, 5e7),
     .doc = "ZeRO-3 parameters gathered ahead, elements [5e7]"},
    /* DeepSpeed's DeepSpeedZeroConfig defaults */
    {ELEMENTS_KEY("stage3_max_live_parameters", max_live_parameters, 0, 1e15, 1e9),
     .doc = "ZeRO-3: gathered parameters beyond which nothing more is prefetched, elements [1e9]"},
    {ELEMENTS_KEY("stage3_max_reuse_distance", max_reuse_distance, 0, 1e15, 1e9),
     .doc = "ZeRO-3: a gathered parameter used again within this many elements of the module trace is not released, "
            "elements [1e9]"},
    {ELEMENTS_KEY("stage3_param_persistence_threshold", persistence_threshold, 0, 1e15, 1e5),
     .doc = "ZeRO-3: parameters with fewer elements stay gathered on every rank [1e5]"},
    /* transformers' from_pretrained builds under zero.Init when a ZeRO-3
     * config is live (is_deepspeed_zero3_enabled: the Trainer's, or
     * accelerate's with zero3_init_flag) */
    {BOOL_KEY("zero_init", zero_init, true), .applies = with_zero3,
     .doc = "ZeRO-3: the model built under deepspeed.zero.Init, each parameter partitioned as it is made; false: "
            "built whole, moved to the GPU whole by deepspeed.initialize and partitioned there (accelerate's "
            "zero3_init_flag false), which the run's reservation keeps [true]"},
    {TRISTATE_KEY("overlap_comm", overlap_comm), .value = value_overlap,
     .doc = "DeepSpeed overlap_comm: two reduce buckets [on for stage 3 only]; with framework megatron, for the step "
            "time only: --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap [off]"},
    /* DistributedDataParallel(bucket_cap_mb=25, gradient_as_bucket_view=False) */
    {BOOL_KEY("ddp_bucket_view", ddp_bucket_view, false), .doc = "DDP gradient_as_bucket_view [false]"},
    {NUMBER_KEY("ddp_bucket_mb", ddp_bucket_mb, 0.001, 1e6, 25.0), .hidden = true, .doc = "DDP bucket_cap_mb [25]"},
    {UINT_KEY("tp", tp, 1, 1 << 16, 1), .doc = "tensor-parallel ranks (framework megatron)"},
    {UINT_KEY("ep", ep, 1, 1 << 16, 1), .doc = "expert-parallel ranks, within dp x tp x cp (framework megatron)"},
    {UINT_KEY("etp", etp, 1, 1 << 16, 0), .value = value_etp,
     .doc = "expert-tensor-parallel ranks: each expert's width split [tp]"},
    {UINT_KEY("cp", cp, 1, 1 << 16, 1),
     .doc = "context-parallel ranks: the sequence split, K/V passed around a ring (framework megatron)"},
    {BOOL_KEY("sequence_parallel", sequence_parallel, false),
     .doc = "Megatron sequence parallelism: norms, dropouts and the residual stream split along the sequence"},
    {BOOL_KEY("distributed_optimizer", distributed_optimizer, false),
     .doc = "Megatron's distributed optimizer: master weights and states sharded over dp"},
    /* Megatron-LM's default for bf16 (arguments.py) */
    {BOOL_KEY("accumulate_allreduce_grads_in_fp32", grads_in_fp32, true),
     .doc = "Megatron's fp32 main_grad buffers [true]"},
    {UINT_KEY("pp", pp, 1, VP_MAX_STAGES, 1), .doc = "pipeline stages"},
    {OPTION_KEY("pp_schedule", pp_schedule, vp_pp_schedule_names, VP_PP_1F1B),
     .doc = "the pipeline schedule: Megatron-LM's (lower case), or torch.distributed.pipelining's as torchtitan names "
            "them, with torchtitan's split of the layers (zero-bubble, zbv, dualpipev: InterleavedZeroBubble, "
            "ZBVZeroBubble, DualPipeV) [1f1b]"},
    /* torch.distributed.pipelining's _PipelineSchedule.step(return_outputs=True)
     * (pytorch#165822, Oct 2025; before it, always): the last stage keeps
     * every micro-batch's output (PipelineStage.output_chunks) and merges
     * them when the step ends; torchtitan passes False since e5ef99aa
     * (2025-10-22, "release memory earlier") */
    {BOOL_KEY("pp_return_outputs", pp_return_outputs, true),
     .doc = "torch's pipeline schedules: the last stage keeps every micro-batch's output and concatenates them at "
            "the step's end, as step(return_outputs=True) does (torch's default; torchtitan passes False since "
            "Oct 2025) [true]"},
    {UINT_KEY("virtual_stages", virtual_stages, 1, 1024, 1),
     .doc = "model chunks per rank with interleaved-1f1b, Interleaved1F1B or InterleavedZeroBubble [1; torch's: 2; "
            "ZBVZeroBubble and DualPipeV: 2]"},
    {UINT_KEY("num_microbatches", microbatches, 1, 1 << 20, 0), .value = value_microbatches,
     .doc = "micro-batches per step (with pp; gradient accumulation without) [pp]"},
    {UINT_KEY("grad_accum", grad_accum, 1, 1 << 20, 0), .value = value_microbatches,
     .doc = "gradient accumulation steps: micro-batches into the same gradients before the optimizer step [1]"},
    {UINT_KEY("global_batch", global_batch, 1, 1 << 30, 0), .value = value_global_batch,
     .doc = "sequences per optimizer step over all data-parallel ranks: sets grad_accum (num_microbatches with pp) "
            "to global_batch / (micro_batch x dp) [unset]"},
    /* torchtitan's ParallelismConfig (torchtitan/config/configs.py):
     * pipeline_parallel_layers_per_stage (None),
     * pipeline_parallel_first_stage_less_layers and
     * _last_stage_less_layers (1 each) */
    {UINT_KEY("pp_layers_per_stage", pp_layers_per_stage, 1, 1 << 16, 0), .applies = with_torch_pipeline,
     .doc = "torchtitan's pipeline_parallel_layers_per_stage: the stages are ceil((layers + the two below) / this), "
            "pp x the stages per rank [unset: 1 stage per rank, 2 for the looped and V schedules]"},
    {UINT_KEY("pp_first_stage_less_layers", pp_first_less, 0, 1 << 16, 1), .applies = with_torch_pipeline,
     .doc = "torchtitan's split: the layers the embeddings count as, taken from the first stage's share [1]"},
    {UINT_KEY("pp_last_stage_less_layers", pp_last_less, 0, 1 << 16, 1), .applies = with_torch_pipeline,
     .doc = "torchtitan's split: the layers the final norm with the head count as, taken from the last stage's "
            "share [1]"},
    {TEXT_KEY("pp_layers", parse_pp_layers), .hidden = true,
     .doc = "layers of each stage, as \"7,8,8,9\" [an even split]"},
    {UINT_KEY("gpus", gpus, 1, 1 << 24, 0), .value = value_gpus,
     .doc = "GPUs in all: when given, must equal dp x tp x pp x cp"},
    {OPTION_KEY("finetune", finetune, NULL, VP_FINETUNE_FULL), .choice_at = finetune_name,
     .doc = "what is trained [full]"},
    /* peft.LoraConfig: r=8, lora_alpha=8, lora_dropout=0.0 */
    {UINT_KEY("lora_rank", lora_rank, 1, 1 << 16, 8), .applies = with_adapters, .doc = "LoRA's r [8]"},
    {NUMBER_KEY("lora_alpha", lora_alpha, 0, 1e9, 8), .applies = with_adapters,
     .doc = "LoRA's alpha (scaling alpha / r: no memory of its own) [8]"},
    {NUMBER_KEY("lora_dropout", lora_dropout, 0, 0.999, 0), .applies = with_adapters,
     .doc = "dropout on the adapters' input (a mask and a copy per targeted module) [0]"},
    {BOOL_KEY("use_dora", use_dora, false), .applies = with_adapters,
     .doc = "DoRA (LoraConfig's use_dora), with lora or qlora: a trained magnitude per output feature, and each "
            "forward makes B @ A and the weight's column norms whole (a quantized weight dequantized), weight-sized "
            "temporaries [false]"},
    {OPTION_KEY("lora_dtype", lora_dtype, vp_lora_dtype_names, VP_LORA_DTYPE_AUTO), .applies = with_adapters,
     .doc = "the adapters' dtype (LoRA, DoRA, prompt and prefix tuning): auto is PEFT 0.12+'s rule (16-bit adapters "
            "upcast to fp32, unless DeepSpeed or Megatron cast the whole module); base keeps the base model's dtype "
            "(PEFT before 0.12, fsdp_qlora, torchtune); fp32 always fp32 [auto]"},
    {TEXT_KEY("lora_targets", parse_lora_targets), .value = value_lora_targets, .applies = with_adapters,
     .doc = "modules given adapters: names (q_proj,v_proj; a Lua block's own linear names too) or all-linear (every "
            "linear but the head, Lua blocks' included) [q_proj,v_proj; GPT-2 c_attn; BLOOM query_key_value; MPT Wqkv]"},
    {TEXT_KEY("lora_target_parameters", parse_lora_params), .value = value_lora_params, .applies = with_adapters,
     .doc = "PEFT's target_parameters: a mixture's 3-D experts parameters given adapters (lora.ParamWrapper), "
            "mlp.experts.gate_up_proj and mlp.experts.down_proj of every layer, or with a layer's index "
            "(22.mlp.experts.down_proj) of that one; each forward makes the weight's update whole [none]"},
    {TEXT_KEY("modules_to_save", parse_modules_to_save), .value = value_modules_to_save, .applies = with_adapters,
     .doc = "modules trained in full beside the adapters (lm_head, embed_tokens, norm, or a Lua block's own module: "
            "conv1d; a classifier's head joins them by itself)"},
    {UINT_KEY("trainable_layers", trainable_layers, 0, 100000, 0), .applies = with_freezing,
     .doc = "freeze: the last layers trained, with the final norm and head [0]"},
    {UINT_KEY("num_virtual_tokens", virtual_tokens, 1, 1 << 20, 0), .applies = with_virtual_tokens,
     .doc = "prompt tuning: the learned tokens put before every sequence; prefix tuning: the learned keys and values "
            "before every layer's"},
    {OPTION_KEY("sparsity", sparsity, vp_sparsity_names, VP_SPARSITY_NONE),
     .doc = "apex ASP's 2:4 structured sparsity, a bool mask beside every pruned linear weight; it saves no training "
            "memory [none]"},
    /* QLoRA's recipe (Dettmers et al. 2023): NF4, double quantization, bf16 compute */
    {OPTION_KEY("quant", quant, vp_quant_names, VP_QUANT_NONE), .value = value_quant, .applies = with_quantized_base,
     .doc = "qlora: the frozen base's linear weights (bitsandbytes 0.45-0.46); int8 is LLM.int8 with transformers' "
            "outlier threshold 6.0, no outliers found [nf4]"},
    {BOOL_KEY("double_quant", double_quant, true), .applies = with_quantized_base,
     .doc = "qlora: quantize the block scales too (8-bit, in blocks of 256) [true]"},
    /* transformers' BitsAndBytesConfig default */
    {NUMBER_KEY("llm_int8_threshold", int8_threshold, 0, 1e6, 6.0), .applies = with_int8_base,
     .doc = "quant = int8: LLM.int8's outlier threshold; 0 skips the outlier search (its input-sized temporaries) "
            "[6.0]"},
    {OPTION_KEY("compute_dtype", compute_dtype, compute_dtype_names, 0), .store_option = store_compute_dtype,
     .value = value_compute_dtype, .applies = with_quantized_base,
     .doc = "qlora: the dtype 4-bit weights are dequantized to [bf16]"},
    {UINT_KEY("gpus_per_node", gpus_per_node, 1, 1024, 0), .value = value_gpus_per_node,
     .doc = "GPUs per node, for host memory per node [min(gpus, 8)]"},
    /* A reported out-of-memory error: 1.83 GiB reserved but unallocated
     * beside 75.31 GiB allocated (vllm-project/compressed-tensors#587):
     * 2.43 %. Fragmentation depends on the workload; set it per recipe. */
    {NUMBER_KEY("fragmentation", fragmentation, 0, 10, 1.83 / 75.31),
     .doc = "caching-allocator reservation beyond whole segments, as a fraction of the allocated peak"},
    /* engine/core/allocator.c: c10/cuda/CUDACachingAllocator.cpp's default rules
     * replayed over the step's allocations and frees to the steady state */
    {OPTION_KEY("allocator", allocator, vp_allocator_model_names, VP_ALLOCATOR_CONSTANT),
     .doc = "the caching allocator's reservation: constant is the peak's segments plus the fragmentation share "
            "(under FSDP: the default stream's, plus each of its own streams' high-water in segments); "
            "simulated replays the step's allocations through PyTorch's allocator rules (no fragmentation share)"},
    /* c10's allocator options (engine/core/alloc_conf.c), honoured by the
     * simulation (engine/core/allocator.c) */
    {TEXT_KEY("alloc_conf", parse_alloc_conf), .value = value_alloc_conf, .applies = with_simulated_allocator,
     .doc = "PYTORCH_CUDA_ALLOC_CONF's options for allocator = simulated: max_split_size_mb:N, "
            "expandable_segments:True|False, roundup_power2_divisions:N (a power of 2), comma-separated "
            "(docs/reserved.md) [none]"},
    /* engine/step/run_phases.c: the run before the steady state, for
     * per_gpu.peak_reserved_run_bytes (docs/reserved.md) */
    {OPTION_KEY("load", load, vp_load_names, VP_LOAD_AUTO), .value = value_load, .applies = with_simulated_allocator,
     .doc = "auto | cpu | device-map | warmup: how the model reaches the GPU, for the run's reservation "
            "(docs/reserved.md): cpu moves it tensor by tensor (model.to, FSDP's device_id); device-map is "
            "from_pretrained(device_map=...), bitsandbytes quantizing on the GPU; warmup the same after transformers "
            "4.51+'s caching_allocator_warmup; auto is device-map for qlora, cpu otherwise [auto]"},
    /* transformers' integrations/mxfp4.py, convert_moe_packed_tensors:
     * run_phases.c replays it */
    {OPTION_KEY("checkpoint_quant", checkpoint_quant, vp_checkpoint_quant_names, VP_CHECKPOINT_PLAIN),
     .applies = with_simulated_allocator,
     .doc = "none | mxfp4: the checkpoint's quantization, dequantized to bf16 while loading, for the run's "
            "reservation: mxfp4 is GPT-OSS's MXFP4 experts under transformers' Mxfp4Config(dequantize=True), "
            "each experts tensor dequantized on the GPU through int64 nibble indices (docs/reserved.md) [none]"},
    /* The context alone, with CUDA's lazy module loading (the default since
     * PyTorch 1.13): 426 MiB in nvidia-smi on an RTX 6000 Ada with PyTorch
     * 2.10 / CUDA 13 (unslothai/unsloth-zoo#1053); before CUDA 11.7 every
     * kernel was loaded up front and it was over 1 GiB (1343 MiB on a V100
     * in HF's perf_train_gpu_one docs). */
    /* engine/step/nccl.c's NCCL buffers: channels per communicator;
     * NCCL opens at most MAXCHANNELS (64 in NCCL 2.30.7's
     * src/include/device.h; 32 in earlier 2.x) */
    {UINT_KEY("nccl_channels", nccl_channels, 1, 64, 0), .hidden = true,
     .doc = "NCCL's channels per communicator, for its buffers (NCCL_MIN/MAX_NCHANNELS, docs/reserved.md) "
            "[24 over NVLink, 2 over PCIe]"},
    /* NCCL_NVLS_ENABLE (NCCL src/transport/nvls.cc: 2, on where multicast is
     * supported); NeMo's launcher sets it to 0 to save memory
     * (NVIDIA/NeMo-Framework-Launcher#127) */
    {BOOL_KEY("nccl_nvls", nccl_nvls, true), .hidden = true,
     .doc = "NCCL's NVLink SHARP buffers on NVSwitch nodes of compute capability 9.0+ (NCCL_NVLS_ENABLE, "
            "docs/reserved.md) [true]"},
    {NUMBER_KEY("cuda_context_mib", cuda_context_mib, 0, 1 << 20, 426.0),
     .doc = "memory of the CUDA context and its loaded kernels, in MiB (unset: the GPU's measured figure where "
            "hardware/gpus/ has one, as the H200's)"},
};

enum { N_KEYS = sizeof keys / sizeof keys[0] };
_Static_assert(N_KEYS <= VP_RECIPE_KEYS_MAX, "raise VP_RECIPE_KEYS_MAX (recipe_keys.h)");

unsigned vp_recipe_key_count(void) { return N_KEYS; }

const vp_recipe_key *vp_recipe_key_at(unsigned index) { return index < N_KEYS ? &keys[index] : NULL; }

const vp_recipe_key *vp_recipe_key_find(const char *name) {
    for (unsigned i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

const char *vp_recipe_key_choice(const vp_recipe_key *key, unsigned index) {
    if (key->choice_at) return key->choice_at(index);
    if (!key->choices) return NULL;
    for (unsigned i = 0; i < index; i++)
        if (!key->choices[i]) return NULL;
    return key->choices[index];
}

static void *field(vp_recipe *recipe, const vp_recipe_key *key) { return (char *)recipe + key->offset; }
static const void *const_field(const vp_recipe *recipe, const vp_recipe_key *key) {
    return (const char *)recipe + key->offset;
}

void vp_recipe_key_set_integer(vp_recipe *recipe, const vp_recipe_key *key, int64_t value) {
    if (key->kind == VP_KEY_U64) {
        uint64_t v = (uint64_t)value;
        memcpy(field(recipe, key), &v, sizeof v);
    } else {
        unsigned v = (unsigned)value;
        memcpy(field(recipe, key), &v, sizeof v);
    }
}

void vp_recipe_key_set_number(vp_recipe *recipe, const vp_recipe_key *key, double value) {
    memcpy(field(recipe, key), &value, sizeof value);
}

void vp_recipe_key_set_bool(vp_recipe *recipe, const vp_recipe_key *key, bool value) {
    if (key->kind == VP_KEY_TRISTATE) {
        int v = value;
        memcpy(field(recipe, key), &v, sizeof v);
    } else {
        memcpy(field(recipe, key), &value, sizeof value);
    }
}

void vp_recipe_key_set_option(vp_recipe *recipe, const vp_recipe_key *key, unsigned index) {
    if (key->store_option) {
        key->store_option(recipe, index);
        return;
    }
    int v = (int)index;
    memcpy(field(recipe, key), &v, sizeof v);
}

static void field_value(const vp_recipe *r, const vp_recipe_key *key, vp_key_value *out);

void vp_recipe_key_value(const vp_recipe *r, const vp_recipe_key *key, vp_key_value *out) {
    memset(out, 0, sizeof *out);
    if (key->hidden || (key->applies && !key->applies(r))) return; /* VP_VALUE_HIDDEN */
    field_value(r, key, out);
}

void vp_recipe_key_default(const vp_recipe_key *key, vp_key_value *out) {
    vp_recipe r;
    vp_recipe_defaults(&r);
    vp_recipe_resolve(&r);
    memset(out, 0, sizeof *out);
    field_value(&r, key, out);
}

/* The key's value read from its field, or through its own echo. */
static void field_value(const vp_recipe *r, const vp_recipe_key *key, vp_key_value *out) {
    if (key->value) {
        key->value(r, out);
        return;
    }
    const void *p = const_field(r, key);
    switch (key->kind) {
    case VP_KEY_UINT: {
        unsigned v;
        memcpy(&v, p, sizeof v);
        set_integer(out, v);
        break;
    }
    case VP_KEY_U64: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        set_integer(out, (int64_t)v);
        break;
    }
    case VP_KEY_NUMBER:
        out->kind = VP_VALUE_NUMBER;
        memcpy(&out->number, p, sizeof out->number);
        break;
    case VP_KEY_ELEMENTS: { /* element counts read as whole numbers */
        double v;
        memcpy(&v, p, sizeof v);
        set_integer(out, (int64_t)v);
        break;
    }
    case VP_KEY_BOOL: {
        bool v;
        memcpy(&v, p, sizeof v);
        set_bool(out, v);
        break;
    }
    case VP_KEY_TRISTATE: {
        int v;
        memcpy(&v, p, sizeof v);
        set_bool(out, v > 0);
        break;
    }
    case VP_KEY_OPTION: {
        int v;
        memcpy(&v, p, sizeof v);
        set_string(out, vp_recipe_key_choice(key, (unsigned)v));
        break;
    }
    case VP_KEY_TEXT: break; /* text keys echo through their own value function */
    }
}

void vp_recipe_defaults(vp_recipe *recipe) {
    memset(recipe, 0, sizeof *recipe); /* every key unset, then the defaults */
    for (unsigned i = 0; i < N_KEYS; i++) {
        const vp_recipe_key *key = &keys[i];
        switch (key->kind) {
        case VP_KEY_UINT:
        case VP_KEY_U64: vp_recipe_key_set_integer(recipe, key, (int64_t)key->fallback); break;
        case VP_KEY_NUMBER:
        case VP_KEY_ELEMENTS: vp_recipe_key_set_number(recipe, key, key->fallback); break;
        case VP_KEY_BOOL: vp_recipe_key_set_bool(recipe, key, key->fallback != 0); break;
        case VP_KEY_TRISTATE: {
            int v = (int)key->fallback;
            memcpy(field(recipe, key), &v, sizeof v);
            break;
        }
        case VP_KEY_OPTION: vp_recipe_key_set_option(recipe, key, (unsigned)key->fallback); break;
        case VP_KEY_TEXT: break; /* zero: none, PEFT's targets, an even split */
        }
    }
}
