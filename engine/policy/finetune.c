/* finetune.c — what a recipe trains: full fine-tuning, PEFT's LoRA and
 * prompt tuning, QLoRA's quantized base, frozen layers; which weights get
 * adapters or are stored 4-bit, how many parameters are trained, and the
 * recipes that do not hold together with a model. */
#include "finetune.h"

#include <stdio.h>
#include <string.h>

#include "framework.h"
#include "ops.h"
#include "precision.h"

/* The modules trained in full: the recipe's modules_to_save, and under
 * PEFT a classifier's head, which PeftModelForSequenceClassification
 * (task_type SEQ_CLS) adds to them ("classifier", "score"). */
static vp_module_set saved_modules(const vp_recipe *recipe) {
    vp_module_set head = vp_finetune_method_of(recipe)->peft ? vp_module_bit(VP_MODULE_CLASSIFIER) : 0;
    return recipe->modules_to_save | head;
}

/* modules_to_save's index of a Lua block's own module name, or -1. */
static int saved_name_index(const vp_recipe *recipe, const vp_leaf_spec *spec) {
    if (spec->module != VP_MODULE_NONE || !spec->module_name) return -1;
    for (unsigned i = 0; i < recipe->n_saved_names; i++)
        if (strcmp(vp_saved_name(recipe, i), spec->module_name) == 0) return (int)i;
    return -1;
}

/* Whether the recipe's modules_to_save name the parameter's module: a
 * core module, or a Lua block's own (PEFT's ModulesToSaveWrapper wraps
 * any module whose path ends with a name given). */
static bool saved(const vp_recipe *recipe, const vp_leaf_spec *spec) {
    return vp_module_in(saved_modules(recipe), spec->module) || saved_name_index(recipe, spec) >= 0;
}

bool vp_finetune_trains(const vp_recipe *recipe, const vp_leaf_spec *spec, bool frozen) {
    if (!spec->trainable || spec->buffer) return false;
    if (saved(recipe, spec)) return true;
    const vp_finetune_method *method = vp_finetune_method_of(recipe);
    return !method->frozen_base || (method->trains_last_layers && !frozen);
}

bool vp_finetune_keeps_original(const vp_recipe *recipe, const vp_leaf_spec *spec) {
    return vp_finetune_method_of(recipe)->peft && spec->trainable && !spec->buffer && saved(recipe, spec);
}

/* lora_targets' index of a Lua block's own module name, or -1. */
static int lora_name_index(const vp_recipe *recipe, const char *name) {
    for (unsigned i = 0; name && i < recipe->n_lora_names; i++)
        if (strcmp(vp_lora_name(recipe, i), name) == 0) return (int)i;
    return -1;
}

bool vp_lora_adapts(const vp_recipe *recipe, const vp_leaf_spec *spec) {
    if (!vp_finetune_method_of(recipe)->adapts_linear || !spec->out_features || spec->buffer) return false;
    vp_module_set targets = vp_lora_targets(recipe);
    if (spec->module != VP_MODULE_NONE || !spec->module_name) return vp_module_in(targets, spec->module);
    /* a Lua block's linear of a name of its own: named, or all-linear's */
    return (targets & vp_module_bit(VP_MODULE_NONE)) || lora_name_index(recipe, spec->module_name) >= 0;
}

/* Whether target_parameters' entry `p` names the parameter of `spec` in
 * the model's layer `layer`. */
static bool names_param(const vp_lora_param *p, const vp_leaf_spec *spec, unsigned layer) {
    return p->param == spec->param_target && (p->layer < 0 || (unsigned)p->layer == layer);
}

bool vp_lora_adapts_param(const vp_recipe *recipe, const vp_leaf_spec *spec, unsigned layer) {
    if (!vp_finetune_method_of(recipe)->adapts_linear || !spec->param_target || spec->buffer) return false;
    for (unsigned i = 0; i < recipe->n_lora_params; i++)
        if (names_param(&recipe->lora_params[i], spec, layer)) return true;
    return false;
}

