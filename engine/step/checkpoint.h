/* checkpoint.h — activation checkpointing as torch.utils.checkpoint does
 * it, for any function of up to four tensors: reentrant (CheckpointFunction:
 * a chunk of layers, HF's gradient checkpointing, or the attention core,
 * Megatron's selective recompute) or not (saved-tensor hooks: a chunk of
 * layers with use_reentrant=False). */
#ifndef VP_CHECKPOINT_H
#define VP_CHECKPOINT_H

#include "step.h"

typedef vp_t (*vp_recompute_fn)(vp_step *step, void *ctx, const vp_t *inputs);

/* The other arguments and results of the checkpointed call, as step fields
 * the function reads or sets:
 *  - `saved` are tensor arguments that need no gradient (ctx.save_for_backward:
 *    masks, position ids);
 *  - `held` sit inside non-tensor arguments (HF's position_embeddings
 *    tuple), which ctx keeps as they are;
 *  - `input_fields[i]`, for inputs past the first, is where the function
 *    reads input i (T5's position bias, the encoder's output): the rerun
 *    puts the detached input there;
 *  - `outputs` are more results besides the returned one (T5Block's
 *    position biases): the function leaves them in these fields; one that
 *    is an input passed through comes out as a view of it, as an
 *    autograd.Function's output does. */
typedef struct {
    vp_t *const *saved;
    unsigned n_saved;
    vp_t *const *held;
    unsigned n_held;
    vp_t *const *input_fields;
    vp_t *const *outputs;
    unsigned n_outputs;
} vp_checkpoint_args;

/* Runs fn(inputs) without grad and returns its output; keeps the inputs and
 * the other arguments for backward, which puts them back in their fields,
 * reruns fn with grad enabled (in a fresh autocast region), backpropagates
 * through the rerun from every output (zeros for an output that got no
 * gradient: autograd.Function materializes them), and hands each input its
 * gradient. `ctx` must live as long as the step (vp_step_scratch). */
vp_t vp_checkpoint(vp_step *step, vp_recompute_fn fn, void *ctx, const vp_t *inputs, unsigned n_inputs,
                   const vp_checkpoint_args *args);

/* The same with use_reentrant=False: fn runs with grad enabled, and what
 * autograd saves inside becomes a holder; the call's arguments stay until
 * the last holder goes. Backward's first unpack of a holder reruns fn
 * (stopping at the forward's last save with `early_stop`), the rerun's saves
 * filling the holders that are still alive. */
vp_t vp_checkpoint_nonreentrant(vp_step *step, vp_recompute_fn fn, void *ctx, const vp_t *inputs, unsigned n_inputs,
                                const vp_checkpoint_args *args, bool early_stop);

/* A recipe's checkpointing keys that cannot be modelled together, or NULL. */
const char *vp_checkpoint_recipe_problem(const vp_recipe *recipe);

/* The same for this model (op-selective's mixtures), or NULL. */
const char *vp_checkpoint_model_problem(const vp_model *model, const vp_recipe *recipe);

#endif
