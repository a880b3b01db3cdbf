/* moe_hf.c — the mixture of experts as plain PyTorch model code runs it in
 * training: transformers' token loop (Mixtral, Qwen2-MoE; DeepSeek-V3's
 * with its own router) and DeepSeekMoE's repeat-and-scatter path. */
#include "moe.h"

#include <stdlib.h>
#include <string.h>

/* The expert loop's Python locals: each lives until the next iteration
 * rebinds its name, the last ones until the function returns. With frozen
 * experts (LoRA) nothing saves the expert's input, so its lifetime shows. */
typedef struct {
    vp_t which, top_x;   /* torch.where's index columns (views of one tensor) */
    vp_t state;          /* the expert's input: hidden_states[top_x] */
    vp_t weighted;       /* its output times the routing weights */
} loop_locals;

static void drop_loop_locals(vp_sim *sim, loop_locals *l) {
    vp_t *names[] = {&l->which, &l->top_x, &l->state, &l->weighted};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) vp_moe_rebind(sim, names[i], 0);
}

/* The expert loop of transformers' sparse blocks (after the caller's
 * one_hot(selected), int64 [tokens, k, experts]): for every expert,
 * torch.where for its tokens, hidden_states[top_x] (a copy its MLP keeps
 * when trained), the expert MLP, times its routing weights, index_add_
 * into the zero-initialized output of `dtype`. Returns that output and
 * leaves the last iteration's locals in *l; x and routing are borrowed. */
static vp_t expert_loop(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t routing, vp_dtype dtype,
                        loop_locals *l) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t out = vp_new(sim, vp_at(sim, x)->numel, dtype, "moe.final_hidden_states");
    *l = (loop_locals){0};
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        if (!tokens) continue;
        vp_moe_where(sim, tokens, &l->which, &l->top_x); /* idx, top_x = torch.where(expert_mask[e]) */
        vp_t which = l->which, top_x = l->top_x;
        vp_moe_rebind(sim, &l->state, vp_index(sim, x, top_x, vp_numel(sim, tokens, h), "moe.current_state"));
        vp_t y = vp_moe_expert(step, op, l->state, s->w1[e], s->w3[e], s->w2[e], f, h);
        /* routing_weights[top_x, idx, None] (DeepSeek-V3: topk_weights[token_indices, weight_indices]) */
        vp_t w = vp_index_pair(sim, routing, top_x, which, tokens, "moe.routing_weight");
        vp_moe_rebind(sim, &l->weighted, vp_mul(sim, y, w, vp_at(sim, y)->numel, "moe.weighted"));
        vp_drop(sim, y);
        vp_drop(sim, w);
        vp_t next = vp_index_add(sim, out, l->weighted, top_x, true, "moe.index_add");
        vp_drop(sim, out);
        out = next;
    }
    return out;
}

static vp_t expert_mask(vp_step *step, const vp_op *op, uint64_t assignments) {
    return vp_new(&step->sim, vp_numel(&step->sim, assignments, vp_op_u64(op, MOE_EXPERTS)), VP_INT64,
                  "moe.expert_mask");
}

/* transformers' MixtralSparseMoeBlock.forward (Qwen2-MoE alike): router
 * logits, an fp32 softmax, top-k (renormalized for Mixtral) cast back, the
 * expert loop, the shared experts while the expert mask is still a local. */
vp_t vp_moe_mixtral(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t logits = vp_project(step, x, *s->router, 0, experts, "moe.gate");
    vp_t probs = vp_moe_softmax_fp32(step, logits, "moe.router_softmax");
    vp_t selected;
    /* routing_weights, selected_experts = torch.topk(routing_weights, ...):
     * the name is rebound, so the probabilities live on only where the
     * softmax saved them (in host memory under save_on_cpu) */
    vp_t weights = vp_topk(sim, probs, assignments, &selected, "moe.topk");
    vp_drop(sim, probs);
    if (vp_op_flag(op, MOE_NORM_TOPK)) weights = vp_moe_renormalize(sim, weights, n);
    /* the name is rebound to the cast: the fp32 values go unless the cast is a no-op */
    vp_t routing = vp_to(sim, weights, (vp_dtype)vp_at(sim, x)->dtype, "moe.routing_weights");
    vp_drop(sim, weights);
    vp_t one_hot = expert_mask(step, op, assignments);
    loop_locals locals;
    vp_t out = expert_loop(step, op, s, x, routing, (vp_dtype)vp_at(sim, x)->dtype, &locals);
    out = vp_moe_plus_shared(step, op, s->shared, x, out);
    drop_loop_locals(sim, &locals);
    vp_drop(sim, one_hot);
    vp_drop(sim, routing);
    vp_drop(sim, selected);
    /* router_logits leave with the layer's outputs, which the model keeps
     * with output_router_logits; until then they are the decoder layer's
     * local (hidden_states, router_logits = self.block_sparse_moe(...)),
     * through its residual add */
    if (vp_op_flag(op, MOE_ROUTER_LOGITS)) vp_step_keep_router_logits(step, logits);
    vp_step_keep_local(step, logits, VP_LOCAL_OF_LAYER);
    vp_drop(sim, logits);
    return out;
}

