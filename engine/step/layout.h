/* layout.h — the data-parallel layout on the step's timeline: sharded and
 * offloaded resident state, per-layer all-gathers and their release,
 * gradient buckets and reduce-scatters, as the plan (shard.h) says. */
#ifndef VP_LAYOUT_H
#define VP_LAYOUT_H

#include "step.h"

/* Creates the leaves of ops: parameters at their resident shard (or none on
 * the GPU when offloaded), buffers whole. `repeat`: real instances these
 * leaves stand for (host memory is counted per rank). */
/* A trained parameter the recipe adds outside the model's ops (prompt
 * tuning's embedding table), in the adapters' dtype. */
vp_t vp_layout_extra_leaf(vp_step *step, const vp_leaf_spec *spec);

/* `frozen`: the leaves of a part the recipe freezes (finetune = freeze). */
void vp_layout_create_leaves(vp_step *step, const vp_op *ops, unsigned n, vp_t *slots, unsigned repeat, bool frozen);

/* Master weights, optimizer states, resident gradient partitions and
 * communication buckets of the trainable leaves among `leaves`. */
void vp_layout_resident(vp_step *step, const vp_t *leaves, unsigned n, unsigned repeat);

/* The bytes a parameter takes when all-gathered (its padded shards side by
 * side, in the compute dtype); 0 for anything that is not gathered per use:
 * buffers, DeepSpeed's persistent parameters. */
uint64_t vp_layout_gathered_bytes(vp_step *step, vp_t leaf);

/* Elements of this rank's shard of a parameter over `ranks` under the
 * step's plan (FSDP2: its dim 0 padded, vp_plan_shard_numel). */
uint64_t vp_layout_shard_numel(const vp_step *step, const vp_tensor *t, unsigned ranks);

/* Prepares the per-layer hooks once the leaves exist. */
bool vp_layout_prepare(vp_step *step);

/* Wrap a layer: the start hook gathers its parameters (and in backward
 * releases them and reduce-scatters its gradients); the end hook releases
 * them after forward (and gathers them again for backward). */
vp_t vp_layout_layer_start(vp_step *step, vp_t x, unsigned layer);
vp_t vp_layout_layer_end(vp_step *step, vp_t y, unsigned layer);

/* The same around a branch's decoder layer, whose leaves start at `leaves`
 * among the final ops' (op_context.h's vp_step_branch_layer_start). */
vp_t vp_layout_branch_layer_start(vp_step *step, vp_t x, const vp_t *leaves);
vp_t vp_layout_branch_layer_end(vp_step *step, vp_t y, const vp_t *leaves);

/* FSDP's first block prefetches nothing in backward (the unit before it
 * is the root, gathered): it is evaluated alone, not folded. */
bool vp_layout_first_prefetches_none(const vp_step *step);

/* Around forward and backward: the root unit's gather, FSDP2's all-gather
 * output slot as the model's forward returns and as backward begins, the
 * buckets that live through backward, the root unit's gradient reduction;
 * at the step's end (after the optimizer) what FSDP2 still holds goes. */
void vp_layout_forward_begin(vp_step *step);
void vp_layout_forward_end(vp_step *step);
void vp_layout_backward_begin(vp_step *step);
void vp_layout_backward_end(vp_step *step);
void vp_layout_step_end(vp_step *step);

/* Host memory: bytes that live outside the GPU (offload). */
void vp_layout_host(vp_step *step, uint64_t bytes, unsigned repeat, bool nvme);

#endif
