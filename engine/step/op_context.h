/* op_context.h — what an op may use of the step it runs in: step.h's
 * public fields (shapes, dtypes, recipe, model), the tensors the forward
 * shares (the tensor table: step_tensors.c) and the services of the step's
 * state (autocast, the Python frames' locals, the graph's holds, scratch
 * memory: step_state.c). Ops, and the files that run inside a forward
 * (checkpoint, LoRA, the caches), include this and never the driver's own
 * step_private.h. */
#ifndef VP_OP_CONTEXT_H
#define VP_OP_CONTEXT_H

#include "step.h"
#include "step_tensors.h"

struct vp_lora_adapter;

/* Tensors a Python frame keeps as locals, not as autograd saves: the model
 * body's (HF's inputs_embeds, position_embeds) until it returns, before the
 * head; a wrapper's (PEFT's forward) until the outputs come back; a decoder
 * layer's (Gemma 2's sliding-window mask) until the layer returns; a
 * post-norm block's (BertAttention's self_outputs, BertLayer's
 * intermediate_output) until the norm that ends the block returns. */
typedef enum {
    VP_LOCAL_OF_BODY,
    VP_LOCAL_OF_WRAPPER,
    VP_LOCAL_OF_LAYER,
    VP_LOCAL_OF_POST_NORM_BLOCK,
    VP_LOCAL_FRAMES
} vp_local_frame;

/* ---- the tensor table ---- */

/* How long a shared tensor lives: until the frame that keeps it returns —
 * the decoder layer, the running stack (T5Stack; the model body's return
 * ends it too), the model body (XModel.forward), the wrapper (PEFT's
 * forward), the model's outputs (until `out = model(batch)` rebinds), or
 * the whole step. */
typedef enum {
    VP_LIVES_LAYER,
    VP_LIVES_STACK,
    VP_LIVES_BODY,
    VP_LIVES_WRAPPER,
    VP_LIVES_OUTPUTS,
    VP_LIVES_STEP,
} vp_lifetime;

/* What a checkpointed chunk's layer call does with a shared tensor: nothing;
 * saves it (ctx.save_for_backward: masks, position ids); holds it inside a
 * non-tensor argument (the rotary tables' tuple); takes it as an input that
 * needs grad (T5's encoder output); or takes it and returns it (T5's
 * position biases, the loop variables T5Block hands to the next block). */
typedef enum { VP_CALL_NONE, VP_CALL_SAVED, VP_CALL_HELD, VP_CALL_INPUT, VP_CALL_RETURNED } vp_call_role;

typedef enum {
#define VP_TENSOR_SLOT(name, lifetime, role, argument, passes) VP_TENSOR_##name,
    VP_STEP_TENSORS(VP_TENSOR_SLOT)
#undef VP_TENSOR_SLOT
    VP_TENSOR_SLOTS
} vp_tensor_slot;

/* The slot's tensor (borrowed), or 0. */
vp_t vp_step_tensor(const vp_step *step, vp_tensor_slot slot);
/* Puts t in the slot, taking over the caller's reference to it; the
 * slot's tensor before it is dropped first (0: the slot is emptied). */
void vp_step_put_tensor(vp_step *step, vp_tensor_slot slot, vp_t t);
/* Puts t in the slot without a reference: another owner keeps it alive
 * for the slot's lifetime (a layer's locals, a leaf). */
void vp_step_lend_tensor(vp_step *step, vp_tensor_slot slot, vp_t t);
/* Where the slot keeps its tensor, for a checkpointed call's arguments
 * (checkpoint.h), which a rerun sets aside and puts back. */
vp_t *vp_step_tensor_field(vp_step *step, vp_tensor_slot slot);
/* The layer call passes the slot's tensor as `passes` of its arguments
 * (step_tensors.h's default until the slot's lifetime ends). */
void vp_step_pass_tensor(vp_step *step, vp_tensor_slot slot, unsigned passes);
/* A mask's row length (HF's target_length), kept with its slot for its
 * readers, reruns in backward included (it outlives the tensor). */
uint64_t vp_step_tensor_columns(const vp_step *step, vp_tensor_slot slot);
void vp_step_set_tensor_columns(vp_step *step, vp_tensor_slot slot, uint64_t columns);

/* ---- the step's services ---- */

/* How many identical runs the code now running stands for (folding). */
unsigned vp_step_repeat(const vp_step *step);

