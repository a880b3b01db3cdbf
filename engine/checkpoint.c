/* checkpoint.c — forward without grad, backward by recomputation. */
#include "checkpoint.h"

typedef struct {
    vp_step *step;
    vp_recompute_fn fn;
    void *ctx;
    unsigned n_inputs, n_fields;
    vp_t *fields[VP_NODE_MAX_SAVED]; /* where the function reads the other arguments, in saved slot order */
} call;

/* CheckpointFunction.backward (torch/utils/checkpoint.py, reentrant):
 * detach the saved inputs, rerun the function with grad enabled and
 * autocast re-entered, backward from the recomputed output with the
 * incoming gradient, return the detached inputs' .grad. */
static void backward_checkpoint(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    const call *c = node->context;
    vp_step *step = c->step;
    vp_t g = vp_grad_out(sim, node, 0);
    vp_t detached[VP_NODE_MAX_IN] = {0};
    for (unsigned i = 0; i < c->n_inputs; i++) {
        vp_t x = vp_node_at(sim, index)->saved[i];
        detached[i] = vp_view(sim, x, vp_at(sim, x)->numel, "checkpoint.detach");
        vp_tensor *d = vp_at(sim, detached[i]);
        d->leaf = true;
        d->requires_grad = vp_at(sim, x)->requires_grad;
        d->grad_category = VP_CAT_TRANSIENT;
    }

    /* the rerun reads its other arguments where the forward did: the node's
     * (unpacked copies when offloaded) stand in for the step's own */
    vp_t outer[VP_NODE_MAX_SAVED];
    for (unsigned j = 0; j < c->n_fields; j++) {
        outer[j] = *c->fields[j];
        *c->fields[j] = vp_node_at(sim, index)->saved[c->n_inputs + j];
    }
    vp_phase phase = step->ledger.place.phase;
    vp_category category = sim->category;
    step->ledger.place.phase = VP_PHASE_RECOMPUTE;
    sim->category = VP_CAT_ACTIVATIONS;
    uint32_t first = sim->n_nodes;
    unsigned casts = step->n_casts;
    unsigned repeat = step->fold_repeat;
    step->fold_repeat = 1;
    vp_t y = c->fn(step, c->ctx, detached);
    vp_step_clear_casts(step, casts);
    step->fold_repeat = repeat;
    /* backwards: a field may come twice (position_ids and cache_position) */
    for (unsigned j = c->n_fields; j-- > 0;) *c->fields[j] = outer[j];
    sim->category = category;
    step->ledger.place.phase = phase;

    vp_hold(sim, g);
    vp_at(sim, y)->grad = g;
    vp_backward(sim, first, sim->n_nodes);
    vp_drop(sim, y);
    for (unsigned i = 0; i < c->n_inputs; i++) {
        vp_t gx = vp_at(sim, detached[i])->param_grad;
        vp_at(sim, detached[i])->param_grad = 0;
        vp_drop(sim, detached[i]);
        vp_give_grad(sim, vp_node_at(sim, index), i, gx);
    }
    sim->n_nodes = first;
}

vp_t vp_checkpoint(vp_step *step, vp_recompute_fn fn, void *ctx, const vp_t *inputs, unsigned n_inputs,
                   const vp_checkpoint_args *args) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    vp_t y = fn(step, ctx, inputs);
    sim->grad_mode = grad_mode;
    call *c = vp_step_scratch(step, sizeof *c);
    if (!c) return y;
    unsigned n_fields = args->n_saved + args->n_held;
    if (n_inputs + n_fields > VP_NODE_MAX_SAVED) { /* more than a node keeps: an op-table bug */
        sim->status = VP_SIM_OVERFLOW;
        return y;
    }
    *c = (call){step, fn, ctx, n_inputs, n_fields, {0}};
    vp_node *node = vp_record(sim, backward_checkpoint, "checkpoint", inputs, n_inputs, &y, 1);
    if (!node) return y;
    node->context = c;
    for (unsigned i = 0; i < n_inputs; i++) vp_save_at(sim, node, i, inputs[i]);
    /* by slot, so that an empty field keeps its place */
    for (unsigned j = 0; j < n_fields; j++) {
        bool saved = j < args->n_saved;
        vp_t *field = saved ? args->saved[j] : args->held[j - args->n_saved];
        c->fields[j] = field;
        if (!*field) continue;
        if (saved) {
            vp_save_at(sim, node, n_inputs + j, *field);
        } else {
            vp_hold_at(sim, node, n_inputs + j, *field); /* for the rerun */
            vp_step_graph_hold(step, *field);
        }
    }
    return y;
}
