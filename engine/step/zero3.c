/* zero3.c — which of a layer's gathered parameters DeepSpeed's coordinator
 * keeps, from the module trace of a step. A parameter stands for its
 * module (DeepSpeed releases module by module; a Linear's weight and bias
 * sit side by side in the trace). */
#include "zero3.h"

#include <stdlib.h>

#include "layout.h"
#include "ops.h"
#include "step_private.h"

/* One use of a parameter in the trace; `instance` is the layer instance
 * whose forward (or recomputation) it is, -1 for anything else. */
typedef struct {
    vp_t leaf;
    uint64_t numel;
    int instance;
    bool recompute;
} use;

typedef struct {
    use *uses;
    size_t n, cap;
    bool failed;
} trace;

static void add(trace *t, vp_t leaf, uint64_t numel, int instance, bool recompute) {
    if (t->failed) return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        use *grown = realloc(t->uses, cap * sizeof *grown);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->uses = grown;
        t->cap = cap;
    }
    t->uses[t->n++] = (use){leaf, numel, instance, recompute};
}

/* The parameters among `leaves` in module order (or reversed, as backward
 * reaches them); every parameter counts toward distances, persistent ones
 * too (DeepSpeed's scan adds each module's ds_numel). */
static void add_leaves(trace *t, vp_step *step, const vp_t *leaves, unsigned n, bool reverse, int instance,
                       bool recompute) {
    for (unsigned k = 0; k < n; k++) {
        vp_t leaf = leaves[reverse ? n - 1 - k : k];
        if (leaf && vp_at(&step->sim, leaf)->category == VP_CAT_PARAMS)
            add(t, leaf, vp_at(&step->sim, leaf)->numel, instance, recompute);
    }
}

static vp_t *instance_leaves(vp_step *step, unsigned instance) {
    return step->priv->layer_leaves + (size_t)instance * vp_model_layer_slots(step->model);
}

/* A chunk's layers as the trace sees them: forward order, or backward's. */
static void add_chunk(trace *t, vp_step *step, const vp_chunk *c, bool reverse, bool recompute) {
    unsigned slots = vp_model_layer_slots(step->model);
    for (unsigned k = 0; k < c->layers; k++) {
        unsigned j = reverse ? c->layers - 1 - k : k;
        int instance = reverse ? -1 : (int)(c->instance + j);
        add_leaves(t, step, instance_leaves(step, c->instance + j), slots, reverse, instance, recompute);
    }
}

/* The other chunks a folded entry stands for: their parameters count
 * toward distances, as anonymous uses. */
static void add_folded(trace *t, vp_step *step, const vp_chunk *c, unsigned copies, unsigned passes) {
    unsigned slots = vp_model_layer_slots(step->model);
    uint64_t numel = 0;
    for (unsigned k = 0; k < c->layers; k++) {
        const vp_t *leaves = instance_leaves(step, c->instance + k);
        for (unsigned j = 0; j < slots; j++)
            if (leaves[j] && vp_at(&step->sim, leaves[j])->category == VP_CAT_PARAMS)
                numel += vp_at(&step->sim, leaves[j])->numel;
    }
    for (unsigned i = 0; i < copies * passes; i++) add(t, 0, numel, -1, false);
}

/* The final ops' forward, in order: a branch's decoder layer (op_branch.c)
 * a unit of its own, whose instance follows the layers'; the rest the
 * root's. (The branch's second use of the shared head is not traced.) */
static void add_final_forward(trace *t, vp_step *step) {
    vp_step_private *priv = step->priv;
    const vp_section *final = &step->model->section[VP_SECTION_FINAL];
    unsigned at = 0, b = 0;
    for (unsigned i = 0; i < final->n_ops; i++) {
        unsigned first, n;
        const vp_op_kind *kind = final->ops[i].kind;
        if (!kind->unit_slots || !kind->unit_slots(&final->ops[i], &first, &n)) continue;
        add_leaves(t, step, priv->final_leaves + at, first - at, false, -1, false);
        add_leaves(t, step, priv->final_leaves + first, n, false, (int)(priv->n_layer_instances + b++), false);
        at = first + n;
    }
    add_leaves(t, step, priv->final_leaves + at, final->n_slots - at, false, -1, false);
}