/* DeepSeek's top-k renormalization, w / (w.sum(-1, keepdim=True) + 1e-20):
 * the sum, the shifted sum and the quotient, [tokens, k] over n tokens.
 * Takes over the reference to weights. */
static vp_t renormalized(vp_sim *sim, vp_t weights, uint64_t n) {
    vp_t sum = vp_sum(sim, weights, n, "moe.topk_sum");
    vp_t denominator = vp_shift(sim, sum, (vp_dtype)vp_at(sim, sum)->dtype, vp_at(sim, sum)->numel, "moe.topk_sum");
    vp_drop(sim, sum);
    vp_t normed = vp_mul(sim, weights, denominator, vp_at(sim, weights)->numel, "moe.topk_norm");
    vp_drop(sim, denominator);
    vp_drop(sim, weights);
    return normed;
}

/* MoEGate's sequence-wise auxiliary loss (seq_aux): ce = zeros(b, E) and a
 * ones(b, s x k) scattered into it, times scores.mean over the sequence,
 * summed, averaged, scaled by alpha. Takes nothing over; returns the loss. */
static vp_t aux_loss(vp_step *step, vp_t scores, unsigned experts, uint64_t assignments) {
    vp_sim *sim = &step->sim;
    uint64_t per_sequence = vp_numel(sim, step->batch, experts);
    vp_t ce = vp_new(sim, per_sequence, VP_FP32, "moe.aux_ce");
    vp_drop(sim, vp_new(sim, assignments, VP_FP32, "moe.aux_ones")); /* scatter_add_ into ce, then gone */
    vp_t mean = vp_reduce(sim, scores, per_sequence, "moe.aux_mean");
    vp_t product = vp_mul(sim, ce, mean, per_sequence, "moe.aux_ce_mean");
    vp_drop(sim, ce);
    vp_drop(sim, mean);
    vp_t per_batch = vp_sum(sim, product, step->batch, "moe.aux_sum");
    vp_drop(sim, product);
    vp_t mean_loss = vp_reduce(sim, per_batch, 1, "moe.aux_mean_loss");
    vp_drop(sim, per_batch);
    vp_t loss = vp_scale(sim, mean_loss, "moe.aux_alpha");
    vp_drop(sim, mean_loss);
    return loss;
}

/* F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
 * of DeepSeek's routers (V2's MoEGate, V3's DeepseekV3TopkRouter): the
 * input view and the weight cast to fp32 (copies when they are 16-bit;
 * autocast casts them back down), gone after the product. */
static vp_t fp32_router_logits(vp_step *step, const moe_slots *s, vp_t view, uint64_t experts) {
    vp_sim *sim = &step->sim;
    vp_t x32 = vp_to(sim, view, VP_FP32, "moe.router_input");
    vp_t w32 = vp_to(sim, *s->router, VP_FP32, "moe.router_weight");
    vp_t logits = vp_project(step, x32, w32, 0, experts, "moe.gate");
    vp_drop(sim, x32);
    vp_drop(sim, w32);
    return logits;
}

