/* op_context.h — what an op may use of the step it runs in: the services
 * of the step's state (autocast, the Python frames' locals, the graph's
 * holds, scratch memory), implemented in step_state.c. Ops, and the files
 * that run inside a forward (checkpoint, LoRA, the caches), include this
 * and never the driver's own step_private.h. The step's fields are still
 * step.h's one struct. */
#ifndef VP_OP_CONTEXT_H
#define VP_OP_CONTEXT_H

#include "step.h"

/* Zeroed memory owned by the step (contexts of checkpointed functions). */
void *vp_step_scratch(vp_step *step, size_t size);

/* Forgets the FP8 quantization an op's GEMMs shared (op_basic.c). */
void vp_step_clear_fp8(vp_step *step);

/* The token embedding's output, as forward hooks see it. */
void vp_step_embedding_output(vp_step *step, vp_t output);

/* Keeps t for as long as this micro-batch's autograd graph lives: Python
 * objects its nodes hold (a checkpoint's ctx.inputs), freed with the graph
 * (when the loop lets go of the loss, or after backward under HF's
 * Trainer), not when the node runs. */
void vp_step_graph_hold(vp_step *step, vp_t t);
/* Keeps t, which a recorded node's Function put on ctx as a plain
 * attribute (bitsandbytes' MatMul8bitLt: ctx.tensors = (None, subA, A)):
 * autograd does not release it when the node runs, the graph does when it
 * goes; a checkpointed chunk's rerun graph when the chunk's backward ends. */
void vp_step_ctx_hold(vp_step *step, vp_t t);
/* A bitsandbytes layer met its bias in another dtype than its input's:
 * notes the bias leaf, to be made in `dtype` when the step runs again. */
void vp_step_recast_leaf(vp_step *step, vp_t leaf, vp_dtype dtype);
/* The graph goes: the ctx tensors held from entry `from` on. */
void vp_step_release_ctx(vp_step *step, unsigned from);
/* A leaf that requires grad, made inside a checkpointed chunk's rerun: the
 * rerun's graph (its AccumulateGrad node) holds it, and the .grad its
 * backward gives it, until the chunk's backward ends
 * (vp_step_drop_rerun_leaves). */
void vp_step_rerun_leaf(vp_step *step, vp_t t);
/* A leaf that requires grad, made in the forward: the graph holds it, and
 * the .grad backward gives it, until the graph goes. */
void vp_step_graph_leaf(vp_step *step, vp_t t);
void vp_step_drop_rerun_leaves(vp_step *step);

/* Keeps a mixture layer's router logits with the model's outputs (a new
 * reference), or, inside a checkpointed chunk, as one of the chunk's
 * results. */
void vp_step_keep_router_logits(vp_step *step, vp_t logits);

/* Keeps t as a local of `frame` (a new reference). */
void vp_step_keep_local(vp_step *step, vp_t t, vp_local_frame frame);
/* A norm has returned: the locals of the post-norm block it ends go. */
void vp_step_norm_returns(vp_step *step);
/* An encoder stack returns (T5Stack.forward): its locals and its position
 * bias go. */
void vp_step_stack_returns(vp_step *step);

/* Leaves an autocast region: drops the casts made since `from`. */
void vp_step_clear_casts(vp_step *step, unsigned from);

/* The labels the loss reads: the batch's, or PEFT's with the virtual
 * tokens' -100 before them. */
static inline vp_t vp_step_loss_labels(const vp_step *step) {
    return step->prompt_labels ? step->prompt_labels : step->labels;
}

/* The slot array of layer `layer` (the shared template when folding). */
vp_t *vp_step_layer_leaves(vp_step *step, unsigned layer);

/* Autocast at an op boundary (torch/csrc/autograd/autocast_mode.cpp, CUDA
 * lists): ops on the lower-precision list cast fp32 inputs down, caching
 * the casts of leaves that require grad; ops on the fp32 list cast 16-bit
 * inputs up. Both return a new reference (x itself when nothing changes). */
vp_t vp_autocast_low(vp_step *step, vp_t x, const char *label);
vp_t vp_autocast_fp32(vp_step *step, vp_t x, const char *label);

#endif
