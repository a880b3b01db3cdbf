/* step.h — one training step on one GPU, evaluated on the simulator: the
 * state ops see (they reach it through op_context.h) and the driver's entry
 * points. */
#ifndef VP_STEP_H
#define VP_STEP_H

#include <stddef.h>

#include "model.h"
#include "precision.h"
#include "recipe.h"
#include "shard.h"
#include "sim.h"


/* The part of the model one pipeline stage runs. */
typedef struct {
    unsigned first_layer, layers;   /* its layers */
    bool embed;                     /* holds the embeddings (the first stage) */
    bool final;                     /* holds the final norm, head and loss (the last stage) */
    unsigned microbatches;          /* micro-batches per step: with more than one, later ones
                                       backpropagate into gradients that already exist */
    unsigned cublas_workspaces;     /* cuBLAS workspaces the caching allocator holds all step (0: none) */
    uint64_t cublas_workspace_bytes; /* ... each */
    bool sdpa_cudnn;                /* SDPA's 16-bit calls run cuDNN's attention (sdpa_backend, by GPU) */
    bool sdpa_no_flash;             /* the GPU has no SDPA flash kernel (before Ampere): 16-bit calls run the
                                       memory-efficient one */
} vp_stage;

/* a checkpointed chunk's router logits: a node's outputs past the hidden states */
enum { VP_CHUNK_ROUTER_MAX = VP_NODE_MAX_OUT - 1 };

/* The router logits of every mixture layer, as the model's outputs keep
 * them with output_router_logits (MoeModelOutputWithPast.router_logits). */
typedef struct {
    vp_t *tensors;
    unsigned n, cap;
} vp_router_logits;

/* A key and a value per layer of the stage, each entry standing for
 * `repeat` layers when folded (tensors NULL: no cache). */
typedef struct {
    vp_t *tensors;
    unsigned *repeat;
} vp_kv_cache;

struct vp_step_private;

/* What ops see of the step (op_context.h): the simulator, the shapes and
 * dtypes the running code works in, the recipe and the model. The tensors
 * the forward shares are in the step's tensor table (step_tensors.h), its
 * other state reached through the services op_context.h declares; the
 * driver's own state (chunks, casts, leaves, holds, the data-parallel
 * layout, host counters) is `priv`, defined in step_private.h alone, so an
 * op that touches it does not compile. */
typedef struct vp_step {
    vp_sim sim;
    vp_ledger ledger;
    const vp_model *model;
    const vp_recipe *recipe;
    const vp_precision *precision;
    vp_stage stage;
    uint64_t batch, seq, tokens;     /* tokens = batch * seq rows */
    uint64_t input_tokens;           /* the batch's own: tokens without prompt tuning's virtual ones */
    uint64_t virtual_tokens;         /* prompt tuning's, put before every sequence */
    uint64_t prefix_tokens;          /* prefix tuning's num_virtual_tokens */
    uint64_t past_tokens;            /* of those, what the running stack's layers see before their own keys
                                      * (an encoder-decoder's encoder: none) */
    uint64_t source_seq, target_seq; /* an encoder-decoder's encoder's and decoder's lengths */
    unsigned tp;                     /* tensor-parallel ranks */
    unsigned ep;                     /* expert-parallel ranks */
    unsigned etp;                    /* expert-tensor-parallel ranks */
    unsigned cp;                     /* context-parallel ranks: seq is this rank's share */
    bool sp;                         /* sequence parallel: the residual stream is split */
    uint64_t rows;                   /* rows of the residual stream on this rank: tokens, or tokens / tp */
    vp_dtype activation;             /* dtype the residual stream flows in */
    vp_dtype low;                    /* autocast's lower precision (or activation) */
    bool autocast;
    unsigned layer_index;            /* the model layer running now (HF's layer_idx) */
    vp_t tied_weight;                /* the token embedding, for a tied head */
    vp_t prompt;                     /* prompt or prefix tuning's table (in the embeddings' leaf array) */
    vp_kv_cache kv_cache;            /* the outputs' key/value cache (kv_cache.h) */
    vp_router_logits router_logits;  /* the outputs' router logits (output_router_logits) */
    vp_t fp8_input, fp8_columnwise;  /* the input an op's FP8 GEMMs quantized, and its saved copy */
    struct vp_step_private *priv;    /* the driver's own (step_private.h) */
} vp_step;

/* The whole ledger-driving evaluation of one steady-state step. */
typedef struct {
    uint64_t params_bytes, buffers_bytes, grads_bytes, master_bytes, optimizer_bytes, comm_bytes;
    uint64_t host_bytes, nvme_bytes; /* per rank: resident, and host's peak with the step's fp32 gradients */
    uint64_t activations_bytes;      /* live at the end of forward beyond the resident state */
    /* under a schedule that splits the backward (vp_pp_splits_backward):
     * one micro-batch's gradients that its input half leaves for its weight
     * half (pp_split_backward.c); of it and of the activations, the head's
     * and the loss's */
    uint64_t weight_pass_bytes, head_weight_pass_bytes, head_activations_bytes;
    uint64_t symm_mem_request;       /* async TP: the largest symmetric-memory workspace asked for (prims.c) */
    uint64_t boundary_bytes;         /* one micro-batch's tensor between pipeline stages (its gradient's too) */
    uint64_t pp_outputs_bytes;       /* the last stage's outputs kept to the step's end (pp_return_outputs) */
    uint64_t resident_bytes;         /* before the step, in the peak's bytes (rounded; exact on the CPU twin) */
    vp_meter rounded, raw;           /* peaks of the step */
    vp_meter rounded_fb, raw_fb;     /* peaks of forward and backward alone (before the optimizer) */
    /* with a framework's own streams: each stream's rounded meter, the
     * step's and forward and backward's (ledger.h's vp_ledger.stream) */
    bool has_streams;
    vp_meter streams[VP_STREAMS], streams_fb[VP_STREAMS];
    uint64_t params, trainable_params;
} vp_step_result;

typedef enum {
    VP_STEP_OK = 0,
    VP_STEP_OVERFLOW,
    VP_STEP_NOMEM,
    VP_STEP_UNSUPPORTED, /* a recipe combination the engine does not model */
    VP_STEP_LAYOUT,      /* the parallel layout does not hold together (vp_step_run's message) */
    VP_STEP_INTERNAL,
    VP_STEP_UNFOLDABLE,  /* inside the driver only: a folded run's layers were unlike (step.c) */
    VP_STEP_LIMIT,       /* a fixed table of the simulator ran out of room (VP_SIM_LIMIT) */
} vp_step_status;

vp_step_status vp_step_run(const vp_model *model, const vp_recipe *recipe, bool fold, bool record,
                           vp_step_result *result, vp_ledger *ledger_out);

/* The same for one pipeline stage (NULL: the whole model, one micro-batch);
 * `reuse` (or NULL): the simulator's arrays kept from one call to the next. */
vp_step_status vp_step_run_stage(const vp_model *model, const vp_recipe *recipe, const vp_stage *stage, bool fold,
                                 bool record, vp_step_result *result, vp_ledger *ledger_out, vp_sim_arrays *reuse);

/* For VP_STEP_LAYOUT: the message naming the recipe key at fault; model
 * may be NULL (the recipe alone is checked). */
const char *vp_step_layout_problem(const vp_model *model, const vp_recipe *recipe);

#endif