/* DeepSeekMoE's training path after its gate (deepseek-ai/deepseek-moe-16b-base
 * and DeepSeek-V2's modeling_deepseek.py, DeepseekMoE.forward and
 * DeepseekV2MoE.forward): every token repeated k times (repeat_interleave:
 * an index_select that keeps its index), an empty y of that size, and for
 * each expert a bool mask of the assignments, the masked rows (a copy its
 * MLP keeps; the indexing keeps the mask), the MLP, and y[mask] = output
 * (index_put_ keeps a second mask); y times the weights summed over k, and
 * the auxiliary loss hooked onto the result. Takes over the references to
 * weights, selected and loss (0: none). */
static vp_t deepseek_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t weights, vp_t selected,
                             vp_t loss) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    /* repeat_interleave(k, dim=0): a repeats tensor, its index, index_select */
    vp_t repeats = vp_new(sim, n, VP_INT64, "moe.repeat_interleave");
    vp_t index = vp_new(sim, assignments, VP_INT64, "moe.repeat_interleave");
    vp_drop(sim, repeats);
    vp_t repeated = vp_index(sim, x, index, vp_numel(sim, assignments, h), "moe.repeat_interleave");
    vp_drop(sim, index);
    vp_t y = vp_new(sim, vp_numel(sim, assignments, h), dt, "moe.y");
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        vp_t mask = vp_new(sim, assignments, VP_BOOL, "moe.mask");
        vp_t rows = vp_new(sim, tokens, VP_INT64, "moe.nonzero"); /* the kernel turns the mask into rows */
        vp_t state = vp_index(sim, repeated, mask, vp_numel(sim, tokens, h), "moe.expert_input");
        vp_drop(sim, rows);
        vp_drop(sim, mask);
        vp_t out = vp_moe_expert(step, op, state, s->w1[e], s->w3[e], s->w2[e], f, h);
        vp_drop(sim, state);
        vp_t cast = vp_to(sim, out, dt, "moe.expert_output"); /* index_put_ needs y's dtype */
        vp_drop(sim, out);
        mask = vp_new(sim, assignments, VP_BOOL, "moe.mask");
        rows = vp_new(sim, tokens, VP_INT64, "moe.nonzero");
        vp_t next = vp_index_put(sim, y, cast, mask, "moe.index_put");
        vp_drop(sim, rows);
        vp_drop(sim, mask);
        vp_drop(sim, cast);
        vp_drop(sim, y);
        y = next;
    }
    /* y = (y.view(...) * topk_weight.unsqueeze(-1)).sum(dim=1): the name
     * lets go of the experts' rows only once the sum is made */
    vp_t weighted = vp_mul(sim, y, weights, vp_at(sim, y)->numel, "moe.weighted");
    vp_t out = vp_sum(sim, weighted, vp_numel(sim, n, h), "moe.sum_topk");
    vp_drop(sim, y);
    vp_drop(sim, weighted);
    if (loss) {
        vp_t hooked = vp_attach(sim, out, loss, "moe.add_aux_loss"); /* AddAuxiliaryLoss */
        vp_drop(sim, out);
        vp_drop(sim, loss);
        out = hooked;
    }
    out = vp_moe_plus_shared(step, op, s->shared, x, out);
    vp_drop(sim, repeated);
    vp_drop(sim, weights);
    vp_drop(sim, selected);
    return out;
}

/* DeepSeekMoE in training (deepseek-ai/deepseek-moe-16b-base,
 * modeling_deepseek.py: MoEGate and DeepseekMoE.forward): router logits, a
 * softmax in their dtype (fp32 under autocast), top-k; then the experts as
 * deepseek_experts runs them. */
vp_t vp_moe_deepseek(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t logits = vp_project(step, x, *s->router, 0, experts, "moe.gate");
    vp_t up = vp_autocast_fp32(step, logits, "moe.gate_softmax"); /* softmax is on autocast's fp32 list */
    vp_t scores = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, up)->dtype, "moe.gate_softmax");
    vp_drop(sim, up);
    vp_drop(sim, logits);
    vp_t selected;
    vp_t weights = vp_topk(sim, scores, assignments, &selected, "moe.topk");
    /* topk_weight / (topk_weight.sum(dim=-1, keepdim=True) + 1e-20) */
    if (vp_op_flag(op, MOE_NORM_TOPK)) weights = renormalized(sim, weights, n);
    vp_t loss = vp_op_flag(op, MOE_AUX_LOSS) ? aux_loss(step, scores, experts, assignments) : 0;
    vp_drop(sim, scores);
    return deepseek_experts(step, op, s, x, weights, selected, loss);
}

