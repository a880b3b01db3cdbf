/* optim_in_backward.h — torchtune's optimizer in backward: one optimizer per
 * parameter, stepped as soon as its gradient is accumulated. */
#ifndef VP_OPTIM_IN_BACKWARD_H
#define VP_OPTIM_IN_BACKWARD_H

#include "step.h"

/* Hooks every trainable parameter of the step (after its leaves are made):
 * its AccumulateGrad steps the parameter's optimizer and sets the gradient
 * to None. Nothing when the recipe does not ask for it. */
void vp_optim_in_backward_arm(vp_step *step);

/* The recipe keys that cannot run with optimizer_in_backward, or NULL. */
const char *vp_optim_in_backward_problem(const vp_recipe *recipe);

#endif
