/* model.c — field lookup, slot layout, the model's facts and parameter
 * counts. It asks ops only through their kinds' hooks (the registry is
 * registry.c's). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

int vp_field_index(const vp_op_kind *kind, const char *name) {
    for (unsigned i = 0; i < kind->n_fields; i++)
        if (strcmp(kind->fields[i].name, name) == 0) return (int)i;
    return -1;
}

static const vp_ranks whole = {1, 1, 1, false, false};

/* An op's slots: its leaves, then three for LoRA's adapters (A, B and
 * DoRA's magnitude) per linear weight or 3-D experts parameter, used when a
 * recipe targets it. */
static unsigned leaf_count(const vp_op *op) {
    vp_leaf_spec specs[VP_OP_MAX_LEAVES];
    unsigned k = op->kind->leaves ? op->kind->leaves(op, &whole, specs) : 0, slots = 0;
    for (unsigned j = 0; j < k; j++)
        slots += vp_leaf_count(&specs[j]) * (vp_leaf_adaptable(&specs[j]) ? 1 + VP_ADAPTER_SLOTS : 1);
    return slots;
}

/* Slots are numbered depth-first: an op's own leaves, then its children's. */
static unsigned layout(vp_op *ops, unsigned n, unsigned next) {
    for (unsigned i = 0; i < n; i++) {
        vp_op *op = &ops[i];
        op->slot = next;
        next += leaf_count(op);
        next = layout(op->children, op->n_children, next);
        op->n_slots = next - op->slot;
    }
    return next;
}

/* ---- the order a layer registers its parameters in ---- */

static bool is_norm(const vp_op *op) { return (vp_op_roles(op) & VP_ROLE_NORM) != 0; }

/* An op's own slots, before its children's. */
static unsigned own_slots(const vp_op *op) { return op->n_children ? op->children[0].slot - op->slot : op->n_slots; }

typedef struct {
    unsigned *slots;
    unsigned n;
} slot_list;

static void append_range(slot_list *out, unsigned first, unsigned count) {
    for (unsigned i = 0; i < count; i++) out->slots[out->n++] = first + i;
}

/* The slots of the norms (`norms`) or of all the rest, depth-first. */
static void append_kind(slot_list *out, const vp_op *ops, unsigned n, bool norms) {
    for (unsigned i = 0; i < n; i++) {
        if (is_norm(&ops[i])) {
            if (norms) append_range(out, ops[i].slot, ops[i].n_slots);
            continue;
        }
        if (!norms) append_range(out, ops[i].slot, own_slots(&ops[i]));
        append_kind(out, ops[i].children, ops[i].n_children, norms);
    }
}

/* Depth-first, but a container's norms after its other children. */
static void append_norms_after(slot_list *out, const vp_op *ops, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        const vp_op *op = &ops[i];
        append_range(out, op->slot, own_slots(op));
        for (unsigned c = 0; c < op->n_children; c++)
            if (!is_norm(&op->children[c])) append_norms_after(out, &op->children[c], 1);
        for (unsigned c = 0; c < op->n_children; c++)
            if (is_norm(&op->children[c])) append_range(out, op->children[c].slot, op->children[c].n_slots);
    }
}

static const char *register_order(vp_section *section, vp_norm_registration how) {
    free(section->registered);
    section->registered = NULL;
    if (how == VP_NORMS_IN_PLACE || !section->n_slots) return NULL;
    slot_list out = {malloc(section->n_slots * sizeof(unsigned)), 0};
    if (!out.slots) return "not enough memory";
    if (how == VP_NORMS_AFTER_BRANCH) {
        append_norms_after(&out, section->ops, section->n_ops);
    } else {
        bool first = how == VP_NORMS_FIRST;
        append_kind(&out, section->ops, section->n_ops, first);
        append_kind(&out, section->ops, section->n_ops, !first);
    }
    section->registered = out.slots;
    return NULL;
}

/* The embeddings' slots in their ops' registration order, and PEFT's
 * prompt table's slot after them (a group may hold one more). */
static const char *register_embeddings(vp_model *model) {
    vp_section *section = &model->section[VP_SECTION_EMBED];
    free(section->registered);
    section->registered = NULL;
    if (!model->n_embed_order) return NULL;
    if (model->n_embed_order != section->n_ops) return "embed_registered must name every embedding op once";
    slot_list out = {malloc((section->n_slots + 1) * sizeof(unsigned)), 0};
    if (!out.slots) return "not enough memory";
    for (unsigned i = 0; i < model->n_embed_order; i++) {
        const vp_op *op = &section->ops[model->embed_order[i]];
        append_range(&out, op->slot, op->n_slots);
    }
    out.slots[out.n++] = section->n_slots;
    section->registered = out.slots;
    return NULL;
}

