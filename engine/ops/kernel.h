/* kernel.h — a fused kernel as a Lua block declares it (F.kernel): what it
 * allocates, what its autograd Function keeps for backward, and the
 * workspace it takes, when these are not its PyTorch reference's. */
#ifndef VP_KERNEL_H
#define VP_KERNEL_H

#include "sim.h"

enum { VP_KERNEL_INPUTS = 8, VP_KERNEL_KEEPS = 2 };

typedef struct {
    const vp_t *in;                          /* the inputs (borrowed) */
    unsigned n_in;
    uint64_t out_numel;
    vp_dtype out_dtype;
    unsigned saves;                          /* bit i: input i kept for backward; bit VP_KERNEL_INPUTS: the output */
    const vp_t *saved_as;                    /* NULL, or per input what is kept in its place (0: the input):
                                                a copy the forward made of it (weight.to(dtype) under autocast) */
    uint64_t keep_numel[VP_KERNEL_KEEPS];    /* tensors it makes and keeps for backward only (0: none) */
    vp_dtype keep_dtype[VP_KERNEL_KEEPS];
    uint64_t forward_workspace;              /* bytes, alive while the forward runs, beside its output and keeps */
    uint64_t backward_workspace;             /* bytes, alive beside the gradients while backward runs */
} vp_kernel_call;

/* Runs the kernel: its output (a new reference). Backward gives every input
 * that needs one a fresh gradient of its size (ctx.save_for_backward's
 * tensors are released with the node). */
vp_t vp_kernel(vp_sim *sim, const vp_kernel_call *call, const char *label);

#endif
