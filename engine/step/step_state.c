/* step_state.c — the step's state as ops and the step files touch it:
 * autocast's weight cache, the leaves of each layer instance, the Python
 * frames' locals, the graph's holds, scratch memory. Apart from the driver
 * (step.c) so that ops and the lower step files depend on these services
 * alone, never on the driver that calls them. */
#include "op_context.h"
#include "step_private.h"

#include <stdlib.h>
#include <string.h>

#include "finetune.h"
#include "framework.h"
#include "layout.h"
#include "lora.h"

/* ---- autocast ---- */

static bool remember_cast(vp_step *step, vp_t param, vp_t cast) {
    vp_step_private *priv = step->priv;
    if (priv->n_casts == priv->cap_casts) {
        unsigned cap = priv->cap_casts ? priv->cap_casts * 2 : 64;
        vp_cast_entry *grown = realloc(priv->casts, cap * sizeof *grown);
        if (!grown) {
            step->sim.status = VP_SIM_NOMEM;
            return false;
        }
        priv->casts = grown;
        priv->cap_casts = cap;
    }
    vp_hold(&step->sim, cast);
    priv->casts[priv->n_casts++] = (vp_cast_entry){param, cast, priv->fold_repeat, step->ledger.place.layer};
    return true;
}

vp_t vp_autocast_low(vp_step *step, vp_t x, const char *label) {
    vp_step_private *priv = step->priv;
    vp_sim *sim = &step->sim;
    const vp_tensor *t = vp_at(sim, x);
    if (!step->autocast || t->dtype != VP_FP32) {
        vp_hold(sim, x);
        return x;
    }
    /* cached_cast (autocast_mode.h): only leaves that require grad are
     * cached, for as long as the autocast region lasts */
    bool cacheable = t->leaf && t->requires_grad;
    if (cacheable) {
        /* a parameter's keyed by layer too (folded layers share one
         * instance's tensors); any other leaf is one tensor for every layer
         * (a checkpointed chunk's detached input, T5's encoder output read
         * by each decoder layer's cross-attention) */
        bool per_layer = t->category == VP_CAT_PARAMS;
        for (unsigned i = 0; i < priv->n_casts; i++) {
            if (priv->casts[i].param == x && (!per_layer || priv->casts[i].layer == step->ledger.place.layer)) {
                vp_hold(sim, priv->casts[i].cast);
                return priv->casts[i].cast;
            }
        }
    }
    vp_t cast = vp_to(sim, x, step->low, label);
    if (cacheable) remember_cast(step, x, cast);
    return cast;
}

vp_t vp_autocast_fp32(vp_step *step, vp_t x, const char *label) {
    vp_sim *sim = &step->sim;
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    if (!step->autocast || !vp_dtype_is_float(dt) || dt == VP_FP32) {
        vp_hold(sim, x);
        return x;
    }
    return vp_to(sim, x, VP_FP32, label);
}

/* Drops a tensor made while folding, which stands for `repeat` of them:
 * its release is repeated too. Without a fold (repeat 1) a plain drop, as
 * this may run inside a folded backward's own segment. */
static void drop_folded(vp_step *step, vp_t t, unsigned repeat) {
    if (repeat == 1) {
        vp_drop(&step->sim, t);
        return;
    }
    vp_ledger_begin_segment(&step->ledger);
    vp_drop(&step->sim, t);
    vp_ledger_repeat_segment(&step->ledger, repeat, 0);
}

/* Leaving the autocast region clears the cache; casts made while folding
 * stand for `repeat` identical casts. */
void vp_step_clear_casts(vp_step *step, unsigned from) {
    vp_step_private *priv = step->priv;
    for (unsigned i = from; i < priv->n_casts; i++) drop_folded(step, priv->casts[i].cast, priv->casts[i].repeat);
    priv->n_casts = from;
}

/* ---- the layer instances' leaves ---- */

/* The plan entries are in layer order (plan_run appends them with rising
 * first layers and instances) and an unfolded model has one per layer:
 * both lookups below are binary searches, so that a step over L layers
 * stays O(L log L) (a linear scan made a 92,150-layer config from the
 * fuzzer run for minutes). */

/* The plan entry that runs a layer: the last one starting at or before it. */
static unsigned entry_of(const vp_step *step, unsigned layer) {
    const vp_chunk *chunks = step->priv->chunks;
    unsigned lo = 0, hi = step->priv->n_chunks; /* answer in [lo, hi) once one starts at or before */
    if (!hi || layer < chunks[0].first_layer) return 0;
    while (hi - lo > 1) {
        unsigned mid = lo + (hi - lo) / 2;
        if (chunks[mid].first_layer <= layer) lo = mid;
        else hi = mid;
    }
    return lo;
}