/* The step's module trace: the forward (embeddings, layers, an
 * encoder-decoder's bridge, the head, whose tied weight is the
 * embedding's), then backward in reverse, each checkpointed chunk first
 * recomputed in forward order. */
static void build(trace *t, vp_step *step) {
    vp_step_private *priv = step->priv;
    const vp_model *m = step->model;
    bool bridge = vp_model_encoder_decoder(m);
    /* a tied head's weight is the token embedding's (the forward sets
     * step->tied_weight; a stage without the embeddings has its copy) */
    const vp_section *embed = &m->section[VP_SECTION_EMBED];
    vp_t tied_weight = step->stage.embed ? priv->embed_leaves[embed->ops[0].slot] : step->tied_weight;
    bool tied = step->stage.final && m->facts.tied_head != NULL && tied_weight;
    if (step->stage.embed) add_leaves(t, step, priv->embed_leaves, embed->n_slots, false, -1, false);
    /* a folded entry's own chunk stands last among those it stands for */
    for (unsigned i = 0; i < priv->n_chunks; i++) {
        if (bridge && priv->chunks[i].first_layer == m->first_layers)
            add_leaves(t, step, priv->bridge_leaves, m->section[VP_SECTION_BRIDGE].n_slots, false, -1, false);
        add_folded(t, step, &priv->chunks[i], priv->chunk_repeat[i] - 1, 1);
        add_chunk(t, step, &priv->chunks[i], false, false);
    }
    if (step->stage.final) {
        /* the head's forward and, at once, its backward */
        add_final_forward(t, step);
        for (unsigned k = 0; tied && k < 2; k++) add(t, tied_weight, vp_at(&step->sim, tied_weight)->numel, -1, false);
        add_leaves(t, step, priv->final_leaves, m->section[VP_SECTION_FINAL].n_slots, true, -1, false);
    }
    for (unsigned i = priv->n_chunks; i-- > 0;) {
        const vp_chunk *c = &priv->chunks[i];
        if (c->checkpointed) add_chunk(t, step, c, false, true);
        add_chunk(t, step, c, true, false);
        add_folded(t, step, c, priv->chunk_repeat[i] - 1, c->checkpointed ? 2 : 1);
        if (bridge && c->first_layer == m->first_layers)
            add_leaves(t, step, priv->bridge_leaves, m->section[VP_SECTION_BRIDGE].n_slots, true, -1, false);
    }
}

bool vp_zero3_kept_bytes(vp_step *step, vp_zero3_kept *out) {
    for (unsigned i = 0; i < step->priv->n_layer_instances + step->priv->n_branch_layers; i++)
        out[i] = (vp_zero3_kept){0, 0};
    uint64_t reach = step->priv->plan.reuse_distance_elements;
    if (!reach) return true;
    trace t = {0};
    build(&t, step);
    /* next[u]: the trace's next use of the same parameter; start[u]: the
     * elements before use u (a prefix sum), so that the modules strictly
     * between uses a and b hold start[b] - start[a + 1] elements */
    size_t *next = t.failed ? NULL : malloc((t.n + 1) * sizeof *next);
    uint64_t *start = t.failed ? NULL : malloc((t.n + 1) * sizeof *start);
    size_t *seen = t.failed ? NULL : malloc(((size_t)step->sim.n_tensors + 1) * sizeof *seen);
    bool ok = next && start && seen;
    if (ok) {
        for (size_t k = 0; k <= step->sim.n_tensors; k++) seen[k] = SIZE_MAX;
        start[0] = 0;
        for (size_t u = 0; u < t.n; u++) start[u + 1] = start[u] + t.uses[u].numel;
        for (size_t u = t.n; u-- > 0;) {
            next[u] = seen[t.uses[u].leaf];
            seen[t.uses[u].leaf] = u;
        }
        for (size_t u = 0; u < t.n; u++) {
            const use *x = &t.uses[u];
            if (x->instance < 0 || next[u] == SIZE_MAX || start[next[u]] - start[u + 1] >= reach) continue;
            uint64_t bytes = vp_layout_gathered_bytes(step, x->leaf);
            if (x->recompute) out[x->instance].recompute += bytes;
            else out[x->instance].forward += bytes;
        }
    }
    free(seen);
    free(start);
    free(next);
    free(t.uses);
    return ok;
}
