/* steptime.h — the step-time model: how long one optimizer step takes on
 * the recipe's GPUs, built from the same ops the memory model walks
 * (matmuls on a roofline, memory-bound ops at HBM bandwidth, attention by
 * its FLOPs, collectives on ring cost models, the pipeline bubble,
 * offload over PCIe). Plain C: no Lua here. */
#ifndef VP_STEPTIME_H
#define VP_STEPTIME_H

#include <stdbool.h>

#include "estimate.h"

/* What the step-time model needs of the hardware, in SI units. */
typedef struct {
    double matmul_flops;       /* dense tensor-core peak for the linears' dtype, FLOP/s */
    double attention_flops;    /* the same for the attention core (FP8 recipes keep it in 16 bits) */
    double matmul_cap;         /* the best fraction of matmul_flops a GEMM reaches (published benchmarks) */
    double attention_forward, attention_backward; /* a fused attention kernel's fraction of attention_flops */
    double memory_bw;          /* HBM bytes/s */
    double link_busbw;         /* NCCL bus bandwidth inside a node, bytes/s */
    double network_bw;         /* inter-node bytes/s per GPU, one direction */
    double pcie_bw;            /* host <-> GPU bytes/s, one direction */
    double host_bw;            /* host memory bytes/s (CPU optimizer) */
    double nvme_bw;            /* NVMe bytes/s per rank (ZeRO-Infinity) */
    unsigned gpus_per_node;
    unsigned sms;              /* streaming multiprocessors a GEMM's tiles are spread over (0: unknown) */
} vp_time_hw;

/* The answer: seconds per step and what they are made of. */
typedef struct {
    bool valid;                /* false: no GPU peak to time against */
    double step_s;
    double compute_s;          /* the slowest stage's compute of every micro-batch, optimizer step included */
    double exposed_comm_s;     /* communication not hidden behind compute */
    double bubble_s;           /* pipeline fill and drain */
    double offload_s;          /* host / NVMe transfers and the CPU optimizer */
    double tokens_per_step;    /* over all data-parallel ranks */
    double tokens_per_s, tokens_per_s_per_gpu;
    double model_flops_per_step;    /* 3 x forward FLOPs, full s^2 attention, no recomputation (MFU's count) */
    double hardware_flops_per_step; /* with the backward actually run and recomputation */
    double mfu, hfu;                /* against the dense peak of every GPU */
    unsigned gpus;
} vp_step_time;

/* ---- primitives (each unit-tested in tests/c/test_steptime.c) ---- */

/* Ring all-reduce of `bytes` over n ranks at NCCL bus bandwidth `busbw`:
 * 2(n-1)/n x bytes / busbw (NCCL's PERFORMANCE.md defines bus bandwidth
 * so that this holds). */
double vp_time_allreduce(double bytes, unsigned n, double busbw);
/* Ring all-gather or reduce-scatter of a `bytes` tensor (the whole,
 * gathered size): (n-1)/n x bytes / busbw. */
double vp_time_allgather(double bytes, unsigned n, double busbw);
/* All-to-all of `bytes` sent by each rank: (n-1)/n of it leaves. */
double vp_time_alltoall(double bytes, unsigned n, double busbw);
/* The share of a GEMM's tile slots that hold useful work: an m x n output
 * (`batch` of them) in 256x128 tiles, in waves of one tile per SM. */
double vp_time_wave_efficiency(double m, double n, double batch, unsigned sms);
/* An [m x k] x [k x n] GEMM (`batch` of them) of `elem` bytes per element:
 * the roofline max(FLOPs / (peak x cap), bytes / bandwidth). */
double vp_time_matmul(double m, double n, double k, double batch, double elem, const vp_time_hw *hw, double peak);
/* The pipeline bubble as a multiple of one micro-batch's time through a
 * stage: p - 1 for GPipe and 1F1B, (p - 1) / v interleaved (Narayanan et
 * al. 2021, sections 2.2.1-2.2.2); the zero-bubble schedules' (p - 1) /
 * 3v (InterleavedZeroBubble), 0 (ZBVZeroBubble), (p - 1) / 3 (DualPipeV)
 * (steptime.c). */
double vp_time_bubble_microbatches(vp_pp_schedule schedule, unsigned pp, unsigned virtual_stages);

/* The hardware the step runs on from a GPU's datasheet figures and the
 * recipe's precision; false when the GPU gives no peak for it. */
bool vp_time_hw_from_gpu(const vp_gpu *gpu, const vp_recipe *recipe, vp_time_hw *hw);

/* The step time of an estimate the engine has run (its stages' layers and
 * per-rank model states). */
vp_step_time vp_step_time_run(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu,
                              const vp_estimate *estimate);

#endif