/* The group-limited choice's masking, as DeepSeek-V2's gate and
 * DeepSeek-V3's route_tokens_to_experts both write it: the groups' top-k
 * indices (torch.topk(...)[1]: the values go, and their node with them),
 * then without grad a zeros_like group mask scattered into, expanded to the
 * experts (a reshape copy), as bool and inverted; then masked_fill of
 * `scores` with the inverse, which MaskedFillBackward keeps while the
 * result lives. *group_idx, *group_mask and *score_mask are the caller's
 * locals. Returns the masked scores. */
static vp_t masked_to_chosen_groups(vp_sim *sim, const vp_op *op, vp_t group_scores, vp_t scores, uint64_t n,
                                    const char *label, vp_t *group_idx, vp_t *group_mask, vp_t *score_mask) {
    uint64_t g = vp_op_u64(op, MOE_GROUPS), tg = vp_op_u64(op, MOE_TOPK_GROUPS);
    uint64_t all = vp_numel(sim, n, vp_op_u64(op, MOE_EXPERTS));
    vp_drop(sim, vp_topk(sim, group_scores, vp_numel(sim, n, tg), group_idx, "moe.group_idx"));
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false; /* the masks need no gradient */
    *group_mask = vp_new(sim, vp_numel(sim, n, g), VP_FP32, "moe.group_mask");
    *score_mask = vp_new(sim, all, VP_FP32, "moe.score_mask");
    vp_t as_bool = vp_new(sim, all, VP_BOOL, "moe.score_mask");
    vp_t inverted = vp_new(sim, all, VP_BOOL, "moe.score_mask");
    vp_drop(sim, as_bool);
    sim->grad_mode = grad_mode;
    vp_t masked = vp_where(sim, scores, inverted, label); /* masked_fill */
    vp_drop(sim, inverted);
    return masked;
}

/* MoEGate's topk_method group_limited_greedy (DeepSeek-V2's
 * modeling_deepseek.py), with grad: each group's best score
 * (scores.view(n, groups, -1).max(dim=-1): values, and int64 indices its
 * node saves), topk_group groups chosen (the values go, the indices are
 * group_idx), a zeros_like group mask scattered into, expanded to the
 * experts (a reshape copy), as bool and inverted (the inverse kept by
 * masked_fill), the other experts' scores masked to zero, then top-k.
 * The group tensors are the gate's locals: *group_locals gets them (5),
 * the caller drops them as the gate returns. Returns the top-k values. */
static vp_t group_limited_topk(vp_step *step, const vp_op *op, vp_t scores, uint64_t n, vp_t *selected,
                               vp_t group_locals[5]) {
    vp_sim *sim = &step->sim;
    uint64_t g = vp_op_u64(op, MOE_GROUPS), k = vp_op_u64(op, MOE_TOP_K);
    vp_t max_indices;
    vp_t group_scores = vp_topk(sim, scores, vp_numel(sim, n, g), &max_indices, "moe.group_scores");
    vp_drop(sim, max_indices); /* the namedtuple's: its node keeps them */
    vp_t group_idx, group_mask, score_mask;
    vp_t tmp_scores = masked_to_chosen_groups(sim, op, group_scores, scores, n, "moe.tmp_scores", &group_idx,
                                              &group_mask, &score_mask);
    vp_t weights = vp_topk(sim, tmp_scores, vp_numel(sim, n, k), selected, "moe.topk");
    vp_t locals[5] = {group_scores, group_idx, group_mask, score_mask, tmp_scores};
    for (unsigned i = 0; i < 5; i++) group_locals[i] = locals[i];
    return weights;
}

/* DeepSeek-V2's gate in training, MoEGate of DeepSeek's modeling_deepseek.py
 * (DeepSeek-V2 and V2-Lite) or transformers' DeepseekV2MoEGate (the same
 * code without the auxiliary loss and the renormalization): the gate views
 * its input, F.linear of it and the weight cast to fp32 (copies when
 * 16-bit), an fp32 softmax (kept), top-k greedily or group-limited, the
 * weights renormalized with norm_topk_prob (own code only) or else times
 * routed_scaling_factor (a new tensor even at 1.0), the sequence-wise
 * auxiliary loss into *loss (own code, aux_loss; else 0); its locals (the
 * view, the logits, the scores, the group tensors) go as it returns.
 * With logits_out, transformers 5's DeepseekV2Moe: F.linear on the input
 * itself (no view), the logits handed back (forward's local to the
 * block's end) and viewed flat by route_tokens_to_experts for the
 * softmax; the rest as transformers' 4.x gate (the choice with grad).
 * Returns the weights; the indices in *selected. */
