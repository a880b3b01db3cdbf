/* run_phases.h — the run before the steady state, as allocator events: how
 * the model reaches the GPU (moved tensor by tensor, or loaded by
 * from_pretrained with a device map, after transformers' warm-up block,
 * bitsandbytes quantizing each weight there) and how the framework wraps it
 * (DDP's and FSDP's broadcast of the module states, FSDP's flattening and
 * sharding unit by unit, DeepSpeed ZeRO-3's partitioning at zero.Init).
 * The caching allocator (engine/core/allocator.c) replays them before the
 * step's own log, whose first step makes the optimizer's states lazily. */
#ifndef VP_RUN_PHASES_H
#define VP_RUN_PHASES_H

#include <stdbool.h>

#include "ledger.h"
#include "recipe.h"

typedef struct {
    vp_event *events; /* owned; every one names its tensor */
    unsigned n_events, cap_events;
    bool failed;      /* out of memory: no prelude */
} vp_run_prelude;

/* The prelude of a rank whose unfolded step log is `events` (its setup
 * events are the resident tensors the prelude ends by making). */
bool vp_run_prelude_build(const vp_recipe *recipe, const vp_event *events, unsigned n_events, vp_run_prelude *out);
void vp_run_prelude_free(vp_run_prelude *prelude);

#endif
