/* compile_region.c — a layer as AOTAutograd compiles it: the region's
 * forward values read from the autograd graph the eager layer recorded
 * (each node's outputs computed from its inputs and what it saves; what
 * the nodes save is what the joint graph's backward reads), given to the
 * min-cut partitioner, and the forward's saved tensors made to match the
 * cut. */
#include "compile_region.h"

#include <stdlib.h>

#include "compile_partition.h"
#include "framework.h"

enum { REGION_MAX = 512 }; /* a block's values: more is an op-table surprise (the sim's status says so) */

typedef struct {
    vp_t tensor[REGION_MAX];
    vp_cp_value value[REGION_MAX];
    bool kept[REGION_MAX]; /* a node's saved slot keeps it */
    uint32_t n;
    bool full;
} region;

static int find(const region *r, vp_t t) {
    for (uint32_t i = 0; i < r->n; i++)
        if (r->tensor[i] == t) return (int)i;
    return -1;
}

/* The partitioner's kind of a value made by the region: the ATen op that
 * made it where the primitives record one (get_default_op_list's compute
 * intensive and random ops), a view, or else an allowlisted pointwise or
 * reduction op (the 4x-smaller rule tells reductions by their sizes). */
static uint8_t kind_of(const vp_tensor *x) {
    switch ((vp_aten_op)x->aten) {
    case VP_ATEN_MM:
    case VP_ATEN_ADDMM:
    case VP_ATEN_BMM:
    case VP_ATEN_SCALED_MM:
    case VP_ATEN_SDPA_FLASH:
    case VP_ATEN_SDPA_EFFICIENT:
    case VP_ATEN_SDPA_CUDNN:
    case VP_ATEN_REDUCE_SCATTER:
    case VP_ATEN_ALL_GATHER: return VP_CP_COMPUTE; /* not in the recomputable allowlist */
    case VP_ATEN_NATIVE_DROPOUT: return VP_CP_RANDOM;
    default: return x->base ? VP_CP_VIEW : VP_CP_POINTWISE;
    }
}

static int add(region *r, vp_t t, uint8_t kind) {
    if (r->n == REGION_MAX) {
        r->full = true;
        return -1;
    }
    r->tensor[r->n] = t;
    r->value[r->n] = (vp_cp_value){.kind = kind};
    return (int)r->n++;
}

static uint64_t size_of(vp_sim *sim, vp_t t) {
    const vp_tensor *x = vp_at(sim, t);
    uint64_t bytes = 0;
    return vp_tensor_bytes((vp_dtype)x->dtype, x->numel, &bytes) ? bytes : 0; /* a view: its own elements */
}

/* A tensor the region reads that no node of it made: a placeholder
 * (a parameter, the block's input, a table made without grad), or one an
 * op made beside its output (a dropout's mask: random; SDPA's logsumexp:
 * compute intensive). */
static int input_value(region *r, vp_sim *sim, vp_t t, vp_t first_tensor) {
    int i = find(r, t);
    if (i >= 0) return i;
    const vp_tensor *x = vp_at(sim, t);
    uint8_t kind = x->leaf || x->category == VP_CAT_PARAMS ? VP_CP_PARAM : VP_CP_INPUT;
    /* made inside beside a node's output (a dropout's mask, SDPA's logsumexp) */
    if (t >= first_tensor && kind_of(x) != VP_CP_POINTWISE && kind_of(x) != VP_CP_VIEW) kind = kind_of(x);
    i = add(r, t, kind);
    if (i >= 0) r->value[i].bytes = size_of(sim, t);
    return i;
}

static bool is_output(const vp_node *node, vp_t t) {
    for (unsigned k = 0; k < VP_NODE_MAX_OUT; k++)
        if (node->out[k] == t) return true;
    return false;
}