static vp_t v2_gate(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, bool own_code, vp_t *selected,
                    vp_t *loss, vp_t *logits_out) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    uint32_t first_node = sim->n_nodes;
    /* 4.x views the input and keeps the logits; 5.x takes the input as it
     * is, hands the logits back and views them for the softmax */
    bool v5 = logits_out != NULL;
    vp_t router_view = v5 ? 0 : vp_alias(sim, x, "moe.router_view");
    vp_t logits = fp32_router_logits(step, s, v5 ? x : router_view, experts);
    vp_t logits_view = v5 ? vp_alias(sim, logits, "moe.router_logits.view") : 0;
    vp_t scores = vp_moe_softmax_fp32(step, v5 ? logits_view : logits, "moe.gate_softmax");
    vp_t group_locals[5] = {0};
    vp_t weights = vp_op_flag(op, MOE_GROUP_LIMITED) ? group_limited_topk(step, op, scores, n, selected, group_locals)
                                                     : vp_topk(sim, scores, assignments, selected, "moe.topk");
    uint32_t end_node = sim->n_nodes;
    if (own_code && k > 1 && vp_op_flag(op, MOE_NORM_TOPK)) {
        weights = renormalized(sim, weights, n);
    } else { /* topk_weight * self.routed_scaling_factor */
        vp_t scaled = vp_scale(sim, weights, "moe.routed_scaling");
        vp_drop(sim, weights);
        weights = scaled;
    }
    *loss = own_code && vp_op_flag(op, MOE_AUX_LOSS) ? aux_loss(step, scores, experts, assignments) : 0;
    if (v5) {
        *logits_out = logits;
        logits = 0;
    }
    vp_t locals[] = {router_view, logits, logits_view, scores};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    for (unsigned i = 0; i < 5; i++) vp_drop(sim, group_locals[i]);
    /* the group maximum's node dies with group_scores, with the indices it saved */
    vp_drop_dead_nodes(sim, first_node, end_node);
    return weights;
}

vp_t vp_moe_v5_deepseek_v2_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *selected,
                                 vp_t *logits) {
    vp_t loss;
    return v2_gate(step, op, s, x, false, selected, &loss, logits);
}

/* DeepseekV2MoE in training, with MoEGate (DeepSeek's modeling_deepseek.py
 * for DeepSeek-V2 and V2-Lite): the gate, then DeepSeekMoE's path. */
vp_t vp_moe_deepseek_v2(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_t selected, loss;
    vp_t weights = v2_gate(step, op, s, x, true, &selected, &loss, NULL);
    return deepseek_experts(step, op, s, x, weights, selected, loss);
}

/* DeepseekV2MoE.moe of transformers 4.56-4.57 (src/transformers/models/
 * deepseek_v2/modeling_deepseek_v2.py, commit 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d),
 * in training, on the flat input: cnts = topk_ids.new_zeros((n, E)) and its
 * sum over tokens (int64), the assignments sorted by expert (argsort: sort's
 * values go, its int64 indices stay), the tokens gathered once in that order
 * (hidden_states[indices // k]: an index op that keeps its index), each
 * expert's MLP on its slice of them (views: the MLP keeps the whole), the
 * outputs joined by torch.cat (the list lives until moe returns), an
 * empty_like written by index (new_x[indices] = outs), viewed as [n, k, h]
 * and cast to the weights' dtype (fp32: a copy unless the rows are fp32),
 * weighed in place (mul_: its node keeps a clone of the rows; on new_x's
 * own view when no cast was needed), summed over
 * k and cast back. Takes nothing over; returns the routed sum. */
