/* estimate.h — the whole answer: every kind of rank (each pipeline stage),
 * its tensor peak with the micro-batches it holds in flight, the caching
 * allocator's reservation on top, the runtime's fixed costs, and the
 * verdict against a GPU's memory. */
#ifndef VP_ESTIMATE_H
#define VP_ESTIMATE_H

#include "nccl.h"
#include "step.h"

typedef struct vp_gpu_s {
    uint64_t memory_bytes;       /* 0: no GPU given */
    unsigned compute_major;      /* compute capability's major version; 0 when unknown */
    /* datasheet figures for the step-time model (steptime.h); 0: not given */
    double fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops, fp8_tflops; /* dense */
    double memory_gbps;          /* HBM, GB/s */
    double interconnect_gbps;    /* GPU-to-GPU inside a node, GB/s both directions */
    double network_gbps;         /* inter-node network per GPU, GB/s one direction */
    unsigned sms;                /* streaming multiprocessors (AMD: compute units); 0: not given */
    double cuda_context_mib;     /* the CUDA context measured on this GPU; 0: the recipe's figure */
} vp_gpu;

typedef struct {
    unsigned stage;              /* pipeline stage (0 without pipelining) */
    unsigned first_layer, layers;
    double in_flight;            /* micro-batches whose activations the stage holds at its peak */
    uint64_t pending_weight_bytes; /* beside them, gradients kept for weight passes (zero-bubble schedules) */
    uint64_t pp_buffers_bytes;   /* torch.distributed.pipelining's receive buffers, kept all step */
    bool stage_embeds, stage_final; /* it runs the embeddings, the head and the loss */
    vp_step_result step;         /* one micro-batch's step (two with several micro-batches) */
    vp_meter peak;               /* the stage's peak: value, breakdown and place */
    uint64_t peak_unrounded;
    uint64_t peak_allocated;     /* max live tensor bytes (torch.cuda.max_memory_allocated) */
    uint64_t peak_reserved;      /* what the caching allocator holds then (memory_reserved) */
    uint64_t allocator_bytes;    /* peak_reserved - peak_allocated */
    uint64_t cuda_context_bytes;
    uint64_t cublas_workspace_bytes;
    uint64_t nccl_bytes;         /* NCCL's buffers for the rank's communicators */
    vp_nccl nccl;                /* ... group by group (nccl.h) */
    uint64_t symm_mem_bytes;     /* async TP's symmetric-memory workspace (outside the caching allocator) */
    uint64_t runtime_bytes;      /* context + workspaces + NCCL + symmetric memory */
    uint64_t peak_total;         /* what nvidia-smi would show */
    bool fits;
    int64_t headroom;            /* GPU memory - peak_total (negative: short by) */
    vp_ledger events;            /* with `record`: this stage's event log, owned (empty otherwise) */
    /* the caching allocator simulated over the step (engine/core/allocator.c),
     * when vp_estimate_simulate_allocator ran and could replay the log */
    bool has_simulated;
    uint64_t peak_reserved_simulated;
    unsigned simulated_steps;    /* steps replayed until the reservation stopped growing */
    /* the same over the whole run: loading, quantizing and wrapping the
     * model (engine/step/run_phases.c) before the steps */
    bool has_run;
    uint64_t peak_reserved_run;  /* torch.cuda.max_memory_reserved() over the run */
    uint64_t reserved_at_start;  /* memory_reserved() when the first step begins */
} vp_rank_estimate;

typedef struct {
    vp_rank_estimate *ranks;     /* one per pipeline stage, owned */
    unsigned n_ranks;
    unsigned worst;              /* the rank with the largest total */
    unsigned ranks_per_stage;    /* dp x tp */
    bool has_gpu;
    const char *sdpa_kernel;     /* attention = sdpa: the kernel of its unmasked calls ("cudnn", "flash",
                                    "efficient" for fp32 inputs); NULL otherwise */
} vp_estimate;

/* Runs every stage. With `record`, each stage's events go to its rank's
 * `events` (every stage evaluated then, none sharing another's). `reuse`
 * (or NULL): the simulator's arrays, kept by the caller from one estimate
 * to the next (vp_sim_arrays_free when done). */
vp_step_status vp_estimate_run(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu, bool fold,
                               bool record, vp_sim_arrays *reuse, vp_estimate *out);
void vp_estimate_free(vp_estimate *estimate);

/* Simulates the caching allocator for every stage of a CUDA estimate (none
 * for device = cpu): each stage's step evaluated again without folding and
 * its events replayed (engine/core/allocator.c), alone (the steady step)
 * and after the run's prelude (the whole run). With allocator = simulated
 * the reservation, totals and verdict follow the steady simulation
 * (vp_estimate_run calls it then); otherwise the figures are only set
 * beside. */
vp_step_status vp_estimate_simulate_allocator(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu,
                                              vp_estimate *estimate);

/* The pipeline layout's problem (key: message), or NULL. */
const char *vp_pipeline_problem(const vp_model *model, const vp_recipe *recipe);
/* torchtitan's pipeline_parallel_layers_per_stage turned into the stages
 * per rank (recipe->virtual_stages), with the model's layers: NULL, or
 * the problem. */
const char *vp_pipeline_resolve(const vp_model *model, vp_recipe *recipe);

/* Micro-batches (of model chunks, with interleaving: in units of a whole
 * stage) that stage i of pp holds in flight at its peak. */
double vp_pipeline_in_flight(const vp_recipe *recipe, unsigned stage);

#endif
