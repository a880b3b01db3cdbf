/* shard.h — what a data-parallel layout does to the model states on each
 * rank: which of parameters, gradients, master weights and optimizer
 * states are whole, sharded or on the host, how gradients leave backward,
 * and which communication buffers exist. One plan per recipe; the step
 * driver follows it. */
#ifndef VP_SHARD_H
#define VP_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "precision.h"
#include "recipe.h"

/* How a parameter's gradient leaves the backward pass. */
typedef enum {
    VP_GRADS_KEEP,    /* into .grad, whole, until the optimizer step */
    VP_GRADS_BUCKET,  /* copied into a communication bucket and freed at once (ZeRO-2/3, DDP bucket views) */
    VP_GRADS_UNIT     /* kept whole for the layer, then reduce-scattered to a shard (FSDP) */
} vp_grad_flow;

typedef struct {
    unsigned params;     /* the divisor of each: 1 (whole) or the shard group's size */
    unsigned grads;
    unsigned states;     /* master weights and optimizer states */
} vp_shards;

typedef struct {
    vp_shards shards;
    vp_shards expert_shards;  /* the same for experts' parameters (expert data parallelism) */
    vp_grad_flow grads;
    bool gather;              /* parameters are all-gathered per layer (ZeRO-3, FSDP FULL/HYBRID) */
    vp_dtype params_dtype;    /* the resident parameters' dtype */
    vp_dtype gather_dtype;    /* the dtype they are gathered in for compute */
    vp_dtype grads_dtype;     /* the dtype gradients are produced in */
    vp_dtype shard_grads_dtype; /* the dtype of the kept (sharded) gradients */
    vp_dtype reduce_dtype;    /* FSDP2's reduce-scatter input and output (MixedPrecisionPolicy.reduce_dtype):
                                 shard_grads_dtype, or a 16-bit one cast to it after the collective */
    vp_dtype master_dtype;    /* VP_DTYPE_NONE: the parameters are their own master */
    vp_dtype states_dtype;
    bool states_on_host;      /* offload_optimizer: master, states and fp32 gradients in host memory */
    bool states_on_nvme;
    bool params_on_host;      /* offload_params (ZeRO-3): the parameter shards in host memory */
    bool params_on_nvme;
    /* FSDP2's CPUOffloadPolicy: each reduce-scattered gradient shard copied
     * to the host at once and freed on the GPU; the all-gather copies each
     * parameter shard to the GPU first (engine/step/layout.c) */
    bool grads_on_host;
    bool master_grads;        /* the step first makes fp32 gradients of the shard (DeepSpeed, Megatron) */
    uint64_t bucket_bytes_per_param_byte; /* DDP: buckets as large as the gradients (0/1) */
    uint64_t backward_buffers; /* bytes of buffers alive during backward (DeepSpeed's IPG buckets) */
    uint64_t resident_buffers; /* bytes of buffers made with the optimizer and kept (ZeRO-3's IPG bucket) */
    uint64_t prefetch_elements; /* ZeRO-3: parameters gathered ahead of use */
    /* DeepSpeed ZeRO-3's parameter coordinator (0: FSDP, which has none):
     * the cap on gathered elements for prefetching, the reuse distance
     * within which a gathered parameter is kept, and the size below which
     * a parameter stays gathered for good */
    uint64_t max_live_elements, reuse_distance_elements, persistence_threshold;
    /* FSDP2 (framework_fsdp2.c): each parameter sharded on its dim 0,
     * padded to a multiple of the ranks (vp_plan_shard_numel); gathered
     * parameters kept from a block's forward to its backward
     * (reshard_after_forward = false; FSDP's SHARD_GRAD_OP too); the
     * all-gather output and reduce-scatter input buffers that outlive
     * their collective (sized by vp_layout_prepare); the last block kept
     * gathered from its forward to its backward (torchtitan's wrapping) */
    bool dim0_shards;
    bool keeps_gathered;
    bool collective_buffers;
    bool keeps_last_block;
    /* FSDP2 in a torch.distributed.pipelining stage: no gradient sync and
     * no reshard after backward until the step's last micro-batch; each
     * unit's unsharded gradients accumulate in the reduce dtype
     * (engine/step/layout.c, accumulate) */
    bool defers_reduce;
} vp_shard_plan;

/* The plan of a recipe, or NULL with a message naming the key when the
 * layout does not hold together (zero with framework torch, ...). */
const char *vp_shard_plan_make(const vp_recipe *recipe, const vp_precision *precision, vp_shard_plan *plan);

/* The shard group's size: dp, or the HYBRID_SHARD group (FSDP2's HSDP:
 * vp_framework_shard_group). */
static inline unsigned vp_shard_group(const vp_recipe *r) {
    return r->fsdp == VP_FSDP_HYBRID_SHARD && r->fsdp_shard_size ? r->fsdp_shard_size : r->dp;
}

/* Elements of a tensor's shard: ceil(numel / ranks), as ZeRO-3 and FSDP pad
 * each partition (DeepSpeed 1/2 pad one flat group instead: at most ranks - 1
 * elements fewer in all). */
uint64_t vp_shard_numel(uint64_t numel, unsigned ranks);

/* Elements of one parameter's shard under the plan: with dim0_shards
 * (FSDP2) ceil(dim0 / ranks) rows of numel / dim0 each, else
 * vp_shard_numel. dim0: the parameter's first dimension (its numel for a
 * vector). */
uint64_t vp_plan_shard_numel(const vp_shard_plan *plan, uint64_t numel, uint64_t dim0, unsigned ranks);

/* The divisors for one tensor: experts' parameters are sharded over the
 * data-parallel ranks that hold the same experts. */
static inline const vp_shards *vp_plan_shards(const vp_shard_plan *plan, bool expert) {
    return expert ? &plan->expert_shards : &plan->shards;
}

#endif