static vp_t sorted_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t flat, vp_t weights) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, flat)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t *outputs = calloc(experts, sizeof *outputs);
    if (!outputs) {
        sim->status = VP_SIM_NOMEM;
        vp_hold(sim, flat);
        return flat;
    }
    vp_t cnts = vp_new(sim, vp_numel(sim, n, experts), VP_INT64, "moe.cnts");
    vp_t per_expert = vp_new(sim, experts, VP_INT64, "moe.tokens_per_expert");
    vp_drop(sim, vp_new(sim, assignments, VP_INT64, "moe.argsort")); /* sort's values */
    vp_t indices = vp_new(sim, assignments, VP_INT64, "moe.argsort");
    vp_t rows = vp_new(sim, assignments, VP_INT64, "moe.token_rows"); /* indices // k */
    vp_t sorted = vp_index(sim, flat, rows, vp_numel(sim, assignments, h), "moe.sorted_tokens");
    vp_drop(sim, rows);
    unsigned count = 0;
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        if (!tokens) continue;
        vp_t slice = vp_slice(sim, sorted, vp_numel(sim, tokens, h), "moe.expert_tokens");
        outputs[count++] = vp_moe_expert(step, op, slice, s->w1[e], s->w3[e], s->w2[e], f, h);
        vp_drop(sim, slice);
    }
    vp_t outs = vp_cat_many(sim, outputs, count, "moe.outs");
    vp_dtype rows_dtype = (vp_dtype)vp_at(sim, outs)->dtype;
    vp_t empty = vp_new(sim, vp_at(sim, outs)->numel, rows_dtype, "moe.new_x");
    vp_t new_x = vp_index_put(sim, empty, outs, indices, "moe.index_put");
    vp_drop(sim, empty);
    vp_t typed = vp_to(sim, new_x, (vp_dtype)vp_at(sim, weights)->dtype, "moe.weighted");
    /* no cast (fp32 rows): mul_ acts on a view of new_x itself, so new_x's
     * node is CopySlices and the view's AsStridedBackward0, whose backward
     * makes a zero-filled storage of new_x's size (as_strided_backward,
     * FunctionsManual.cpp, 1.13) */
    vp_t weighted;
    if (typed == new_x) {
        vp_t base = vp_mul_view_(sim, typed, weights, "moe.weighted");
        weighted = vp_expand(sim, base, vp_at(sim, base)->numel, "moe.weighted_view");
        vp_drop(sim, base);
    } else {
        weighted = vp_mul_(sim, typed, weights, "moe.weighted");
    }
    vp_drop(sim, typed);
    vp_t summed = vp_sum(sim, weighted, vp_numel(sim, n, h), "moe.sum_topk");
    vp_drop(sim, weighted);
    vp_t routed = vp_to(sim, summed, rows_dtype, "moe.routed");
    vp_drop(sim, summed);
    /* moe() returns: its locals go */
    for (unsigned i = 0; i < count; i++) vp_drop(sim, outputs[i]);
    free(outputs);
    vp_t locals[] = {outs, new_x, sorted, indices, per_expert, cnts};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    return routed;
}

/* DeepseekV2MoE.forward of transformers 4.56-4.57 (the same file): the
 * gate, the input viewed flat, moe(), the shared experts on the input. */
vp_t vp_moe_deepseek_v2_hf(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t selected, loss;
    vp_t weights = v2_gate(step, op, s, x, false, &selected, &loss, NULL);
    vp_t flat = vp_alias(sim, x, "moe.view");
    vp_t routed = sorted_experts(step, op, s, flat, weights);
    vp_drop(sim, flat);
    vp_t out = vp_moe_plus_shared(step, op, s->shared, x, routed);
    vp_drop(sim, weights);
    vp_drop(sim, selected);
    return out;
}

/* DeepseekV3TopkRouter.get_topk_indices, under no_grad: the scores plus
 * the correction bias, the two best per group summed, topk_group groups
 * chosen and scattered into a zeros_like mask, the mask expanded to the
 * experts (a reshape copy), the other experts' scores masked to zero, top-k.
 * Temporaries only; returns the int64 indices. */
