/* zero3.h — DeepSpeed ZeRO-3's parameter coordinator once its module
 * trace is complete (every step after the first;
 * deepspeed/runtime/zero/partitioned_param_coordinator.py): after a module
 * runs, its gathered parameters are released unless a module within
 * stage3_max_reuse_distance elements of the trace ahead uses them again
 * (__params_to_release); parameters smaller than
 * stage3_param_persistence_threshold are never released (ds_persist). */
#ifndef VRAMPLAN_ZERO3_H
#define VRAMPLAN_ZERO3_H

#include "step.h"

/* What a layer keeps gathered once it has run: after its forward, and
 * after its recomputation when it is checkpointed. Bytes in the gather
 * dtype. */
typedef struct {
    uint64_t forward;
    uint64_t recompute;
} vp_zero3_kept;

/* Fills out[i] for every layer instance of the stage, then every branch
 * layer (n_branch_layers, after them) (zeros without a
 * coordinator: FSDP, or a reuse distance of 0). An instance that stands
 * for a folded run of chunks gets what the run's last chunk keeps (the
 * others count toward distances only). False when memory runs out. */
bool vp_zero3_kept_bytes(vp_step *step, vp_zero3_kept *out);

#endif
