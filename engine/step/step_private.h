/* step_private.h — what the step files share (the driver step.c, the
 * resident state's layout.c, the optimizer's update.c) and ops must not
 * use: the leaf groups of the layer instances and the releases the driver
 * makes when frames return and graphs go (step_state.c). */
#ifndef VP_STEP_PRIVATE_H
#define VP_STEP_PRIVATE_H

#include "op_context.h"

/* The parameter arrays, with how many real instances each stands for: the
 * embedding, the layers (one instance per chunk position when folding), the
 * final ops. */
typedef struct {
    vp_t *leaves;
    unsigned n;
    unsigned repeat;
    const unsigned *order;       /* the slots in registration order (a layer's); NULL: slot order */
} vp_leaf_group;

/* The i-th parameter slot of a group as model.parameters() meets them. */
static inline vp_t vp_leaf_group_registered(const vp_leaf_group *group, unsigned i) {
    return group->leaves[group->order ? group->order[i] : i];
}

unsigned vp_step_leaf_group_count(const vp_step *step);
vp_leaf_group vp_step_leaf_group_at(vp_step *step, unsigned i);

/* The layer instance i: how many real layers it stands for, the layer it
 * stands for first, and the ops it runs. */
unsigned vp_step_instance_repeat(const vp_step *step, unsigned i);
unsigned vp_step_instance_layer(const vp_step *step, unsigned i);
const vp_section *vp_step_instance_section(const vp_step *step, unsigned i);

/* A frame returns: its locals go (vp_step_keep_local's). */
void vp_step_drop_locals(vp_step *step, vp_local_frame frame);
/* The running stack's loop variables and masks go (T5Stack's). */
void vp_step_drop_stack(vp_step *step);
/* The graph lets go of leaves it held, each with its .grad. */
void vp_step_drop_leaves(vp_sim *sim, vp_t *hooked);
/* The graph lets go of the Python objects its nodes held (vp_step_graph_hold's). */
void vp_step_drop_refs(vp_sim *sim, vp_t *refs);
/* The last micro-batch's graph goes once the next forward has run: its
 * ctx tensors, the first `n` entries. */
void vp_step_release_old_ctx(vp_step *step, unsigned n);
/* The outputs holding the router logits go: the references drop, the
 * array stays for the next micro-batch. */
void vp_step_release_router_logits(vp_sim *sim, vp_router_logits *r);

#endif
