/* checkpoint.c — forward without grad, backward by recomputation. */
#include "checkpoint.h"

typedef struct {
    vp_step *step;
    vp_recompute_fn fn;
    void *ctx;
    unsigned n_inputs;
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
                   const vp_t *kept, unsigned n_kept) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    vp_t y = fn(step, ctx, inputs);
    sim->grad_mode = grad_mode;
    call *c = vp_step_scratch(step, sizeof *c);
    if (!c) return y;
    *c = (call){step, fn, ctx, n_inputs};
    vp_node *node = vp_record(sim, backward_checkpoint, "checkpoint", inputs, n_inputs, &y, 1);
    if (node) {
        node->context = c;
        for (unsigned i = 0; i < n_inputs; i++) vp_save(sim, node, inputs[i]);
        for (unsigned i = 0; i < n_kept; i++) vp_save(sim, node, kept[i]);
    }
    return y;
}
