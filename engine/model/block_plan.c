/* block_plan.c — the DTensor tensor-parallel plan of a Lua block (what
 * torchtitan's parallelize_module would be given for it under framework =
 * fsdp2 with tp > 1), read off its program: whether the block's input is
 * gathered at its entry, and why a plan cannot express the block.
 *
 * torchtitan's llama plan (torchtitan/models/llama3/infra/parallelize.py,
 * apply_tp) is the model: the norms are SequenceParallel (they run on
 * the sequence's share, Shard(1)); a module whose ColwiseParallel linears
 * read its input gets PrepareModuleInput(input_layouts=Shard(1),
 * desired_input_layouts=Replicate()), one all-gather of the input at its
 * entry (a forward pre-hook: the gathered input is the forward's argument
 * until it returns); its RowwiseParallel(output_layouts=Shard(1)) output
 * linear reduce-scatters back to the share. A block is given the same plan:
 * it is gathered when it reads its input with a column-parallel linear or
 * with a primitive that mixes positions along the sequence (attention,
 * rotary positions, the cache, a convolution or scan); else it runs on the
 * share as SequenceParallel runs a norm. */
#include "block.h"

#include <stdio.h>

/* Where a value's rows lie under sequence parallelism, as traced. */
enum {
    ROWS_NONE,     /* a parameter, a mask, the batch's ids: no rows of the stream */
    ROWS_INPUT,    /* the block input's rows (the share, or all of them once gathered) */
    ROWS_WHOLE,    /* the whole sequence: a column-parallel output, an all-gather's */
    ROWS_SCATTERED /* a row-parallel output reduce-scattered to the share (RowwiseParallel's Shard(1)) */
};

/* The primitives that mix positions along the sequence. */
static bool mixes_sequence(vp_block_prim prim) {
    switch (prim) {
    case VP_BP_SDPA:
    case VP_BP_MATMUL:
    case VP_BP_ROTARY:
    case VP_BP_CACHE:
    case VP_BP_CONV1D:
    case VP_BP_CUMSUM: return true;
    default: return false;
    }
}

static unsigned outputs(const vp_block_instr *in) {
    if (in->prim == VP_BP_SPLIT) return in->mode;
    if (in->prim == VP_BP_TOPK || in->prim == VP_BP_CACHE) return 2;
    return in->prim == VP_BP_DROP || in->prim == VP_BP_RETURN || in->prim == VP_BP_LAYER_KEEP ? 0 : 1;
}

/* The rows of the block's input and its named inputs (the batch's ids
 * are none of the stream's). */
static void input_rows(const vp_block_program *p, uint8_t *rows) {
    rows[0] = ROWS_INPUT;
    for (unsigned j = 0; j < p->n_inputs; j++)
        rows[p->n_params + 1 + j] = p->input[j] == VP_BLOCK_INPUT_IDS ? ROWS_NONE : ROWS_INPUT;
}

/* Each value's rows, and whether the block is gathered at its entry
 * (with the weight of the first column-parallel linear that reads the
 * input's rows, value id, or 0, and how many such linears there are). */
static bool trace_rows(const vp_block_program *p, unsigned end, uint8_t *rows, int16_t *weight, uint16_t *linears) {
    bool gathers = false;
    input_rows(p, rows);
    for (unsigned i = 0; i < end; i++) {
        const vp_block_instr *in = &p->code[i];
        uint8_t r = ROWS_NONE;
        bool reads_input = false;
        for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) {
            if (in->arg[a] < 0) continue;
            uint8_t own = rows[in->arg[a]];
            reads_input |= own == ROWS_INPUT;
            if (own > r) r = own;
        }
        if (in->prim == VP_BP_LINEAR) {
            vp_block_split split = (vp_block_split)p->param[in->arg[1] - 1].split;
            if (split == VP_BLOCK_SPLIT_ROWS && reads_input) {
                if (!*weight) *weight = in->arg[1];
                gathers = true;
                ++*linears;
            }
            if (split == VP_BLOCK_SPLIT_ROWS) r = ROWS_WHOLE;
            if (split == VP_BLOCK_SPLIT_COLUMNS) r = ROWS_SCATTERED;
        }
        if (mixes_sequence((vp_block_prim)in->prim) && reads_input) gathers = true;
        if (in->prim == VP_BP_ALL_GATHER) r = ROWS_WHOLE;
        if (in->prim == VP_BP_REDUCE_SCATTER) r = ROWS_SCATTERED;
        if (in->prim == VP_BP_MASK || in->prim == VP_BP_TRIL) r = ROWS_NONE;
        for (unsigned o = 0; o < outputs(in); o++) rows[in->out + o] = r;
    }
    return gathers;
}

/* Why a plan that gathers the block's input cannot run instruction i
 * under sequence parallelism, or NULL. */