/* transformers' bitsandbytes integration replaces every nn.Linear but the
 * output head (get_keys_to_not_convert: the model's last child, a language
 * model's head or a classifier) and the model's _keep_in_fp32_modules
 * (modules_to_not_convert) with Linear4bit. */
bool vp_quantizes(const vp_recipe *recipe, const vp_leaf_spec *spec) {
    return vp_finetune_method_of(recipe)->quantizes_base && spec->out_features && !spec->buffer &&
           spec->module != VP_MODULE_LM_HEAD && spec->module != VP_MODULE_CLASSIFIER && !spec->keep_fp32;
}

bool vp_double_quantizes(const vp_recipe *recipe) {
    return vp_finetune_method_of(recipe)->quantizes_base && recipe->quant != VP_QUANT_INT8 && recipe->double_quant;
}

uint64_t vp_dequant_absmax_numel(const vp_recipe *recipe, uint64_t numel) {
    return vp_double_quantizes(recipe) ? numel / 64 + (numel % 64 != 0) : 0;
}

vp_dtype vp_lora_dtype(const vp_recipe *recipe, vp_dtype params) {
    if (recipe->lora_dtype == VP_LORA_DTYPE_BASE) return params;
    if (recipe->lora_dtype == VP_LORA_DTYPE_FP32) return VP_FP32;
    /* auto: PEFT 0.12+ (peft/tuners/tuners_utils.py, autocast_adapter_dtype)
     * upcasts bf16/fp16 adapters to fp32, unless the framework casts the
     * whole module (DeepSpeed's and Megatron's mixed precision) */
    bool sixteen = vp_dtype_is_half(params);
    bool whole_module_cast = vp_precision_is_mixed(recipe->precision);
    return sixteen && !whole_module_cast ? VP_FP32 : params;
}

typedef struct {
    const vp_recipe *recipe;
    uint64_t trainable;
    vp_module_set linear, present, adapted;
    vp_module_set quantized;     /* modules stored in 4 or 8 bits (QLoRA's base) */
    unsigned named;              /* bit i: lora_targets' i-th own name is a linear of a Lua block */
    unsigned saved_named;        /* bit i: modules_to_save's i-th own name is a Lua block's module */
    bool saved_quantized;        /* one of those is a linear stored in 4 or 8 bits */
    unsigned params_present;     /* bit p: the layers hold experts parameter p (vp_param_target) */
    uint64_t params_matched;     /* bit i: target_parameters' i-th entry names a parameter of the model */
    unsigned n_own;              /* Lua blocks' own module names adapted, in the order met */
    const char *own[VP_OP_MAX_LEAVES];
} census;

/* A Lua block's linear of its own name: lora_targets' names it matches,
 * and the names adapted. */
static void note_own_name(census *c, const vp_leaf_spec *s, bool adapted) {
    int i = lora_name_index(c->recipe, s->module_name);
    if (i >= 0) c->named |= 1u << i;
    for (unsigned k = 0; adapted && k <= c->n_own; k++) {
        if (k == c->n_own) {
            if (c->n_own < VP_OP_MAX_LEAVES) c->own[c->n_own++] = s->module_name;
            break;
        }
        if (strcmp(c->own[k], s->module_name) == 0) break;
    }
}

/* An op's leaves as the census counts them: the whole model on one rank,
 * the experts held as the recipe holds them. */
static unsigned census_leaves(const census *c, const vp_op *op, vp_leaf_spec *specs) {
    const vp_ranks whole = {1, 1, 1, false, vp_recipe_fused_experts(c->recipe)};
    return op->kind->leaves ? op->kind->leaves(op, &whole, specs) : 0;
}