static void read_node(region *r, vp_sim *sim, const vp_node *node, vp_t first_tensor) {
    uint32_t inputs[VP_CP_MAX_INPUTS];
    uint32_t n_in = 0;
    vp_t reads[VP_NODE_MAX_IN + VP_NODE_MAX_SAVED];
    unsigned n_reads = 0;
    for (unsigned k = 0; k < VP_NODE_MAX_IN; k++)
        if (node->in[k]) reads[n_reads++] = node->in[k];
    for (unsigned k = 0; k < VP_NODE_MAX_SAVED; k++)
        if (node->saved[k] && !is_output(node, node->saved[k])) reads[n_reads++] = node->saved[k];
    for (unsigned k = 0; k < n_reads; k++) {
        int v = input_value(r, sim, reads[k], first_tensor);
        if (v < 0) return;
        bool seen = false;
        for (uint32_t j = 0; j < n_in; j++) seen = seen || inputs[j] == (uint32_t)v;
        if (seen) continue;
        if (n_in == VP_CP_MAX_INPUTS) {
            r->full = true;
            return;
        }
        inputs[n_in++] = (uint32_t)v;
    }
    for (unsigned k = 0; k < VP_NODE_MAX_OUT; k++) {
        vp_t t = node->out[k];
        if (!t || find(r, t) >= 0) continue; /* an in-place op's output is its input */
        int v = add(r, t, kind_of(vp_at(sim, t)));
        if (v < 0) return;
        r->value[v].bytes = size_of(sim, t);
        r->value[v].n_inputs = n_in;
        for (uint32_t j = 0; j < n_in; j++) r->value[v].inputs[j] = inputs[j];
    }
}

/* A node whose op is a matmul's or SDPA's: its backward fuses with nothing. */
static bool unfusible_node(vp_sim *sim, const vp_node *node) {
    for (unsigned k = 0; k < VP_NODE_MAX_OUT; k++)
        if (node->out[k] && kind_of(vp_at(sim, node->out[k])) == VP_CP_COMPUTE) return true;
    return false;
}

static void mark_reads(region *r, vp_sim *sim, const vp_node *node) {
    bool unfusible = unfusible_node(sim, node);
    for (unsigned k = 0; k < VP_NODE_MAX_SAVED; k++) {
        int v = node->saved[k] ? find(r, node->saved[k]) : -1;
        if (v < 0) continue;
        r->value[v].backward_reads = true;
        r->value[v].backward_unfusible |= unfusible;
    }
}

/* A value the cut saves that no node's slot keeps: held until the
 * region's first node runs in backward, the last of the region's (the
 * compiled backward is one node that keeps its saved values to its end). */
static void hold_for_region(vp_sim *sim, uint32_t first_node, uint32_t end_node, vp_t t) {
    /* one the eager forward has already let go: the compiled forward
     * returns it, from the region's end on (one a fused forward kept in
     * registers is written) */
    bool made = !vp_at(sim, t)->live;
    if (!made) vp_materialize(sim, t);
    if (made) t = vp_new(sim, vp_at(sim, t)->numel, (vp_dtype)vp_at(sim, t)->dtype, "compile.saved");
    for (uint32_t i = first_node; i < end_node; i++) {
        vp_node *node = vp_node_at(sim, i);
        for (unsigned k = 0; k < VP_NODE_MAX_SAVED; k++)
            if (!node->saved[k] && !(node->holders & (1u << k))) {
                vp_hold_at(sim, node, k, t);
                if (made) vp_drop(sim, t);
                return;
            }
    }
    if (made) vp_drop(sim, t);
    sim->status = VP_SIM_LIMIT; /* no slot left in the region: an op-table bug */
}