vp_t *vp_step_layer_leaves(vp_step *step, unsigned layer) {
    unsigned slots = vp_model_layer_slots(step->model);
    const vp_chunk *c = &step->priv->chunks[entry_of(step, layer)];
    unsigned instance = c->instance + (layer - c->first_layer) % c->layers;
    return step->priv->layer_leaves + (size_t)instance * slots;
}

/* The plan entry whose layers instance i stands for: the first one whose
 * instances end after i. */
static unsigned entry_of_instance(const vp_step *step, unsigned i) {
    const vp_chunk *chunks = step->priv->chunks;
    unsigned lo = 0, hi = step->priv->n_chunks;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (i < chunks[mid].instance + chunks[mid].layers) hi = mid;
        else lo = mid + 1;
    }
    return lo < step->priv->n_chunks ? lo : 0;
}

/* How many real layers instance i stands for. */
unsigned vp_step_instance_repeat(const vp_step *step, unsigned i) {
    return step->priv->chunk_repeat[entry_of_instance(step, i)];
}

/* The layer instance i stands for: its place in its chunk's first run of
 * layers. */
unsigned vp_step_instance_layer(const vp_step *step, unsigned i) {
    const vp_chunk *c = &step->priv->chunks[entry_of_instance(step, i)];
    return c->first_layer + (i - c->instance);
}

/* The ops of the layers instance i stands for (a chunk may hold a dense
 * layer and a mixture's). */
const vp_section *vp_step_instance_section(const vp_step *step, unsigned i) {
    return vp_model_layer_section(step->model, vp_step_instance_layer(step, i));
}

/* embeddings, layer instances, bridge, final */
unsigned vp_step_leaf_group_count(const vp_step *step) { return 3 + step->priv->n_layer_instances; }

vp_leaf_group vp_step_leaf_group_at(vp_step *step, unsigned i) {
    vp_step_private *priv = step->priv;
    const vp_model *m = step->model;
    unsigned count = vp_step_leaf_group_count(step);
    if (i == 0)
        return (vp_leaf_group){priv->embed_leaves, m->section[VP_SECTION_EMBED].n_slots + (step->prompt != 0), 1,
                               m->section[VP_SECTION_EMBED].registered};
    if (i == count - 1) return (vp_leaf_group){priv->final_leaves, m->section[VP_SECTION_FINAL].n_slots, 1, NULL};
    if (i == count - 2) return (vp_leaf_group){priv->bridge_leaves, m->section[VP_SECTION_BRIDGE].n_slots, 1, NULL};
    unsigned slots = vp_model_layer_slots(m);
    unsigned repeat = vp_step_instance_repeat(step, i - 1);
    vp_leaf_group group = {priv->layer_leaves + (size_t)(i - 1) * slots, slots, repeat, NULL};
    const vp_section *section = vp_step_instance_section(step, i - 1);
    if (section->registered) { /* the slots past the section's own are empty */
        group.n = section->n_slots;
        group.order = section->registered;
    }
    return group;
}


/* ---- the Python frames' locals and the graph's holds ---- */

void vp_step_keep_local(vp_step *step, vp_t t, vp_local_frame frame) {
    /* Megatron's modules keep no such locals the engine models */
    if (!vp_framework_of(step->recipe)->python_locals) return;
    /* outside the layers a layer's local belongs to the model body's frame */
    if (frame == VP_LOCAL_OF_LAYER && step->ledger.place.layer < 0) frame = VP_LOCAL_OF_BODY;
    vp_t *slots = step->priv->locals[frame];
    for (unsigned i = 0; i < VP_LOCALS_MAX; i++) {
        if (!slots[i]) {
            vp_hold(&step->sim, t);
            slots[i] = t;
            return;
        }
    }
    step->sim.status = VP_SIM_LIMIT; /* more locals than a frame has room for: an op-table bug */
}

void vp_step_keep_router_logits(vp_step *step, vp_t logits) {
    if (step->priv->capture_router_logits) {
        for (unsigned i = 0; i < VP_CHUNK_ROUTER_MAX; i++) {
            if (step->priv->chunk_router_logits[i]) continue;
            vp_hold(&step->sim, logits);
            step->priv->chunk_router_logits[i] = logits;
            return;
        }
        step->sim.status = VP_SIM_LIMIT; /* more layers a chunk than router_aux_loss's recipe_problem allows */
        return;
    }
    vp_router_logits *r = &step->router_logits;
    if (r->n == r->cap) {
        unsigned cap = r->cap ? 2 * r->cap : 16;
        vp_t *grown = realloc(r->tensors, cap * sizeof *grown);
        if (!grown) {
            step->sim.status = VP_SIM_NOMEM;
            return;
        }
        r->tensors = grown;
        r->cap = cap;
    }
    vp_hold(&step->sim, logits);
    r->tensors[r->n++] = logits;
}

/* The outputs holding them go: the references drop, the array stays for
 * the next micro-batch. */
