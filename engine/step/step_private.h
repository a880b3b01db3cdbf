/* step_private.h — what the step files share (the driver step.c, the
 * resident state's layout.c, the optimizer's update.c, checkpointing, the
 * services) and ops must not use: the driver's own state, the leaf groups
 * of the layer instances, and the releases the driver makes when frames
 * return and graphs go (step_state.c, step_tensors.c). */
#ifndef VP_STEP_PRIVATE_H
#define VP_STEP_PRIVATE_H

#include "op_context.h"
#include "shard.h"

struct vp_optimizer_kind;
struct vp_layer_hook;

enum { VP_GRAPH_LEAVES = 3 };

/* A run of consecutive layers evaluated as one unit: under activation
 * checkpointing, the chunk whose input alone is kept. */
typedef struct vp_chunk {
    struct vp_step *step;
    unsigned first_layer;
    unsigned layers;
    bool checkpointed;
    uint32_t first_node, end_node;   /* its nodes in the forward graph */
    uint32_t first_tensor;           /* tensors created before it are external */
    vp_t input, output;
    unsigned instance;               /* its first layer instance */
} vp_chunk;

typedef struct {
    vp_t param, cast;
    unsigned repeat;                 /* fold multiplicity when the cast was made */
    int layer;                       /* the layer that made it */
} vp_cast_entry;

/* A tensor an autograd Function keeps as a plain ctx attribute, freed with
 * the graph; made while folding, it stands for `repeat` of them. */
typedef struct {
    vp_t tensor;
    unsigned repeat;
} vp_ctx_ref;

/* Where a leaf comes from: copy `copy` of the op's spec `spec`. */
typedef struct {
    vp_t leaf;
    const struct vp_op *op;
    unsigned spec, copy;
} vp_leaf_origin;

/* A leaf to make in another dtype than its spec's: bitsandbytes' Linear4bit
 * and Linear8bitLt replace a bias of another dtype than their input's by a
 * copy in the input's, for good, at the first forward; the step finds them
 * and runs again with them recast (vp_step_run_stage). */
typedef struct {
    const struct vp_op *op;
    unsigned spec, copy;
    vp_dtype dtype;
} vp_leaf_recast;

enum { VP_RECASTS_MAX = 64 };
enum { VP_LOCALS_MAX = 8 };

/* One slot of the tensor table (step_tensors.h). */
typedef struct {
    vp_t tensor;
    bool lent;                       /* another owner keeps it: the slot holds no reference */
    unsigned passes;                 /* arguments of the layer call it is */
    uint64_t columns;                /* a mask's row length */
} vp_tensor_entry;

/* The driver's own state: ops see only step.h's public part. */
typedef struct vp_step_private {
    const struct vp_optimizer_kind *optimizer;
    bool fold;                       /* evaluate identical layers once */
    unsigned fold_repeat;            /* repetitions the code now running stands for */
    bool fold_unalike;               /* a folded run's layers were not alike: evaluate again unfolded */
    vp_tensor_entry tensors[VP_TENSOR_SLOTS]; /* the tensor table (step_tensors.c) */
    vp_t input_ids, labels, attention_mask; /* the batch (an encoder-decoder's carries the mask) */
    vp_t token_type_ids;         /* a prefix-LM's batch: which tokens are the prefix (PaliGemma's processor) */
    vp_t loss;
    vp_t *bridge_leaves;
    uint32_t bridge_first_node, bridge_end_node;
    /* leaves of the forward that the graph keeps with their .grad: the
     * embedding outputs made to require grad (PEFT, checkpointing; an
     * encoder-decoder's shared embedding runs twice) and T5's first
     * cross-attention zero bias under non-reentrant checkpointing */
    vp_t graph_leaves[VP_GRAPH_LEAVES];
    /* the router logits a checkpointed chunk returns beside its hidden
     * states (one per layer: router_aux_loss's recipe_problem bounds a chunk), while one runs */
    vp_t chunk_router_logits[VP_CHUNK_ROUTER_MAX];
    bool capture_router_logits;
    /* a non-reentrant checkpoint's rerun: FSDP wraps the checkpointed
     * layer (FSDP(CheckpointWrapper(layer))), so its hooks stay out of it */
    bool frame_rerun;
    vp_t locals[VP_LOCAL_FRAMES][VP_LOCALS_MAX]; /* vp_step_keep_local's */
    vp_t graph_refs[VP_LOCALS_MAX];  /* vp_step_graph_hold's */
    vp_t rerun_leaves[VP_GRAPH_LEAVES]; /* vp_step_rerun_leaf's */
    /* leaves: one slot array per section instance */
    vp_t *embed_leaves, *final_leaves;
    vp_t *layer_leaves;              /* n_layer_instances x layer slots */
    unsigned n_layer_instances;
    /* the model's layer whose leaves are being made (layer-specific
     * target_parameters); UINT_MAX outside the layers */
    unsigned leaves_layer;
    /* torch.autocast's weight cache: casts of leaves, cleared when the
     * autocast region exits */
    vp_cast_entry *casts;
    unsigned n_casts, cap_casts;
    vp_ctx_ref *ctx_refs;            /* vp_step_ctx_hold's, in order */
    unsigned n_ctx_refs, cap_ctx_refs;
    vp_leaf_origin *origins;         /* every leaf vp_layout_create_leaves made */
    unsigned n_origins, cap_origins;
    const vp_leaf_recast *recasts;   /* leaves to make recast (the second run) */
    unsigned n_recasts;
    vp_leaf_recast found[VP_RECASTS_MAX]; /* leaves this run found to recast */
    unsigned n_found;
    uint64_t gathered_live;          /* bytes of layers' parameters all-gathered now (ZeRO-3, FSDP) */
    vp_chunk *chunks;                /* the forward's layer chunks, in order */
    unsigned n_chunks;
    unsigned *chunk_repeat;          /* how many chunks each entry stands for */
    /* the data-parallel layout */
    vp_shard_plan plan;
    struct vp_layer_hook *hooks;     /* one per layer instance, then one per branch layer */
    unsigned n_branch_layers;        /* the final ops' branches' decoder layers (op_branch.c): units of their own */
    uint64_t root_gather_bytes;      /* FSDP's root unit (embeddings, head) gathered for the step */
    uint64_t rerun_gather_state;     /* FSDP2: a reentrant rerun's all-gather output held (layout.c) */
    const struct vp_layer_hook *flat_for; /* FSDP2: the unit the all-gather output in flight is for */
    uint64_t root_host_copy;         /* the root's shards copied to the GPU first (FSDP2's CPUOffloadPolicy) */
    uint64_t root_copy_in;           /* ... its shards cast to param_dtype first (FSDP2's mixed precision) */
    const struct vp_layer_hook *last_recorded; /* FSDP2: the last unit in post_forward_order (NULL: none, the root) */
    uint64_t mistargeted;            /* FSDP2 before 2.10: prefetched outputs no one waits on (layout.c) */
    /* FSDP2 under a pipeline schedule (plan.defers_reduce): whether this
     * micro-batch is the step's last, whether the root is gathered now, and
     * the root's accumulated unsharded gradients */
    bool final_micro_batch, root_held;
    uint64_t root_accumulated;
    uint64_t host_bytes, host_peak, nvme_bytes; /* per rank, outside the GPU */
    uint64_t offloaded;              /* pinned host bytes the forward's saved tensors were packed into */
    /* this micro-batch's under a split backward (weight_pass.h), and the
     * head's and the loss's share of it and of the activations */
    uint64_t weight_pass_bytes, head_weight_pass_bytes, head_activations_bytes;
    uint64_t boundary_bytes;         /* what flows between pipeline stages, one micro-batch's */
    /* torch.distributed.pipelining's last stage with step(return_outputs=True):
     * an earlier micro-batch's outputs, kept to the step's end */
    vp_t kept_outputs[VP_TENSOR_SLOTS];
    /* LoRA's adapters, by the weight they sit beside */
    struct vp_lora_adapter *adapters;
    unsigned n_adapters, cap_adapters;
    void **scratch;                  /* memory that lives as long as the step */
    unsigned n_scratch, cap_scratch;
} vp_step_private;