bool vp_compile_region(vp_sim *sim, uint32_t first_node, uint32_t end_node, vp_t first_tensor) {
    region *r = calloc(1, sizeof *r);
    bool *saved = calloc(REGION_MAX, sizeof *saved);
    bool ok = r && saved;
    for (uint32_t i = first_node; ok && i < end_node && !r->full; i++) read_node(r, sim, vp_node_at(sim, i), first_tensor);
    ok = ok && !r->full;
    for (uint32_t i = first_node; ok && i < end_node; i++) mark_reads(r, sim, vp_node_at(sim, i));
    ok = ok && vp_compile_partition(r->value, r->n, saved) == VP_CP_OK;
    for (uint32_t i = first_node; ok && i < end_node; i++) {
        vp_node *node = vp_node_at(sim, i);
        for (unsigned k = 0; k < VP_NODE_MAX_SAVED; k++) {
            int v = node->saved[k] && !(node->packed & (1u << k)) ? find(r, node->saved[k]) : -1;
            if (v < 0) continue;
            if (saved[v]) {
                r->kept[v] = true;
                vp_materialize(sim, r->tensor[v]); /* a value of a fused forward the region keeps */
            } else {
                vp_recompute_saved(sim, i, k);
            }
        }
    }
    for (uint32_t v = 0; ok && v < r->n; v++)
        if (saved[v] && !r->kept[v] && r->value[v].kind != VP_CP_PARAM) hold_for_region(sim, first_node, end_node, r->tensor[v]);
    /* Inductor's backward: element-wise nodes fuse into kernels whose
     * intermediate values stay in registers; a matmul's or SDPA's is an
     * extern kernel reading and writing memory (sim.c run_node) */
    uint32_t region_number = ++sim->n_regions;
    for (uint32_t i = first_node; ok && i < end_node; i++) {
        vp_node *node = vp_node_at(sim, i);
        node->region = region_number;
        node->fused = !unfusible_node(sim, node);
    }
    if (!ok) sim->status = VP_SIM_LIMIT; /* a region past its tables */
    free(r);
    free(saved);
    return ok;
}

const char *vp_compile_recipe_problem(const vp_recipe *recipe) {
    if (recipe->compile_loss && !recipe->compile) return "compile_loss: needs compile = true (torchtune's compile_loss)";
    if (!recipe->compile) return NULL;
    if (!vp_framework_of(recipe)->compiles_blocks)
        return "compile: modelled as torchtitan and torchtune compile each block (framework = fsdp2 or torch); "
               "torch.compile under Megatron-LM, DeepSpeed or FSDP1 is not modelled (docs/compile.md)";
    /* DTensor's tensor parallelism traces as functional collectives
     * (all_gather_into_tensor, reduce_scatter_tensor), which the
     * partitioner never recomputes (not in its allowlist: kind_of).
     * The selective policies' tags meet the ring's traced ops (each step's
     * flash kernel, the K/V all-gather) below DTensor's dispatch: not read */
    if (recipe->cp > 1 && (recipe->checkpoint_ops || recipe->selective))
        return "compile: context parallelism with selective checkpointing inside a compiled block is not modelled "
               "(the policy's tags on the ring's traced ops; docs/compile.md): use checkpointing = full or none";
    if (recipe->checkpoint_every > 1)
        return "compile: torchtitan checkpoints and compiles block by block: checkpointing every-K with K > 1 is not "
               "modelled with compile (docs/compile.md)";
    if (recipe->compile_loss && recipe->loss != VP_LOSS_CHUNKED)
        return "compile_loss: modelled for the chunked loss (torchtune's compile_loss of "
               "CEWithChunkedOutputLoss.compute_cross_entropy; docs/compile.md)";
    /* under a full checkpoint a compiled block saves what the checkpoint
     * keeps (its input, saved by the eager wrapper through the hooks) */
    bool every_block_checkpointed = recipe->checkpoint_every == 1 && !recipe->checkpoint_layers &&
                                    !recipe->checkpoint_ops && !recipe->selective;
    if (recipe->offload_activations && !(recipe->offload_torchtune && !recipe->offload_trl && every_block_checkpointed))
        return "compile: offload_activations with compile is modelled for torchtune's offloading (not TRL's) with "
               "every block checkpointed (docs/compile.md)";
    return NULL;
}