/* ---- the model's facts ---- */

enum { FACT_KINDS_MAX = 64 };

typedef struct {
    const vp_op_kind *kinds[FACT_KINDS_MAX];
    unsigned n;
} kind_set;

/* Whether `kind` is met for the first time (and notes it). */
static bool first_of_kind(kind_set *seen, const vp_op_kind *kind) {
    for (unsigned i = 0; i < seen->n; i++)
        if (seen->kinds[i] == kind) return false;
    if (seen->n < FACT_KINDS_MAX) seen->kinds[seen->n++] = kind;
    return true;
}

/* Depth-first, as vp_section_find meets them: each kind's first op answers. */
static void gather_facts(const vp_op *ops, unsigned n, vp_section_id section, kind_set *seen,
                         vp_model_facts *facts) {
    for (unsigned i = 0; i < n; i++) {
        bool first = first_of_kind(seen, ops[i].kind);
        if ((first || ops[i].kind->facts_each) && ops[i].kind->facts) ops[i].kind->facts(&ops[i], section, facts);
        gather_facts(ops[i].children, ops[i].n_children, section, seen, facts);
    }
}

static void gather_model_facts(vp_model *model) {
    model->facts = (vp_model_facts){.layer_period = 1};
    for (int s = 0; s < VP_SECTION_COUNT; s++) {
        kind_set seen = {.n = 0};
        gather_facts(model->section[s].ops, model->section[s].n_ops, (vp_section_id)s, &seen, &model->facts);
    }
}

const char *vp_model_finish(vp_model *model) {
    for (int s = 0; s < VP_SECTION_COUNT; s++)
        model->section[s].n_slots = layout(model->section[s].ops, model->section[s].n_ops, 0);
    gather_model_facts(model);
    const char *embed_problem = register_embeddings(model);
    if (embed_problem) return embed_problem;
    const vp_section_id layers[] = {VP_SECTION_LAYER, VP_SECTION_FIRST_LAYER};
    for (unsigned i = 0; i < 2; i++) {
        const char *problem = register_order(&model->section[layers[i]], model->norms_registered);
        if (problem) return problem;
    }
    return NULL;
}

static void free_ops(vp_op *ops, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        free_ops(ops[i].children, ops[i].n_children);
        free(ops[i].data);
    }
    free(ops);
}

void vp_model_free(vp_model *model) {
    for (int s = 0; s < VP_SECTION_COUNT; s++) {
        free_ops(model->section[s].ops, model->section[s].n_ops);
        free(model->section[s].registered);
        model->section[s].registered = NULL;
        model->section[s].ops = NULL;
        model->section[s].n_ops = 0;
    }
}

static uint64_t count_ops(const vp_op *ops, unsigned n, bool trainable_only) {
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        vp_leaf_spec specs[VP_OP_MAX_LEAVES];
        unsigned k = ops[i].kind->leaves ? ops[i].kind->leaves(&ops[i], &whole, specs) : 0;
        for (unsigned j = 0; j < k; j++)
            if (!specs[j].buffer && (specs[j].trainable || !trainable_only))
                total += specs[j].numel * vp_leaf_count(&specs[j]);
        total += count_ops(ops[i].children, ops[i].n_children, trainable_only);
    }
    return total;
}

uint64_t vp_section_params(const vp_section *section) { return count_ops(section->ops, section->n_ops, false); }

uint64_t vp_op_params(const vp_op *op) { return count_ops(op, 1, false); }

uint64_t vp_model_params(const vp_model *model, bool trainable_only) {
    uint64_t embed = count_ops(model->section[VP_SECTION_EMBED].ops, model->section[VP_SECTION_EMBED].n_ops,
                               trainable_only);
    uint64_t layer = count_ops(model->section[VP_SECTION_LAYER].ops, model->section[VP_SECTION_LAYER].n_ops,
                               trainable_only);
    uint64_t final = count_ops(model->section[VP_SECTION_FINAL].ops, model->section[VP_SECTION_FINAL].n_ops,
                               trainable_only);
    uint64_t first = count_ops(model->section[VP_SECTION_FIRST_LAYER].ops,
                               model->section[VP_SECTION_FIRST_LAYER].n_ops, trainable_only);
    uint64_t bridge = count_ops(model->section[VP_SECTION_BRIDGE].ops, model->section[VP_SECTION_BRIDGE].n_ops,
                                trainable_only);
    return embed + first * model->first_layers + bridge + layer * (model->layers - model->first_layers) + final;
}

