/* update.h — the optimizer step and zero_grad on the step's timeline. */
#ifndef VP_UPDATE_H
#define VP_UPDATE_H

#include "step.h"

/* The step: fp32 gradients for master weights where the framework makes
 * them, then the implementation's temporaries. */
void vp_update_step(vp_step *step);

/* One parameter's own optimizer steps (optimizer_in_backward: one
 * optimizer per parameter): its temporaries, made and freed. */
void vp_update_parameter(vp_step *step, vp_t leaf);

/* zero_grad(set_to_none=True): every kept gradient is freed. */
void vp_update_zero_grad(vp_step *step);

/* Calls fn on every trainable leaf, each group folded by its repeat count. */
void vp_update_for_each_trainable(vp_step *step, void (*fn)(vp_step *, vp_t, void *), void *ctx);

#endif
