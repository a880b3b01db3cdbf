/* optim_in_backward.c — torchtune's optimizer in backward (optimizer_in_bwd:
 * torchtune/modules/optim.py OptimizerInBackward; before it,
 * training/memory.py register_optim_in_bwd_hooks; torchtune at bd2a0fc7c):
 * an optimizer of its own for every parameter that requires grad, stepped
 * in the parameter's register_post_accumulate_grad_hook (PyTorch 2.1+),
 * which then calls zero_grad() (set_to_none). A gradient lives from its
 * AccumulateGrad to the end of its hook, the optimizer's temporaries are one
 * parameter's, and nothing is left for an optimizer phase after backward. */
#include "optim_in_backward.h"

#include "framework.h"
#include "optimizer.h"
#include "step_private.h"
#include "update.h"

/* optimizer.step(), then optimizer.zero_grad(): .grad = None */
static void step_parameter(void *ctx, vp_t leaf) {
    vp_step *step = ctx;
    vp_update_parameter(step, leaf);
    vp_tensor *t = vp_at(&step->sim, leaf);
    vp_t grad = t->param_grad;
    t->param_grad = 0;
    vp_drop(&step->sim, grad);
}

void vp_optim_in_backward_arm(vp_step *step) {
    if (!step->recipe->optimizer_in_backward) return;
    step->sim.post_accumulate = step_parameter;
    step->sim.post_accumulate_ctx = step;
    for (unsigned g = 0; g < vp_step_leaf_group_count(step); g++) {
        vp_leaf_group group = vp_step_leaf_group_at(step, g);
        for (unsigned i = 0; i < group.n; i++) {
            vp_t t = group.leaves[i];
            if (t && vp_at(&step->sim, t)->requires_grad) vp_at(&step->sim, t)->post_accumulate = true;
        }
    }
}

const char *vp_optim_in_backward_problem(const vp_recipe *r) {
    if (!r->optimizer_in_backward) return NULL;
    const vp_optimizer_kind *kind = vp_optimizer_at(r->optimizer);
    if (kind && !kind->steps) return "optimizer_in_backward: needs an optimizer to step (optimizer is none)";
    /* OptimizerInBackwardWrapper: "only meant to be used for single-device
     * use cases"; the distributed recipe runs it over FSDP2 (fully_shard),
     * which vramplan does not model yet */
    const vp_framework_kind *framework = vp_framework_of(r);
    if (framework->bucketed_grads || !framework->hf_modeling || r->dp > 1 || r->tp > 1 || r->pp > 1 || r->cp > 1)
        return "optimizer_in_backward: modelled on one GPU, as torchtune's single-device recipe runs it (framework "
               "torch; dp, tp, pp and cp 1); its distributed recipe runs it over FSDP2, not modelled yet";
    /* full_finetune_single_device.py and full_finetune_distributed.py:
     * "Gradient accumulation is not supported with optimizer in bwd" (and
     * so is clip_grad_norm, which has no recipe key here) */
    if (vp_recipe_microbatches(r) > 1)
        return "optimizer_in_backward: torchtune refuses gradient accumulation with it (grad_accum must be 1)";
    if (vp_precision_is_mixed(r->precision))
        return "optimizer_in_backward: each parameter steps in its own dtype, as torchtune trains (precision fp32, "
               "bf16, fp16 or amp-*); mixed-* and fp8 keep fp32 master weights";
    if (!r->grads_set_to_none)
        return "optimizer_in_backward: its hook sets each gradient to None (grads_set_to_none must be true)";
    return NULL;
}