static const char *gathered_problem(const vp_block_instr *in, const uint8_t *rows) {
    bool scattered = false, whole = false;
    for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) {
        if (in->arg[a] < 0) continue;
        scattered |= rows[in->arg[a]] == ROWS_SCATTERED;
        whole |= rows[in->arg[a]] == ROWS_INPUT || rows[in->arg[a]] == ROWS_WHOLE;
    }
    if (in->prim == VP_BP_RETURN && !scattered)
        return "returns the whole sequence (Replicate) where the stream is the sequence's share (Shard(1)): end the "
               "block with a row-parallel linear (RowwiseParallel's reduce-scatter)";
    if (in->prim == VP_BP_ALL_GATHER || in->prim == VP_BP_REDUCE_SCATTER)
        return "is one of Megatron-LM's sequence-parallel collectives in a block whose input the plan gathers "
               "already (PrepareModuleInput)";
    if (scattered && whole)
        return "joins a row-parallel output (Shard(1), the sequence's share) with the gathered input (Replicate)";
    if (scattered && in->n_dims)
        return "gives a row-parallel output (the sequence's share) an explicit shape, which counts the gathered "
               "sequence";
    return NULL;
}

void vp_block_note_dtensor_plan(vp_block_program *p) {
    uint8_t rows[VP_BLOCK_VALUES] = {0};
    unsigned end = p->megatron_start ? p->megatron_start : p->n_code; /* the forward fsdp2 runs */
    p->dtensor_weight = 0;
    p->dtensor_linears = 0;
    p->dtensor_problem[0] = p->dtensor_float8_problem[0] = '\0';
    p->dtensor_gathers = trace_rows(p, end, rows, &p->dtensor_weight, &p->dtensor_linears);
    if (!p->dtensor_gathers) return;
    for (unsigned i = 0; i < end; i++) {
        const vp_block_instr *in = &p->code[i];
        bool column = in->prim == VP_BP_LINEAR && p->param[in->arg[1] - 1].split == VP_BLOCK_SPLIT_ROWS;
        bool reads_input = false;
        for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) reads_input |= in->arg[a] == 0;
        /* torchao's PrepareFloat8ModuleInput (float8_tensor_parallel.py)
         * makes the module's input float8 for its Float8ColwiseParallel
         * linears: anything else reading it would read float8 */
        if (reads_input && !column && in->prim != VP_BP_RETURN && !p->dtensor_float8_problem[0])
            snprintf(p->dtensor_float8_problem, sizeof p->dtensor_float8_problem,
                     "precision: block %s: %s reads the block's input, which torchao's PrepareFloat8ModuleInput casts "
                     "to float8 for its column-parallel linears (fp8-torchao tensorwise with tp under framework = "
                     "fsdp2): read it with column-parallel linears only",
                     p->name, in->label);
        const char *problem = gathered_problem(in, rows);
        if (!problem || p->dtensor_problem[0]) continue;
        snprintf(p->dtensor_problem, sizeof p->dtensor_problem,
                 "tp: block %s: %s %s, under DTensor's tensor parallelism with sequence parallelism (framework = "
                 "fsdp2, tp > 1, sequence_parallel: torchtitan's plan)",
                 p->name, in->prim == VP_BP_RETURN ? "its output" : in->label, problem);
    }
}

/* Megatron-LM's sequence parallelism: the block's input is the rank's
 * share of the sequence, and only Megatron's own collectives (F.all_gather:
 * gather_from_sequence_parallel_region) and its column-parallel linears
 * (ColumnParallelLinear gathers its input inside under sequence_parallel,
 * megatron/core/tensor_parallel/layers.py) hand on the whole sequence; a
 * row-parallel linear reduce-scatters back to the share. A primitive that
 * mixes positions (attention, rotary positions, a convolution or scan)
 * reading the share would mix only this rank's positions: Megatron's
 * modules never do (their attention reads the column-parallel q/k/v). */
void vp_block_note_megatron_plan(vp_block_program *p) {
    uint8_t rows[VP_BLOCK_VALUES] = {0};
    p->megatron_sp_problem[0] = '\0';
    input_rows(p, rows);
    for (unsigned i = p->megatron_start; i < p->n_code; i++) {
        const vp_block_instr *in = &p->code[i];
        uint8_t r = ROWS_NONE;
        bool reads_share = false;
        for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) {
            if (in->arg[a] < 0) continue;
            uint8_t own = rows[in->arg[a]];
            reads_share |= own == ROWS_INPUT || own == ROWS_SCATTERED;
            if (own > r) r = own;
        }
        if (mixes_sequence((vp_block_prim)in->prim) && reads_share && !p->megatron_sp_problem[0])
            snprintf(p->megatron_sp_problem, sizeof p->megatron_sp_problem,
                     "sequence_parallel: block %s: %s reads the rank's share of the sequence under Megatron-LM's "
                     "sequence parallelism (tp > 1): gather it first (F.all_gather) or read it through a "
                     "column-parallel linear",
                     p->name, in->label);
        if (in->prim == VP_BP_LINEAR) {
            vp_block_split split = (vp_block_split)p->param[in->arg[1] - 1].split;
            if (split == VP_BLOCK_SPLIT_ROWS) r = ROWS_WHOLE;
            if (split == VP_BLOCK_SPLIT_COLUMNS) r = ROWS_SCATTERED;
        }
        if (in->prim == VP_BP_ALL_GATHER) r = ROWS_WHOLE;
        if (in->prim == VP_BP_REDUCE_SCATTER) r = ROWS_SCATTERED;
        if (in->prim == VP_BP_MASK || in->prim == VP_BP_TRIL) r = ROWS_NONE;
        for (unsigned o = 0; o < outputs(in); o++) rows[in->out + o] = r;
    }
}