static void count_ops(census *c, const vp_op *ops, unsigned n, uint64_t times, bool frozen) {
    for (unsigned i = 0; i < n; i++) {
        vp_leaf_spec specs[VP_OP_MAX_LEAVES];
        unsigned k = census_leaves(c, &ops[i], specs);
        for (unsigned j = 0; j < k; j++) {
            const vp_leaf_spec *s = &specs[j];
            if (!s->numel) continue;
            uint64_t copies = times * vp_leaf_count(s);
            c->present |= vp_module_bit(s->module);
            if (s->out_features) c->linear |= vp_module_bit(s->module);
            if (vp_quantizes(c->recipe, s)) c->quantized |= vp_module_bit(s->module);
            if (vp_finetune_trains(c->recipe, s, frozen)) c->trainable += s->numel * copies;
            int saved_own = saved_name_index(c->recipe, s);
            if (saved_own >= 0) {
                c->saved_named |= 1u << saved_own;
                c->saved_quantized |= vp_quantizes(c->recipe, s);
            }
            bool adapted = vp_lora_adapts(c->recipe, s);
            if (s->out_features && s->module == VP_MODULE_NONE && s->module_name) note_own_name(c, s, adapted);
            if (adapted) {
                c->adapted |= vp_module_bit(s->module);
                uint64_t in = s->numel / s->out_features;
                c->trainable += (uint64_t)c->recipe->lora_rank * (in + s->out_features) * copies;
                if (c->recipe->use_dora) c->trainable += s->out_features * copies; /* lora_magnitude_vector */
            }
        }
        count_ops(c, ops[i].children, ops[i].n_children, times, frozen);
    }
}

/* target_parameters' adapters in one layer's ops: lora_A [r x experts,
 * in] and lora_B [out, r x experts] per adapted parameter (ParamWrapper's
 * update_layer). */
static void count_param_adapters(census *c, const vp_op *ops, unsigned n, unsigned layer) {
    for (unsigned i = 0; i < n; i++) {
        vp_leaf_spec specs[VP_OP_MAX_LEAVES];
        unsigned k = census_leaves(c, &ops[i], specs);
        for (unsigned j = 0; j < k; j++) {
            const vp_leaf_spec *s = &specs[j];
            if (!s->param_target || !s->numel) continue;
            c->params_present |= 1u << s->param_target;
            for (unsigned t = 0; t < c->recipe->n_lora_params; t++)
                if (names_param(&c->recipe->lora_params[t], s, layer)) c->params_matched |= (uint64_t)1 << t;
            if (vp_lora_adapts_param(c->recipe, s, layer))
                c->trainable += (uint64_t)c->recipe->lora_rank * s->rows * (s->param_in + s->param_out);
        }
        count_param_adapters(c, ops[i].children, ops[i].n_children, layer);
    }
}

static census take_census(const vp_model *model, const vp_recipe *recipe) {
    census c = {.recipe = recipe};
    const vp_section *s = model->section;
    const vp_finetune_method *method = vp_finetune_method_of(recipe);
    bool freezing = method->trains_last_layers;
    count_ops(&c, s[VP_SECTION_EMBED].ops, s[VP_SECTION_EMBED].n_ops, 1, freezing);
    /* layers [0, first) are of the first kind, [boundary, layers) trained */
    unsigned first = model->first_layers, boundary = vp_recipe_first_trained_layer(recipe, model->layers);
    for (unsigned frozen = 0; frozen < 2; frozen++) {
        /* how many layers of each kind fall on this side of the boundary */
        uint64_t early = frozen ? (boundary < first ? boundary : first) : (first > boundary ? first - boundary : 0);
        uint64_t late = frozen ? (boundary > first ? boundary - first : 0)
                               : model->layers - (boundary > first ? boundary : first);
        count_ops(&c, s[VP_SECTION_FIRST_LAYER].ops, s[VP_SECTION_FIRST_LAYER].n_ops, early, frozen);
        count_ops(&c, s[VP_SECTION_LAYER].ops, s[VP_SECTION_LAYER].n_ops, late, frozen);
    }
    /* the bridge sits before the decoder's layers: frozen with the layers before it */
    count_ops(&c, s[VP_SECTION_BRIDGE].ops, s[VP_SECTION_BRIDGE].n_ops, 1, freezing && boundary > first);
    count_ops(&c, s[VP_SECTION_FINAL].ops, s[VP_SECTION_FINAL].n_ops, 1, false);
    if (method->leaves) c.trainable += method->leaves(model, recipe);
    for (unsigned layer = 0; recipe->n_lora_params && layer < model->layers; layer++) {
        const vp_section *section = &s[layer < first ? VP_SECTION_FIRST_LAYER : VP_SECTION_LAYER];
        count_param_adapters(&c, section->ops, section->n_ops, layer);
    }
    return c;
}

