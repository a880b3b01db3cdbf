/* block.c — the checks a Lua block's program passes before the core runs
 * it: whatever a script traced, the interpreter (op_block.c) never reads a
 * value that is not there, frees one twice or leaves one alive. */
#include "block.h"

#include <stdio.h>

static const char *fail(char *message, unsigned size, unsigned i, const char *what) {
    snprintf(message, size, "instruction %u: %s", i + 1, what);
    return message;
}

/* One of the program's forwards: instructions [first, end). */
static const char *check_code(const vp_block_program *p, unsigned first, unsigned end, char *message, unsigned size) {
    /* 0: not defined yet; 1: alive; 2: gone (dropped or returned) */
    unsigned char state[VP_BLOCK_VALUES] = {0};
    for (unsigned k = 0; k <= vp_block_borrowed(p); k++) state[k] = 1;
    bool returned = false;
    if (first >= end) return fail(message, size, first, "an empty forward");
    for (unsigned i = first; i < end; i++) {
        const vp_block_instr *in = &p->code[i];
        if (in->prim >= VP_BP_COUNT) return fail(message, size, i, "unknown primitive");
        if (in->prim == VP_BP_UNARY && in->mode >= VP_BU_COUNT) return fail(message, size, i, "unknown function");
        for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) {
            int v = in->arg[a];
            if (v < -1 || v >= (int)p->n_values) return fail(message, size, i, "an operand out of range");
            if (v >= 0 && state[v] != 1) return fail(message, size, i, "an operand that is not alive");
        }
        if (in->prim != VP_BP_DROP && in->prim != VP_BP_RETURN && in->prim != VP_BP_MASK && in->arg[0] < 0)
            return fail(message, size, i, "no operand");
        if (in->prim == VP_BP_KERNEL) {
            if (in->mode >= p->n_kernels) return fail(message, size, i, "an undeclared kernel");
            for (unsigned a = 0; a < VP_BLOCK_ARGS; a++)
                if ((a < p->kernel[in->mode].n_inputs) != (in->arg[a] >= 0))
                    return fail(message, size, i, "a kernel called with another number of inputs than declared");
        }
        if ((in->prim == VP_BP_CAT || in->prim == VP_BP_RMS_NORM || in->prim == VP_BP_CACHE) && in->arg[1] < 0)
            return fail(message, size, i, "needs two operands");
        if (in->prim == VP_BP_SELECT && !in->mode) return fail(message, size, i, "select: of how many heads");
        if ((in->prim == VP_BP_MATMUL || in->prim == VP_BP_MASK_ADD || in->prim == VP_BP_MASKED_FILL) && in->arg[1] < 0)
            return fail(message, size, i, "needs two operands");
        if ((in->prim == VP_BP_MATMUL && (unsigned)in->aux + 4 > p->n_aux) || (in->prim == VP_BP_SOFTMAX_FP32 && in->aux >= p->n_aux))
            return fail(message, size, i, "labels of its inner events missing");
        if (in->prim == VP_BP_MATMUL && !in->width) return fail(message, size, i, "matmul: of a known head width");
        if (in->prim == VP_BP_REPEAT_KV && (!in->mode || !in->kv_heads))
            return fail(message, size, i, "repeat_kv: how many times, of how many heads");
        if (in->prim == VP_BP_SDPA) {
            if (in->arg[1] < 0 || in->arg[2] < 0) return fail(message, size, i, "sdpa needs q, k and v");
            if (!in->heads || !in->kv_heads || in->heads % in->kv_heads || !in->width)
                return fail(message, size, i, "sdpa: the key/value heads must divide the heads, of a known width");
        }
        if (in->prim == VP_BP_LINEAR) {
            int w = in->arg[1], b = in->arg[2];
            if (w < 1 || w > (int)p->n_params || !p->param[w - 1].linear)
                return fail(message, size, i, "linear needs a linear weight");
            if (b == 0 || b > (int)p->n_params) return fail(message, size, i, "linear's bias must be a parameter");
        }
        if ((in->prim == VP_BP_GATHER || in->prim == VP_BP_INDEX || in->prim == VP_BP_LAYER_NORM) && in->arg[1] < 0)
            return fail(message, size, i, "needs two operands");
        if ((in->prim == VP_BP_SCATTER && in->arg[1] < 0) || (in->prim == VP_BP_SCATTER_ADD && in->arg[2] < 0))
            return fail(message, size, i, "scatter needs x, the index and the source");
        if (in->prim == VP_BP_INDEX_SELECT && (in->arg[1] < 0 || in->n_dims == 0))
            return fail(message, size, i, "index_select needs x, the index and its output's shape");
        if (in->prim == VP_BP_INDEX_ADD && in->arg[2] < 0)
            return fail(message, size, i, "index_add needs x, the index and the source");
        if (vp_block_in_place(in->prim)) {
            if ((in->prim != VP_BP_SCATTER_ && in->prim != VP_BP_MASKED_FILL_ && in->arg[2] < 0) || in->arg[1] < 0)
                return fail(message, size, i, "an in-place op needs x and its index, source or mask");
            if (in->out != in->arg[0] || in->arg[0] <= (int)vp_block_borrowed(p))
                return fail(message, size, i, "an in-place op writes its first operand, a value the forward made");
            if (returned) return fail(message, size, i, "computes after the return");
            continue; /* defines nothing new: x's value, alive */
        }
        if (in->prim == VP_BP_EMBEDDING) {
            int w = in->arg[1];
            if (w < 1 || w > (int)p->n_params || p->param[w - 1].linear || !in->width)
                return fail(message, size, i, "embedding needs a table parameter of a known width");
        }
        if ((in->prim == VP_BP_INDEX) && !in->width) return fail(message, size, i, "index: of rows of a known width");
        if (in->prim == VP_BP_TOPK && (!in->part[0] || in->part[0] > in->width))
            return fail(message, size, i, "topk: k from 1 to the last dimension's size");
        if (in->prim == VP_BP_CONV1D && (in->arg[1] < 0 || in->n_dims == 0))
            return fail(message, size, i, "conv1d needs a weight and its output's shape");
        for (unsigned d = 0; d < in->n_dims && d < VP_BLOCK_DIMS; d++)
            if (in->dim[d] >= VP_DIM_COUNT) return fail(message, size, i, "an unknown dimension");
        if (in->n_dims > VP_BLOCK_DIMS) return fail(message, size, i, "a shape of too many dimensions");
        if ((in->prim == VP_BP_MUL || in->prim == VP_BP_ADD || in->prim == VP_BP_SUB) && in->arg[1] < 0)
            return fail(message, size, i, "needs two operands");
        if (in->prim == VP_BP_TO && in->mode == VP_BLOCK_LIKE && in->arg[1] < 0)
            return fail(message, size, i, "to(): needs the tensor whose dtype it takes");
        if (in->prim == VP_BP_TO && in->mode != VP_BLOCK_LIKE && in->mode >= VP_DTYPE_COUNT)
            return fail(message, size, i, "to(): unknown dtype");
        if (in->prim == VP_BP_LAYER_KEEP) continue;
        if (in->prim == VP_BP_DROP || in->prim == VP_BP_RETURN) {
            int v = in->arg[0];
            if (v <= (int)vp_block_borrowed(p) && in->prim == VP_BP_DROP)
                return fail(message, size, i, "drops the input, a parameter or a named input");
            if (in->prim == VP_BP_RETURN) {
                if (returned) return fail(message, size, i, "a second return");
                returned = true;
            }
            if (v > (int)vp_block_borrowed(p)) state[v] = 2;
            continue;
        }
        if (returned) return fail(message, size, i, "computes after the return");
        unsigned outputs = in->prim == VP_BP_SPLIT ? in->mode : in->prim == VP_BP_CACHE || in->prim == VP_BP_TOPK ? 2 : 1;
        if (in->prim == VP_BP_SPLIT && (outputs < 1 || outputs > VP_BLOCK_PARTS || !in->width))
            return fail(message, size, i, "split: 1 to 8 parts of a known width");
        for (unsigned o = 0; o < outputs; o++) {
            unsigned v = in->out + o;
            if (v <= vp_block_borrowed(p) || v >= p->n_values || state[v])
                return fail(message, size, i, "defines a value already defined");
            state[v] = 1;
        }
    }
    if (!returned) return fail(message, size, end - 1, "the block returns nothing");
    for (unsigned v = vp_block_borrowed(p) + 1; v < p->n_values; v++)
        if (state[v] == 1) return fail(message, size, end - 1, "a value is never freed");
    return NULL;
}

