/* estimate.h — the whole answer for one GPU: the step's tensor peak, the
 * caching allocator's reservation on top, the runtime's fixed costs, and
 * the verdict against a GPU's memory. */
#ifndef VP_ESTIMATE_H
#define VP_ESTIMATE_H

#include "step.h"

typedef struct {
    uint64_t memory_bytes;       /* 0: no GPU given */
    unsigned compute_major;      /* compute capability's major version; 0 when unknown */
} vp_gpu;

typedef struct {
    vp_step_result step;
    uint64_t peak_allocated;     /* max live tensor bytes (torch.cuda.max_memory_allocated) */
    uint64_t peak_reserved;      /* what the caching allocator holds then (memory_reserved) */
    uint64_t allocator_bytes;    /* peak_reserved - peak_allocated */
    uint64_t cuda_context_bytes;
    uint64_t cublas_workspace_bytes;
    uint64_t runtime_bytes;      /* context + workspaces */
    uint64_t peak_total;         /* what nvidia-smi would show */
    bool has_gpu;
    bool fits;
    int64_t headroom;            /* GPU memory - peak_total (negative: short by) */
} vp_estimate;

vp_step_status vp_estimate_run(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu, bool fold,
                               bool record, vp_estimate *out, vp_ledger *ledger_out);

#endif