uint64_t vp_finetune_trainable_params(const vp_model *model, const vp_recipe *recipe) {
    return take_census(model, recipe).trainable;
}

vp_module_set vp_lora_adapted(const vp_model *model, const vp_recipe *recipe) {
    return take_census(model, recipe).adapted;
}

void vp_lora_adapted_names(const vp_model *model, const vp_recipe *recipe, char *out, unsigned size) {
    census c = take_census(model, recipe);
    vp_module_format(c.adapted, out, size);
    for (unsigned k = 0; k < c.n_own && size; k++) {
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s", used ? "," : "", c.own[k]);
    }
}

void vp_finetune_saved_names(const vp_model *model, const vp_recipe *recipe, char *out, unsigned size) {
    census c = take_census(model, recipe);
    vp_module_format(saved_modules(recipe) & c.present, out, size);
    for (unsigned i = 0; i < recipe->n_saved_names && size; i++) {
        size_t used = strlen(out);
        if (c.saved_named >> i & 1u)
            snprintf(out + used, size - used, "%s%s", used ? "," : "", vp_saved_name(recipe, i));
    }
}

/* Messages naming the module a recipe asks for and the model lacks (in
 * vp_module order). */
static const char *const no_target[] = {
    "lora_targets: the model has no linear module none",
    "lora_targets: the model has no linear module q_proj",
    "lora_targets: the model has no linear module k_proj",
    "lora_targets: the model has no linear module v_proj",
    "lora_targets: the model has no linear module o_proj",
    "lora_targets: the model has no linear module c_attn",
    "lora_targets: the model has no linear module c_proj",
    "lora_targets: the model has no linear module c_fc",
    "lora_targets: the model has no linear module gate_proj",
    "lora_targets: the model has no linear module up_proj",
    "lora_targets: the model has no linear module down_proj",
    "lora_targets: the model has no linear module w1",
    "lora_targets: the model has no linear module w2",
    "lora_targets: the model has no linear module w3",
    "lora_targets: the model has no linear module gate",
    "lora_targets: the model has no linear module q_a_proj",
    "lora_targets: the model has no linear module q_b_proj",
    "lora_targets: the model has no linear module kv_a_proj_with_mqa",
    "lora_targets: the model has no linear module kv_b_proj",
    "lora_targets: the model has no linear module query_key_value",
    "lora_targets: the model has no linear module dense",
    "lora_targets: the model has no linear module dense_h_to_4h",
    "lora_targets: the model has no linear module dense_4h_to_h",
    "lora_targets: the model has no linear module q",
    "lora_targets: the model has no linear module k",
    "lora_targets: the model has no linear module v",
    "lora_targets: the model has no linear module o",
    "lora_targets: the model has no linear module wi",
    "lora_targets: the model has no linear module wo",
    "lora_targets: the model has no linear module wi_0",
    "lora_targets: the model has no linear module wi_1",
    "lora_targets: the model has no linear module qkv_proj",
    "lora_targets: the model has no linear module gate_up_proj",
    "lora_targets: the model has no linear module fc1",
    "lora_targets: the model has no linear module fc2",
    "lora_targets: the model has no linear module query",
    "lora_targets: the model has no linear module key",
    "lora_targets: the model has no linear module value",
    "lora_targets: the model has no linear module Wqkv",
    "lora_targets: the model has no linear module in_proj",
    "lora_targets: the model has no linear module x_proj",
    "lora_targets: the model has no linear module dt_proj",
    "lora_targets: the model has no linear module shared_expert_gate",
    "lora_targets: the model has no linear module lm_head",
    "lora_targets: the model has no linear module classifier",
    "lora_targets: the model has no linear module embed_tokens",
    "lora_targets: the model has no linear module embed_positions",
    "lora_targets: the model has no linear module norm",
};