static vp_t choose(vp_step *step, const vp_op *op, uint64_t n) {
    vp_sim *sim = &step->sim;
    uint64_t e = vp_op_u64(op, MOE_EXPERTS), g = vp_op_u64(op, MOE_GROUPS), tg = vp_op_u64(op, MOE_TOPK_GROUPS);
    uint64_t k = vp_op_u64(op, MOE_TOP_K), all = vp_numel(sim, n, e);
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    vp_t for_choice = vp_new(sim, all, VP_FP32, "moe.scores_for_choice");
    vp_t best2 = vp_new(sim, vp_numel3(sim, n, g, 2), VP_FP32, "moe.group_topk");
    vp_drop(sim, vp_new(sim, vp_numel3(sim, n, g, 2), VP_INT64, "moe.group_topk")); /* [0]: the indices go */
    vp_t group_scores = vp_new(sim, vp_numel(sim, n, g), VP_FP32, "moe.group_scores");
    vp_drop(sim, best2);
    vp_drop(sim, vp_new(sim, vp_numel(sim, n, tg), VP_FP32, "moe.group_idx")); /* [1]: the values go */
    vp_t group_idx = vp_new(sim, vp_numel(sim, n, tg), VP_INT64, "moe.group_idx");
    vp_t group_mask = vp_new(sim, vp_numel(sim, n, g), VP_FP32, "moe.group_mask");
    vp_t score_mask = vp_new(sim, all, VP_FP32, "moe.score_mask");
    vp_t as_bool = vp_new(sim, all, VP_BOOL, "moe.score_mask");
    vp_t inverted = vp_new(sim, all, VP_BOOL, "moe.score_mask");
    vp_drop(sim, as_bool);
    vp_t masked = vp_new(sim, all, VP_FP32, "moe.scores_for_choice");
    vp_drop(sim, inverted);
    vp_drop(sim, for_choice);
    vp_drop(sim, vp_new(sim, vp_numel(sim, n, k), VP_FP32, "moe.topk"));
    vp_t indices = vp_new(sim, vp_numel(sim, n, k), VP_INT64, "moe.topk");
    vp_drop(sim, group_scores);
    vp_drop(sim, group_idx);
    vp_drop(sim, group_mask);
    vp_drop(sim, score_mask);
    vp_drop(sim, masked);
    sim->grad_mode = grad_mode;
    return indices;
}

/* transformers 5's DeepseekV3MoE.route_tokens_to_experts: the same choice
 * as get_topk_indices, but in the block's own method and with grad, so each
 * step is an autograd node that saves what its backward would need though
 * none runs: the scores plus the correction bias (AddBackward, nothing),
 * the two best of each group (TopkBackward keeps their indices, as long as
 * the group scores summed from them live), the groups' top-k (its values
 * go, and with them its node), the mask made without grad, masked_fill
 * (MaskedFillBackward keeps the mask while the masked scores live), the
 * top-k (likewise). save_on_cpu packs each saved tensor as it is saved.
 * Every step's result is a local until the method returns: into `locals`
 * (V3_CHOICE_LOCALS, in the order Python frees them). Returns the int64
 * indices. */
enum { V3_CHOICE_LOCALS = 6 };
static vp_t choose_tracked(vp_step *step, const vp_op *op, const moe_slots *s, vp_t scores, uint64_t n,
                           vp_t locals[V3_CHOICE_LOCALS]) {
    vp_sim *sim = &step->sim;
    uint64_t g = vp_op_u64(op, MOE_GROUPS), k = vp_op_u64(op, MOE_TOP_K);
    uint64_t all = vp_numel(sim, n, vp_op_u64(op, MOE_EXPERTS));
    vp_t for_choice = vp_add(sim, scores, *s->score_bias, all, "moe.router_logits_for_choice");
    vp_t best2_indices;
    vp_t best2 = vp_topk(sim, for_choice, vp_numel3(sim, n, g, 2), &best2_indices, "moe.group_topk");
    vp_drop(sim, best2_indices); /* [0]: the indices are the node's */
    vp_t group_scores = vp_sum(sim, best2, vp_numel(sim, n, g), "moe.group_scores");
    vp_drop(sim, best2);
    vp_t group_idx, group_mask, score_mask;
    vp_t masked = masked_to_chosen_groups(sim, op, group_scores, for_choice, n, "moe.scores_for_choice", &group_idx,
                                          &group_mask, &score_mask);
    vp_t indices;
    vp_drop(sim, vp_topk(sim, masked, vp_numel(sim, n, k), &indices, "moe.topk")); /* [1] */
    vp_t order[V3_CHOICE_LOCALS] = {for_choice, group_scores, group_idx, group_mask, score_mask, masked};
    memcpy(locals, order, sizeof order);
    return indices;
}

