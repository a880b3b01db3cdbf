/* moe_megatron.c — the mixture of experts as Megatron-Core runs it. */
#include <math.h>

#include "moe.h"

/* Megatron-Core's MoELayer (megatron/core/transformer/moe): TopKRouter
 * (fp32 softmax, top-k), the token dispatcher's permute (index_select into
 * tokens x top_k rows, or capacity-padded), an all-to-all to the experts'
 * ranks and back, grouped GEMMs (fc1 with gate and up side by side, the
 * fused swiglu keeping fc1's output), and the unpermute that weighs by the
 * routing probabilities and scatters back. With an even routing each rank
 * receives as many rows as it sends. */
vp_t vp_moe_megatron(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    unsigned local = experts / step->ep;
    uint64_t n = vp_at(sim, x)->numel / h, rows = vp_numel(sim, n, k);
    double capacity = op->value[MOE_CAPACITY];
    if (capacity > 0) rows = (uint64_t)ceil(capacity * (double)rows);
    vp_t logits = vp_project(step, x, *s->router, 0, experts, "moe.router");
    vp_t probs = vp_moe_softmax_fp32(step, logits, "moe.router_softmax");
    vp_drop(sim, logits);
    vp_t selected;
    vp_t weights = vp_topk(sim, probs, vp_numel(sim, n, k), &selected, "moe.topk");
    vp_drop(sim, probs);
    vp_t permuted = vp_index(sim, x, selected, vp_numel(sim, rows, h), "moe.permute");
    if (step->ep > 1) { /* all-to-all: a new buffer of the rows this rank's experts take */
        vp_t received = vp_copy(sim, permuted, "moe.all_to_all");
        vp_drop(sim, permuted);
        permuted = received;
    }
    unsigned etp = step->etp;
    if (etp > 1) { /* the token dispatcher gathers the expert-tensor-parallel group's rows */
        vp_t gathered = vp_all_gather(sim, permuted, etp, "moe.etp_all_gather");
        vp_drop(sim, permuted);
        permuted = gathered;
    }
    uint64_t expert_rows = vp_numel(sim, rows, etp), f_local = f / etp;
    /* fc1: every local expert's w1 and w3, side by side */
    vp_t *fc1_weights = vp_step_scratch(step, 2 * local * sizeof(vp_t));
    if (!fc1_weights) return permuted;
    for (unsigned e = 0; e < local; e++) {
        fc1_weights[2 * e] = s->w1[e];
        fc1_weights[2 * e + 1] = s->w3[e];
    }
    vp_t fc1 = vp_grouped_linear(sim, permuted, fc1_weights, 2 * local, expert_rows, 2 * f_local,
                                 "moe.experts.linear_fc1");
    vp_drop(sim, permuted);
    vp_t act = vp_glu(sim, fc1, "moe.experts.swiglu");
    vp_drop(sim, fc1);
    vp_t fc2 = vp_grouped_linear(sim, act, s->w2, local, expert_rows, h, "moe.experts.linear_fc2");
    vp_drop(sim, act);
    if (etp > 1) { /* partial sums reduce-scattered back to this rank's rows */
        vp_t mine = vp_scatter(sim, fc2, etp, "moe.etp_reduce_scatter");
        vp_drop(sim, fc2);
        fc2 = mine;
    }
    if (step->ep > 1) {
        vp_t back = vp_copy(sim, fc2, "moe.all_to_all");
        vp_drop(sim, fc2);
        fc2 = back;
    }
    vp_t prob_rows = vp_to(sim, weights, (vp_dtype)vp_at(sim, fc2)->dtype, "moe.probs");
    vp_t weighted = vp_mul(sim, fc2, prob_rows, vp_at(sim, fc2)->numel, "moe.unpermute");
    vp_drop(sim, fc2);
    vp_drop(sim, prob_rows);
    vp_t zeros = vp_new(sim, vp_at(sim, x)->numel, (vp_dtype)vp_at(sim, x)->dtype, "moe.unpermute");
    /* moe_utils.unpermute: scatter_add_ keeps the index, not the rows */
    vp_t out = vp_index_add(sim, zeros, weighted, selected, false, "moe.unpermute");
    vp_drop(sim, zeros);
    vp_drop(sim, weighted);
    vp_drop(sim, weights);
    vp_drop(sim, selected);
    out = vp_moe_plus_shared(step, op, s->shared, x, out);
    return out;
}