static const char *const no_module[] = {
    "modules_to_save: the model has no module none",
    "modules_to_save: the model has no module q_proj",
    "modules_to_save: the model has no module k_proj",
    "modules_to_save: the model has no module v_proj",
    "modules_to_save: the model has no module o_proj",
    "modules_to_save: the model has no module c_attn",
    "modules_to_save: the model has no module c_proj",
    "modules_to_save: the model has no module c_fc",
    "modules_to_save: the model has no module gate_proj",
    "modules_to_save: the model has no module up_proj",
    "modules_to_save: the model has no module down_proj",
    "modules_to_save: the model has no module w1",
    "modules_to_save: the model has no module w2",
    "modules_to_save: the model has no module w3",
    "modules_to_save: the model has no module gate",
    "modules_to_save: the model has no module q_a_proj",
    "modules_to_save: the model has no module q_b_proj",
    "modules_to_save: the model has no module kv_a_proj_with_mqa",
    "modules_to_save: the model has no module kv_b_proj",
    "modules_to_save: the model has no module query_key_value",
    "modules_to_save: the model has no module dense",
    "modules_to_save: the model has no module dense_h_to_4h",
    "modules_to_save: the model has no module dense_4h_to_h",
    "modules_to_save: the model has no module q",
    "modules_to_save: the model has no module k",
    "modules_to_save: the model has no module v",
    "modules_to_save: the model has no module o",
    "modules_to_save: the model has no module wi",
    "modules_to_save: the model has no module wo",
    "modules_to_save: the model has no module wi_0",
    "modules_to_save: the model has no module wi_1",
    "modules_to_save: the model has no module qkv_proj",
    "modules_to_save: the model has no module gate_up_proj",
    "modules_to_save: the model has no module fc1",
    "modules_to_save: the model has no module fc2",
    "modules_to_save: the model has no module query",
    "modules_to_save: the model has no module key",
    "modules_to_save: the model has no module value",
    "modules_to_save: the model has no module Wqkv",
    "modules_to_save: the model has no module in_proj",
    "modules_to_save: the model has no module x_proj",
    "modules_to_save: the model has no module dt_proj",
    "modules_to_save: the model has no module shared_expert_gate",
    "modules_to_save: the model has no module lm_head",
    "modules_to_save: the model has no module classifier",
    "modules_to_save: the model has no module embed_tokens",
    "modules_to_save: the model has no module embed_positions",
    "modules_to_save: the model has no module norm",
};

_Static_assert(sizeof no_target / sizeof *no_target == VP_MODULE_COUNT, "a message per module");
_Static_assert(sizeof no_module / sizeof *no_module == VP_MODULE_COUNT, "a message per module");

/* The first module of `wanted` the model lacks: its name's index, or 0. */
static vp_module first_missing(vp_module_set wanted, vp_module_set present) {
    for (int m = 1; m < VP_MODULE_COUNT; m++)
        if (vp_module_in(wanted, (vp_module)m) && !vp_module_in(present, (vp_module)m)) return (vp_module)m;
    return VP_MODULE_NONE;
}