/* DeepSeek-V3's router in training: F.linear of the input and the weight
 * cast to fp32 (copies when they are 16-bit; autocast casts them back
 * down), sigmoid scores (kept), the choice, the chosen scores gathered,
 * renormalized (in place in the model; modelled as the division's own
 * [tokens, k] tensor) and scaled by routed_scaling_factor. Transformers
 * 4.51-4.52 (`v5` false): the logits are the router's local, gone after
 * the sigmoid, and the choice runs without grad (get_topk_indices).
 * Transformers 5 (`v5`): the router returns the logits, which stay the
 * block's local (*logits) through the experts and the shared experts,
 * and route_tokens_to_experts chooses with grad (choose_tracked). Returns
 * the routing weights; *selected gets the int64 choices. */
static vp_t v3_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, bool v5, vp_t *selected,
                     vp_t *logits) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), experts = vp_op_u64(op, MOE_EXPERTS), k = vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    /* the router views the input itself (hidden_states.view(-1, h)), then
     * forward views it for the experts: each view is an autograd node with
     * an input buffer of its own, so the experts' gradients add up apart from
     * the shared experts' (which take the input as it is) until the view's
     * backward hands their sum on */
    uint32_t first_node = sim->n_nodes;
    vp_t router_view = vp_alias(sim, x, "moe.router_view");
    *logits = fp32_router_logits(step, s, router_view, experts);
    vp_drop(sim, router_view);
    vp_t scores = vp_unary(sim, *logits, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, *logits)->dtype,
                           "moe.router_sigmoid");
    vp_t locals[V3_CHOICE_LOCALS] = {0};
    if (v5) {
        *selected = choose_tracked(step, op, s, scores, n, locals);
    } else {
        vp_drop(sim, *logits);
        *logits = 0;
        *selected = choose(step, op, n);
    }
    vp_t weights = vp_gather(sim, scores, *selected, assignments, "moe.topk_gather");
    /* topk_weights /= topk_weights.sum(-1, keepdim=True) + 1e-20 */
    if (vp_op_flag(op, MOE_NORM_TOPK)) weights = renormalized(sim, weights, n);
    vp_t routing = vp_scale(sim, weights, "moe.routed_scaling");
    vp_drop(sim, weights);
    vp_drop(sim, scores);
    for (unsigned i = 0; i < V3_CHOICE_LOCALS; i++) vp_drop(sim, locals[i]);
    /* the choice's nodes die with their outputs, with what they saved */
    if (v5) vp_drop_dead_nodes(sim, first_node, sim->n_nodes);
    return routing;
}

vp_t vp_moe_v5_deepseek_v3_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *selected,
                                 vp_t *logits) {
    return v3_route(step, op, s, x, true, selected, logits);
}

/* DeepseekV3MoE.forward (transformers 4.51-4.52) in training: the router
 * (v3_route); moe(): an accumulator in the weights' dtype (fp32 unless
 * autocast made them 16-bit), one_hot, the expert loop, the result cast
 * back; the mask and accumulator go as moe() returns, before the shared
 * experts run on the layer's input. */
vp_t vp_moe_deepseek_v3(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), k = vp_op_u64(op, MOE_TOP_K);
    uint64_t assignments = vp_numel(sim, vp_at(sim, x)->numel / h, k);
    vp_t selected, logits;
    vp_t routing = v3_route(step, op, s, x, false, &selected, &logits);
    vp_t flat = vp_alias(sim, x, "moe.view");
    vp_t one_hot = expert_mask(step, op, assignments);
    loop_locals locals;
    vp_t accumulated = expert_loop(step, op, s, flat, routing, (vp_dtype)vp_at(sim, routing)->dtype, &locals);
    vp_t routed = vp_to(sim, accumulated, (vp_dtype)vp_at(sim, x)->dtype, "moe.final_hidden_states");
    /* moe() returns: its locals go; the name of the view is rebound */
    drop_loop_locals(sim, &locals);
    vp_drop(sim, one_hot);
    vp_drop(sim, accumulated);
    vp_drop(sim, flat);
    vp_t out = vp_moe_plus_shared(step, op, s->shared, x, routed);
    vp_drop(sim, routing);
    vp_drop(sim, selected);
    return out;
}
