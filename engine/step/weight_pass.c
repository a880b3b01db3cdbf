/* weight_pass.c — the gradients a split backward keeps for its weight half. */
#include "weight_pass.h"

#include <stdlib.h>

#include "step_private.h"

/* How many layers the node stands for: its folded chunk's repeat, else 1. */
static unsigned repeat_of(const vp_step *step, uint32_t node) {
    const struct vp_step_private *priv = step->priv;
    for (unsigned i = 0; i < priv->n_chunks; i++)
        if (node >= priv->chunks[i].first_node && node < priv->chunks[i].end_node) return priv->chunk_repeat[i];
    return 1;
}

static bool on_path(const vp_sim *sim, const bool *path, vp_t t) {
    vp_t base = sim->tensors[t].base;
    return path[t] || (base && path[base]);
}

bool vp_weight_pass_bytes(const vp_step *step, uint32_t first, uint32_t head_first, uint32_t end, vp_t input,
                          uint64_t *bytes, uint64_t *head) {
    const vp_sim *sim = &step->sim;
    bool cpu = step->recipe->device == VP_DEVICE_CPU;
    *bytes = *head = 0;
    if (!input) return true;
    bool *path = calloc((size_t)sim->n_tensors + 1, sizeof *path);
    if (!path) return false;
    path[input] = true;
    for (uint32_t n = first; n < end && n < sim->n_nodes; n++) {
        const vp_node *node = &sim->nodes[n];
        bool from_input = false, from_other = false;
        for (unsigned k = 0; k < VP_NODE_MAX_IN; k++) {
            if (!node->in[k]) continue;
            if (on_path(sim, path, node->in[k])) from_input = true;
            else from_other = true;
        }
        if (!from_input) continue;
        uint64_t held = 0;
        for (unsigned k = 0; k < VP_NODE_MAX_OUT; k++) {
            vp_t t = node->out[k];
            if (!t) continue;
            path[t] = true;
            if (!from_other) continue;
            const vp_tensor *x = &sim->tensors[t];
            uint64_t b = vp_bytes_of((vp_dtype)x->grad_dtype, x->numel);
            held += cpu ? b : vp_round_block(b);
        }
        *bytes += held * repeat_of(step, n);
        if (n >= head_first) *head += held;
    }
    free(path);
    return true;
}
