/* estimate.c — allocator reservation, runtime costs and the fit verdict. */
#include "estimate.h"

#include <math.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* PyTorch's cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp,
 * getChainedCublasWorkspaceSize): 4096 KiB x 2 + 16 KiB x 8 by default,
 * 4096 KiB x 8 = 32 MiB on compute capability 9.0 and later. One workspace
 * is kept per (handle, stream), and handles are per thread: the forward's
 * thread and the autograd engine's backward thread each get one. */
static uint64_t cublas_workspace(const vp_gpu *gpu) {
    uint64_t one = gpu && gpu->compute_major >= 9 ? 4096u * 8u * 1024u : 4096u * 2u * 1024u + 16u * 8u * 1024u;
    return 2 * one;
}

vp_step_status vp_estimate_run(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu, bool fold,
                               bool record, vp_estimate *out, vp_ledger *ledger_out) {
    memset(out, 0, sizeof *out);
    vp_step_status status = vp_step_run(model, recipe, fold, record, &out->step, ledger_out);
    if (status != VP_STEP_OK) return status;

    if (recipe->device == VP_DEVICE_CPU) {
        /* the CPU twin: exact tensor bytes, no caching allocator, no CUDA */
        out->peak_allocated = out->peak_reserved = out->peak_total = out->step.raw.peak;
    } else {
        const vp_meter *m = &out->step.rounded;
        out->peak_allocated = m->peak;
        uint64_t segments = vp_segment_bytes(m->peak_pools);
        if (segments < m->peak) segments = m->peak;
        out->peak_reserved = segments + (uint64_t)llround(recipe->fragmentation * (double)m->peak);
        out->cuda_context_bytes = (uint64_t)llround(recipe->cuda_context_mib * MIB);
        out->cublas_workspace_bytes = cublas_workspace(gpu);
        out->runtime_bytes = out->cuda_context_bytes + out->cublas_workspace_bytes;
        out->peak_total = out->peak_reserved + out->runtime_bytes;
    }
    out->allocator_bytes = out->peak_reserved - out->peak_allocated;
    if (gpu && gpu->memory_bytes) {
        out->has_gpu = true;
        out->headroom = (int64_t)gpu->memory_bytes - (int64_t)out->peak_total;
        out->fits = out->headroom >= 0;
    }
    return VP_STEP_OK;
}
