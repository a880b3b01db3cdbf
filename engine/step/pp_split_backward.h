/* pp_split_backward.h — what a rank holds under torch.distributed.pipelining's
 * schedules that split each backward into an input half and a weight half
 * (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV). */
#ifndef VP_PP_SPLIT_BACKWARD_H
#define VP_PP_SPLIT_BACKWARD_H

#include <stdint.h>

#include "recipe.h"

/* A rank's peak under such a schedule: the micro-batches' activations it
 * holds then (in units of one micro-batch through all its layers, as
 * vp_rank_estimate.in_flight counts them) and the bytes waiting for weight
 * passes beside them. */
typedef struct {
    double in_flight;
    uint64_t pending_bytes;
} vp_pp_held;

/* One micro-batch through a rank's layers: its activations and what its
 * input half leaves for its weight half (vp_step_result's
 * activations_bytes and weight_pass_bytes), and of each the head's and the
 * loss's share (the last stage's section). */
typedef struct {
    uint64_t activations, head_activations;
    uint64_t weight_pass, head_weight_pass;
} vp_pp_bytes;

/* Walks rank `rank`'s order of the recipe's schedule (vp_pp_splits_backward)
 * over the stages' layer counts `sizes` (pp x 2 or pp x v of them, in stage
 * order). */
vp_pp_held vp_pp_split_held(const vp_recipe *recipe, const unsigned *sizes, unsigned rank, const vp_pp_bytes *bytes);

/* The stage a rank's local chunk c runs: i + c pp looped, i or 2 pp - 1 - i
 * in a V. */
unsigned vp_pp_stage_of(const vp_recipe *recipe, unsigned rank, unsigned chunk);

#endif