const char *vp_finetune_problem(const vp_model *model, const vp_recipe *recipe) {
    const vp_finetune_method *method = vp_finetune_method_of(recipe);
    if (!method->quantizes_base && recipe->quant != VP_QUANT_NONE)
        return "quant: a quantized base needs finetune = qlora";
    if (recipe->int8_threshold != 6.0 && (!method->quantizes_base || recipe->quant != VP_QUANT_INT8))
        return "llm_int8_threshold: LLM.int8's outlier threshold needs finetune = qlora and quant = int8";
    if (!method->trains_last_layers && recipe->trainable_layers)
        return "trainable_layers: needs finetune = freeze";
    /* torch.utils.checkpoint's reentrant CheckpointFunction: outputs need
     * a gradient only if an input does, and behind frozen embeddings none
     * does (transformers calls enable_input_require_grads for PEFT alone) */
    if (method->trains_last_layers && recipe->trainable_layers && recipe->checkpoint_every &&
        recipe->use_reentrant && !vp_module_in(recipe->modules_to_save, VP_MODULE_EMBED_TOKENS))
        return "checkpointing: reentrant checkpoints (use_reentrant = true) behind frozen embeddings give the trained "
               "layers no gradients in PyTorch; set use_reentrant = false, or train embed_tokens (modules_to_save)";
    if (!method->virtual_tokens && recipe->virtual_tokens) return "num_virtual_tokens: needs finetune = prompt or prefix";
    if (recipe->use_dora && !method->adapts_linear)
        return "use_dora: DoRA is LoRA's variant: needs finetune = lora or qlora";
    if (!method->frozen_base) return NULL; /* everything trained: no targets, no copies */
    const char *problem = method->problem ? method->problem(model, recipe) : NULL;
    if (problem) return problem;
    bool lora = method->adapts_linear;
    if (lora && !vp_framework_of(recipe)->hf_modeling)
        return "finetune: LoRA runs as PEFT does, on framework torch, deepspeed or fsdp";
    if (!model) return NULL;
    if (recipe->trainable_layers > model->layers) return "trainable_layers: more than the model's layers";
    census c = take_census(model, recipe);
    vp_module missing = VP_MODULE_NONE;
    if (lora) {
        /* all-linear means the linear modules the model has; named targets must exist */
        vp_module_set named = recipe->lora_targets == vp_module_all_linear() ? 0 : recipe->lora_targets;
        missing = named ? first_missing(named, c.linear) : VP_MODULE_NONE;
        if (missing) return no_target[missing];
        for (unsigned i = 0; i < recipe->n_lora_names; i++)
            if (!(c.named >> i & 1u)) return recipe->lora_names[i];
        bool given = vp_lora_targets_given(recipe);
        for (unsigned i = 0; i < recipe->n_lora_params; i++) {
            if (c.params_matched >> i & 1u) continue;
            if (!(c.params_present >> recipe->lora_params[i].param & 1u))
                return "lora_target_parameters: the model has no 3-D experts parameter of that name (transformers 5's "
                       "experts: GPT-OSS, or a mixture with experts_implementation eager or grouped_mm)";
            return "lora_target_parameters: names a layer the model does not have";
        }
        /* target_modules left out beside target_parameters: PEFT targets
         * no module where it has no defaults for the model type
         * (lora/model.py _prepare_adapter_config), its defaults where it has */
        if (!given && recipe->n_lora_params && model->facts.peft_defaults)
            return "lora_target_parameters: PEFT adds its default LoRA targets for this model type (q_proj,v_proj) "
                   "when target_modules is not given: name lora_targets too";
        if (!given && recipe->n_lora_params) return NULL;
        if (!given && model->facts.attention && !model->facts.peft_defaults)
            return "lora_targets: PEFT has no default LoRA targets for this model type; name them (as q_proj,v_proj) "
                   "or use all-linear";
        if (!given && !(vp_lora_targets(recipe) & c.linear))
            return "lora_targets: the model has none of PEFT's default targets; name them";
    }
    /* a tied head shares the embedding's weight: PEFT's copy of either
     * module would untie them */
    vp_module_set tied_pair = vp_module_bit(VP_MODULE_EMBED_TOKENS) | vp_module_bit(VP_MODULE_LM_HEAD);
    if (method->peft && model->facts.tied_head != NULL && (recipe->modules_to_save & tied_pair))
        return "modules_to_save: this model's head is tied to its embeddings, and PEFT's trained copy of "
               "embed_tokens or lm_head unties them: not modelled";
    missing = first_missing(recipe->modules_to_save, c.present);
    if (missing) return no_module[missing];
    for (unsigned i = 0; i < recipe->n_saved_names; i++)
        if (!(c.saved_named >> i & 1u)) return recipe->saved_names[i];
    /* a Params4bit or Int8Params weight holds integers: no gradient */
    if ((recipe->modules_to_save & c.quantized) || c.saved_quantized)
        return "modules_to_save: a module QLoRA stores quantized cannot be trained (its weights are integers); "
               "the head, the embeddings and the norms can";
    return NULL;
}
