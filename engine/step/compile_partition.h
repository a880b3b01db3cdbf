/* compile_partition.h — AOTAutograd's min-cut rematerialization partitioner
 * (torch.compile's choice of what a compiled region saves for backward),
 * replayed on a small graph of the region's forward values. */
#ifndef VP_COMPILE_PARTITION_H
#define VP_COMPILE_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

/* What the partitioner's op lists (get_default_op_list) make of the op
 * that produced a value. */
typedef enum {
    VP_CP_INPUT,     /* a primal: the region's input (a placeholder) */
    VP_CP_PARAM,     /* a primal that is a parameter: free to save */
    VP_CP_POINTWISE, /* in the recomputable allowlist and fusible: pointwise ops, _to_copy, where, ... */
    VP_CP_REDUCTION, /* allowlisted and fusible reductions: sum, mean, amax, var */
    VP_CP_VIEW,      /* view ops: never banned, fusible */
    VP_CP_COMPUTE,   /* compute intensive: mm, bmm, addmm, _scaled_mm, the SDPA kernels */
    VP_CP_RANDOM     /* random ops: native_dropout, rand_like (not in the allowlist) */
} vp_cp_kind;

/* the distinct tensors one node reads at most: its inputs and what it saves
 * (sim.h: VP_NODE_MAX_IN + VP_NODE_MAX_SAVED; SDPA's cuDNN kernel with a
 * mask reads q, k, v, the mask, its log-sum-exp and two RNG scalars) */
enum { VP_CP_MAX_INPUTS = 12 };

/* One forward value of the region, in forward order: its producers come
 * before it. */
typedef struct {
    uint64_t bytes;
    uint8_t kind;             /* vp_cp_kind */
    bool must_save;           /* a selective-checkpoint policy tagged it MUST_SAVE */
    bool must_recompute;      /* tagged PREFER_RECOMPUTE or MUST_RECOMPUTE */
    bool backward_reads;      /* an op of the backward graph reads it */
    bool backward_unfusible;  /* one of those is not fusible (a matmul's or SDPA's backward) */
    uint32_t n_inputs;
    uint32_t inputs[VP_CP_MAX_INPUTS]; /* indices of the values it is computed from */
} vp_cp_value;

typedef enum {
    VP_CP_OK = 0,
    VP_CP_NOMEM,
    VP_CP_UNSAVABLE /* a value backward needs is banned from both saving and recomputing: a caller bug */
} vp_cp_status;

/* The values the min cut saves: saved[i] for value i. */
vp_cp_status vp_compile_partition(const vp_cp_value *values, uint32_t n, bool *saved);

#endif