void vp_step_release_router_logits(vp_sim *sim, vp_router_logits *r) {
    for (unsigned i = 0; i < r->n; i++) vp_drop(sim, r->tensors[i]);
    r->n = 0;
}

static void keep_leaf(vp_step *step, vp_t *leaves, vp_t t) {
    for (unsigned i = 0; i < VP_GRAPH_LEAVES; i++) {
        if (!leaves[i]) {
            vp_hold(&step->sim, t);
            leaves[i] = t;
            return;
        }
    }
    step->sim.status = VP_SIM_LIMIT; /* more such leaves than room: an op-table bug */
}

void vp_step_rerun_leaf(vp_step *step, vp_t t) { keep_leaf(step, step->priv->rerun_leaves, t); }

void vp_step_graph_leaf(vp_step *step, vp_t t) { keep_leaf(step, step->priv->graph_leaves, t); }

/* like the graph's leaves: each goes with its .grad */
void vp_step_drop_rerun_leaves(vp_step *step) { vp_step_drop_leaves(&step->sim, step->priv->rerun_leaves); }

void vp_step_graph_hold(vp_step *step, vp_t t) {
    for (unsigned i = 0; i < VP_LOCALS_MAX; i++) {
        if (step->priv->graph_refs[i] == t) return;
        if (!step->priv->graph_refs[i]) {
            vp_hold(&step->sim, t);
            step->priv->graph_refs[i] = t;
            return;
        }
    }
    step->sim.status = VP_SIM_LIMIT; /* more than the graph's room: an op-table bug */
}

void vp_step_ctx_hold(vp_step *step, vp_t t) {
    if (step->priv->n_ctx_refs == step->priv->cap_ctx_refs) {
        unsigned cap = step->priv->cap_ctx_refs ? step->priv->cap_ctx_refs * 2 : 64;
        vp_ctx_ref *grown = realloc(step->priv->ctx_refs, cap * sizeof *grown);
        if (!grown) {
            step->sim.status = VP_SIM_NOMEM;
            return;
        }
        step->priv->ctx_refs = grown;
        step->priv->cap_ctx_refs = cap;
    }
    vp_hold(&step->sim, t);
    step->priv->ctx_refs[step->priv->n_ctx_refs++] = (vp_ctx_ref){t, step->priv->fold_repeat};
}

void vp_step_recast_leaf(vp_step *step, vp_t leaf, vp_dtype dtype) {
    vp_step_private *priv = step->priv;
    for (unsigned i = 0; i < priv->n_origins; i++) {
        const vp_leaf_origin *o = &priv->origins[i];
        if (o->leaf != leaf) continue;
        for (unsigned k = 0; k < priv->n_found; k++)
            if (priv->found[k].op == o->op && priv->found[k].spec == o->spec && priv->found[k].copy == o->copy) return;
        if (priv->n_found == VP_RECASTS_MAX) {
            step->sim.status = VP_SIM_LIMIT; /* more recast leaves than room */
            return;
        }
        priv->found[priv->n_found++] = (vp_leaf_recast){o->op, o->spec, o->copy, dtype};
        return;
    }
}

static void release_ctx_range(vp_step *step, unsigned from, unsigned to) {
    vp_step_private *priv = step->priv;
    for (unsigned i = from; i < to; i++) drop_folded(step, priv->ctx_refs[i].tensor, priv->ctx_refs[i].repeat);
}

void vp_step_release_ctx(vp_step *step, unsigned from) {
    release_ctx_range(step, from, step->priv->n_ctx_refs);
    step->priv->n_ctx_refs = from;
}

/* The last micro-batch's graph goes once the next forward has run: its ctx
 * tensors, the first `n` entries. */
void vp_step_release_old_ctx(vp_step *step, unsigned n) {
    vp_step_private *priv = step->priv;
    if (!n) return;
    release_ctx_range(step, 0, n);
    memmove(priv->ctx_refs, priv->ctx_refs + n, (priv->n_ctx_refs - n) * sizeof *priv->ctx_refs);
    priv->n_ctx_refs -= n;
}

void vp_step_drop_refs(vp_sim *sim, vp_t *refs) {
    for (unsigned i = 0; i < VP_LOCALS_MAX; i++) {
        vp_drop(sim, refs[i]);
        refs[i] = 0;
    }
}

void vp_step_drop_locals(vp_step *step, vp_local_frame frame) {
    for (unsigned i = 0; i < VP_LOCALS_MAX; i++) {
        vp_drop(&step->sim, step->priv->locals[frame][i]);
        step->priv->locals[frame][i] = 0;
    }
}

void vp_step_rebind_layer_local(vp_step *step, vp_t t) {
    vp_step_drop_locals(step, VP_LOCAL_OF_LAYER);
    vp_step_keep_local(step, t, VP_LOCAL_OF_LAYER);
}