const char *vp_block_check(const vp_block_program *p, char *message, unsigned size) {
    if (p->n_params > VP_BLOCK_PARAMS || p->n_code > VP_BLOCK_CODE || p->n_values > VP_BLOCK_VALUES ||
        p->n_inputs > VP_BLOCK_INPUTS ||
        p->n_kernels > VP_BLOCK_KERNELS ||
        p->megatron_start >= p->n_code)
        return fail(message, size, 0, "the program is too large");
    for (unsigned i = 0; i < p->n_inputs; i++)
        if (p->input[i] >= VP_BLOCK_STREAMS) return fail(message, size, 0, "an unknown named input");
    unsigned end = p->megatron_start ? p->megatron_start : p->n_code;
    const char *problem = check_code(p, 0, end, message, size);
    if (!problem && p->megatron_start) problem = check_code(p, p->megatron_start, p->n_code, message, size);
    return problem;
}

void vp_block_note_problems(vp_block_program *p) {
    vp_block_note_dtensor_plan(p);
    vp_block_note_megatron_plan(p);
    p->cp_problem[0] = '\0';
    for (unsigned i = 0; i < p->n_code; i++) {
        const vp_block_instr *in = &p->code[i];
        for (unsigned d = 0; d < in->n_dims; d++) {
            if (in->dim[d] != VP_DIM_CHUNKS && in->dim[d] != VP_DIM_PADDED) continue;
            /* a scan over chunks of the sequence: under context parallelism
             * each rank's first chunk starts from the state the rank before
             * it ends with, a transfer and an order of work the program does
             * not hold */
            snprintf(p->cp_problem, sizeof p->cp_problem,
                     "cp: block %s: %s cuts the sequence into chunks (F.chunks, F.chunk_padding); a chunked scan split "
                     "over context-parallel ranks (each rank's chunks starting from the state of the rank before) is "
                     "not modelled",
                     p->name, in->label);
            return;
        }
    }
}