static const vp_op *find_in(const vp_op *ops, unsigned n, const vp_op_kind *kind) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind == kind) return &ops[i];
        const vp_op *child = find_in(ops[i].children, ops[i].n_children, kind);
        if (child) return child;
    }
    return NULL;
}

const vp_op *vp_section_find(const vp_section *section, const vp_op_kind *kind) {
    return find_in(section->ops, section->n_ops, kind);
}

/* The first problem of an op (children included) with the split: the
 * dense weights' (tp) or the experts' (ep, etp). */
static const char *check_ops(const vp_op *ops, unsigned n, const vp_ranks *split, bool experts) {
    for (unsigned i = 0; i < n; i++) {
        const vp_op_kind *k = ops[i].kind;
        const char *problem = NULL;
        if (experts && k->check_ep) problem = k->check_ep(&ops[i], split);
        if (!experts && k->check_tp) problem = k->check_tp(&ops[i], split->tp);
        if (!problem) problem = check_ops(ops[i].children, ops[i].n_children, split, experts);
        if (problem) return problem;
    }
    return NULL;
}

static const char *check_model(const vp_model *model, const vp_ranks *split, bool experts) {
    for (int s = 0; s < VP_SECTION_COUNT; s++) {
        const char *problem = check_ops(model->section[s].ops, model->section[s].n_ops, split, experts);
        if (problem) return problem;
    }
    return NULL;
}

const char *vp_model_check_tp(const vp_model *model, unsigned tp) {
    const vp_ranks split = {tp, 1, 1, false, false};
    return check_model(model, &split, false);
}

const char *vp_model_check_ep(const vp_model *model, const vp_ranks *split) { return check_model(model, split, true); }

/* Each kind's recipe problem, asked once, in the order of the kinds' first
 * ops depth-first. */
static const char *ops_recipe_problem(const vp_model *model, const vp_op *ops, unsigned n, const vp_recipe *recipe,
                                      kind_set *asked) {
    for (unsigned i = 0; i < n; i++) {
        const vp_op_kind *kind = ops[i].kind;
        const char *problem = first_of_kind(asked, kind) && kind->recipe_problem ? kind->recipe_problem(model, recipe)
                                                                                 : NULL;
        if (!problem) problem = ops_recipe_problem(model, ops[i].children, ops[i].n_children, recipe, asked);
        if (problem) return problem;
    }
    return NULL;
}

static void ops_resolve_recipe(const vp_model *model, const vp_op *ops, unsigned n, vp_recipe *recipe,
                               kind_set *asked) {
    for (unsigned i = 0; i < n; i++) {
        const vp_op_kind *kind = ops[i].kind;
        if (first_of_kind(asked, kind) && kind->resolve_recipe) kind->resolve_recipe(model, recipe);
        ops_resolve_recipe(model, ops[i].children, ops[i].n_children, recipe, asked);
    }
}

void vp_model_resolve_recipe(const vp_model *model, vp_recipe *recipe) {
    kind_set asked = {.n = 0};
    for (int s = 0; s < VP_SECTION_COUNT; s++)
        ops_resolve_recipe(model, model->section[s].ops, model->section[s].n_ops, recipe, &asked);
}

/* The sections in the order backward meets them, the loss's first: where a
 * recipe has several problems, the one reported is the one it always was
 * (the router's load-balancing loss before the mixture's). */
const char *vp_model_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    static const vp_section_id backward_order[] = {VP_SECTION_FINAL, VP_SECTION_LAYER, VP_SECTION_BRIDGE,
                                                   VP_SECTION_FIRST_LAYER, VP_SECTION_EMBED};
    kind_set asked = {.n = 0};
    for (unsigned s = 0; s < sizeof backward_order / sizeof *backward_order; s++) {
        const vp_section *section = &model->section[backward_order[s]];
        const char *problem = ops_recipe_problem(model, section->ops, section->n_ops, recipe, &asked);
        if (problem) return problem;
    }
    /* run_phases.c dequantizes GPT-OSS's experts tensors (GPT-OSS runs
     * without tensor or expert parallelism here: op_moe.c, op_attention.c) */
    if (recipe->checkpoint_quant == VP_CHECKPOINT_MXFP4 && !model->facts.mxfp4_experts)
        return "checkpoint_quant: mxfp4 is GPT-OSS's checkpoint format (its experts' MXFP4 blocks and scales); "
               "this model has no GPT-OSS experts";
    return NULL;
}