/* LoRA's adapters beside `weight`, or NULL (lora.h). */
const struct vp_lora_adapter *vp_step_adapter(const vp_step *step, vp_t weight);

/* Zeroed memory owned by the step (contexts of checkpointed functions). */
void *vp_step_scratch(vp_step *step, size_t size);

/* Forgets the FP8 quantization an op's GEMMs shared (op_basic.c). */
void vp_step_clear_fp8(vp_step *step);

/* The token embedding's output, as forward hooks see it. */
void vp_step_embedding_output(vp_step *step, vp_t output);

/* Around a branch's decoder layer (op_branch.c), whose leaves start at
 * `leaves` among the final ops': under ZeRO-3 and FSDP a unit of its own,
 * gathered before it runs and released after, gathered again for its
 * backward and released, its gradients reduce-scattered, when that is done
 * (layout.c, as around the model's layers). Each returns a new reference. */
vp_t vp_step_branch_layer_start(vp_step *step, vp_t x, const vp_t *leaves);
vp_t vp_step_branch_layer_end(vp_step *step, vp_t y, const vp_t *leaves);

/* Keeps t, which a recorded node's Function put on ctx as a plain
 * attribute (bitsandbytes' MatMul8bitLt: ctx.tensors = (None, subA, A)):
 * autograd does not release it when the node runs, the graph does when it
 * goes; a checkpointed chunk's rerun graph when the chunk's backward ends. */
void vp_step_ctx_hold(vp_step *step, vp_t t);
/* A bitsandbytes layer met its bias in another dtype than its input's:
 * notes the bias leaf, to be made in `dtype` when the step runs again. */
void vp_step_recast_leaf(vp_step *step, vp_t leaf, vp_dtype dtype);
/* A leaf that requires grad, made inside a checkpointed chunk's rerun: the
 * rerun's graph (its AccumulateGrad node) holds it, and the .grad its
 * backward gives it, until the chunk's backward ends
 * (vp_step_drop_rerun_leaves). */
void vp_step_rerun_leaf(vp_step *step, vp_t t);
/* A leaf that requires grad, made in the forward: the graph holds it, and
 * the .grad backward gives it, until the graph goes. */
void vp_step_graph_leaf(vp_step *step, vp_t t);

/* Keeps a mixture layer's router logits with the model's outputs (a new
 * reference), or, inside a checkpointed chunk, as one of the chunk's
 * results. */
void vp_step_keep_router_logits(vp_step *step, vp_t logits);

/* The model's mask slot `layer` is passed: CAUSAL_MASK, or on GPT-OSS's
 * even layers SLIDING_MASK (its configs' layer_types alternate, sliding
 * first), both when the step's call is made and when its rerun reads it. */
vp_tensor_slot vp_step_model_mask_slot(const vp_step *step, unsigned layer);

/* Keeps t as a local of `frame` (a new reference). */
void vp_step_keep_local(vp_step *step, vp_t t, vp_local_frame frame);
/* The decoder layer's one kept name is rebound to t (a new reference):
 * what it held goes (GptOssDecoderLayer's `_`, the attention's weights,
 * then the router scores). */
void vp_step_rebind_layer_local(vp_step *step, vp_t t);
/* A decoder layer that an op runs (not the step's layer loop) returns:
 * its locals and its layer-lifetime tensors go, as the loop's do. */
void vp_step_layer_returns(vp_step *step);
/* A norm has returned: the locals of the post-norm block it ends go. */
void vp_step_norm_returns(vp_step *step);
/* An encoder stack returns (T5Stack.forward): its locals and its position
 * bias go. */
void vp_step_stack_returns(vp_step *step);


/* The batch's input ids. */
vp_t vp_step_input_ids(const vp_step *step);

/* The labels the loss reads: a branch's (its labels k ahead), or the
 * batch's, or PEFT's with the virtual tokens' -100 before them. */
vp_t vp_step_loss_labels(const vp_step *step);


/* Autocast at an op boundary (torch/csrc/autograd/autocast_mode.cpp, CUDA
 * lists): ops on the lower-precision list cast fp32 inputs down, caching
 * the casts of leaves that require grad; ops on the fp32 list cast 16-bit
 * inputs up. Both return a new reference (x itself when nothing changes). */
vp_t vp_autocast_low(vp_step *step, vp_t x, const char *label);
vp_t vp_autocast_fp32(vp_step *step, vp_t x, const char *label);

#endif