/* ---- the graph's holds, autocast's cache, the leaves (step_state.c) ---- */

/* Keeps t for as long as this micro-batch's autograd graph lives: Python
 * objects its nodes hold (a checkpoint's ctx.inputs), freed with the graph
 * (when the loop lets go of the loss, or after backward under HF's
 * Trainer), not when the node runs. */
void vp_step_graph_hold(vp_step *step, vp_t t);

/* The graph goes: the ctx tensors held from entry `from` on. */
void vp_step_release_ctx(vp_step *step, unsigned from);

/* A rerun's graph goes: the leaves vp_step_rerun_leaf kept, with their .grad. */
void vp_step_drop_rerun_leaves(vp_step *step);

/* Leaves an autocast region: drops the casts made since `from`. */
void vp_step_clear_casts(vp_step *step, unsigned from);

/* The slot array of layer `layer` (the shared template when folding). */
vp_t *vp_step_layer_leaves(vp_step *step, unsigned layer);

/* ---- the tensor table's lifetimes (step_tensors.c) ---- */

/* Every slot empty, passed as step_tensors.h says. */
void vp_step_tensors_init(vp_step *step);
/* The frame of `lifetime` returns: its tensors go, in the table's order. */
void vp_step_end_lifetime(vp_step *step, vp_lifetime lifetime);
/* Sets the tensors of `lifetime` aside (the last micro-batch's outputs,
 * while the next forward runs): out[slot] gets each owned one, or 0; their
 * slots are emptied. */
void vp_step_take_tensors(vp_step *step, vp_lifetime lifetime, vp_t out[VP_TENSOR_SLOTS]);
/* Drops what vp_step_take_tensors set aside, in the table's order. */
void vp_step_drop_taken(vp_sim *sim, const vp_t taken[VP_TENSOR_SLOTS]);

/* A checkpointed chunk's layer call: the chunk's input and the table's
 * tensors the call takes as inputs, saves, holds or returns (vp_call_role),
 * in the order of the call's arguments (step_tensors.h), as
 * vp_checkpoint_args wants them; outputs past the table's are the chunk's
 * router logits. */
typedef struct {
    vp_t inputs[VP_NODE_MAX_IN];
    vp_t *input_fields[VP_NODE_MAX_IN];
    unsigned n_inputs;
    vp_t *saved[VP_NODE_MAX_SAVED];
    unsigned n_saved;
    vp_t *held[VP_NODE_MAX_SAVED];
    unsigned n_held;
    vp_t *outputs[VP_NODE_MAX_OUT];
    unsigned n_outputs;
} vp_layer_call;
/* The call of the chunk whose first layer is `layer` (the model's index:
 * which of GPT-OSS's masks it is passed). False when the table's
 * arguments do not fit a node: an op-table bug. */
bool vp_step_layer_call(vp_step *step, vp_t x, unsigned layer, vp_layer_call *call);

/* Records the adapters of a weight for the step's forward (lora.h). */
bool vp_step_add_adapter(vp_step *step, const struct vp_lora_adapter *adapter);

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