void vp_step_norm_returns(vp_step *step) { vp_step_drop_locals(step, VP_LOCAL_OF_POST_NORM_BLOCK); }

void vp_step_layer_returns(vp_step *step) {
    vp_step_drop_locals(step, VP_LOCAL_OF_POST_NORM_BLOCK);
    vp_step_drop_locals(step, VP_LOCAL_OF_LAYER);
    vp_step_end_lifetime(step, VP_LIVES_LAYER);
}

/* The stack's loop variables and masks go with it. */
void vp_step_stack_returns(vp_step *step) {
    vp_step_drop_locals(step, VP_LOCAL_OF_BODY);
    vp_step_end_lifetime(step, VP_LIVES_STACK);
}


vp_t vp_step_branch_layer_start(vp_step *step, vp_t x, const vp_t *leaves) {
    return vp_layout_branch_layer_start(step, x, leaves);
}

vp_t vp_step_branch_layer_end(vp_step *step, vp_t y, const vp_t *leaves) {
    return vp_layout_branch_layer_end(step, y, leaves);
}

void vp_step_embedding_output(vp_step *step, vp_t output) {
    /* PEFT with gradient checkpointing calls enable_input_require_grads: a
     * forward hook makes the frozen token embedding's output require grad,
     * so that reentrant checkpoints see an input that needs one. PeftModel
     * does so whatever use_reentrant says, except on a quantized model,
     * where prepare_model_for_kbit_training does it for reentrant
     * checkpointing only (peft/utils/other.py) */
    const vp_recipe *r = step->recipe;
    const vp_finetune_method *method = vp_finetune_method_of(r);
    if (!method->peft || !r->checkpoint_every || vp_at(&step->sim, output)->requires_grad ||
        (!r->use_reentrant && method->quantizes_base))
        return;
    vp_requires_grad(&step->sim, output);
    /* its AccumulateGrad node holds it, .grad and all, for as long as the
     * graph lives: until the loss goes */
    vp_step_graph_leaf(step, output);
}

/* The graph lets go of the embedding outputs PEFT made require grad: they
 * go, and their .grad with them. */
void vp_step_drop_leaves(vp_sim *sim, vp_t *hooked) {
    for (unsigned i = 0; i < VP_GRAPH_LEAVES; i++) {
        if (!hooked[i]) continue;
        vp_t grad = vp_at(sim, hooked[i])->param_grad;
        vp_at(sim, hooked[i])->param_grad = 0;
        vp_drop(sim, grad);
        vp_drop(sim, hooked[i]);
        hooked[i] = 0;
    }
}


vp_t vp_step_loss_labels(const vp_step *step) {
    vp_t branch_labels = vp_step_tensor(step, VP_TENSOR_BRANCH_LABELS);
    if (branch_labels) return branch_labels;
    vp_t prompt_labels = vp_step_tensor(step, VP_TENSOR_PROMPT_LABELS);
    return prompt_labels ? prompt_labels : step->priv->labels;
}

vp_t vp_step_input_ids(const vp_step *step) { return step->priv->input_ids; }

unsigned vp_step_repeat(const vp_step *step) { return step->priv->fold_repeat; }

/* ---- LoRA's adapters ---- */

bool vp_step_add_adapter(vp_step *step, const vp_lora_adapter *adapter) {
    vp_step_private *p = step->priv;
    if (p->n_adapters == p->cap_adapters) {
        unsigned cap = p->cap_adapters ? p->cap_adapters * 2 : 32;
        vp_lora_adapter *grown = realloc(p->adapters, cap * sizeof *grown);
        if (!grown) return false;
        p->adapters = grown;
        p->cap_adapters = cap;
    }
    p->adapters[p->n_adapters++] = *adapter;
    return true;
}

const vp_lora_adapter *vp_step_adapter(const vp_step *step, vp_t weight) {
    const vp_step_private *p = step->priv;
    for (unsigned i = 0; i < p->n_adapters; i++)
        if (p->adapters[i].weight == weight) return &p->adapters[i];
    return NULL;
}

/* ---- scratch ---- */

void *vp_step_scratch(vp_step *step, size_t size) {
    if (step->priv->n_scratch == step->priv->cap_scratch) {
        unsigned cap = step->priv->cap_scratch ? step->priv->cap_scratch * 2 : 16;
        void **grown = realloc(step->priv->scratch, cap * sizeof *grown);
        if (!grown) {
            step->sim.status = VP_SIM_NOMEM;
            return NULL;
        }
        step->priv->scratch = grown;
        step->priv->cap_scratch = cap;
    }
    void *p = calloc(1, size);
    if (!p) {
        step->sim.status = VP_SIM_NOMEM;
        return NULL;
    }
    step->priv->scratch[step->priv->n_scratch++] = p;
    return p;
}

