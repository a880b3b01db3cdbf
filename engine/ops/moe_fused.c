/* moe_fused.c — transformers 5's mixtures: MixtralSparseMoeBlock,
 * Qwen3MoeSparseMoeBlock and Qwen2MoeSparseMoeBlock with a TopKRouter, and
 * DeepseekV3MoE and DeepseekV2Moe with their own, the experts held as two
 * 3-D parameters (integrations/moe.py's
 * @use_experts_implementation), run by the per-expert loop
 * (experts_implementation "eager") or by torch._grouped_mm ("grouped_mm").
 * Read from transformers' main of 2026 (models/mixtral, qwen3_moe and
 * qwen2_moe, the release whose models' forward carries @capture_outputs;
 * integrations/moe.py; DeepseekV3MoE and DeepseekV2Moe from
 * models/deepseek_v3 and deepseek_v2, the same release). */
#include "moe.h"

/* Qwen2-MoE's block is the one with a gated shared expert. */
static bool qwen2_block(const vp_op *op) { return vp_op_u64(op, MOE_SHARED) && vp_op_flag(op, MOE_SHARED_GATE); }

/* TopKRouter.forward: router_logits = F.linear(x, weight); an fp32
 * softmax; top-k, renormalized in place when asked (Mixtral always, the
 * Qwens by norm_topk_prob). Mixtral's and Qwen3-MoE's take the softmax of
 * router_logits.float() and keep the fp32 values as the routing weights;
 * Qwen2-MoE's takes softmax(router_logits, dtype=torch.float) and casts
 * the values to the logits' dtype. Returns the routing weights; *logits
 * and *selected get the logits and the int64 choices. */
static vp_t route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *logits, vp_t *selected) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), n = vp_at(sim, x)->numel / h;
    uint64_t assignments = vp_numel(sim, n, vp_op_u64(op, MOE_TOP_K));
    *logits = vp_project(step, x, *s->router, 0, vp_op_u64(op, MOE_EXPERTS), "moe.gate");
    vp_t probs;
    if (qwen2_block(op)) {
        probs = vp_moe_softmax_fp32(step, *logits, "moe.router_softmax");
    } else {
        vp_t up = vp_to(sim, *logits, VP_FP32, "moe.router_logits.float");
        probs = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, "moe.router_softmax");
        vp_drop(sim, up);
    }
    vp_t weights = vp_topk(sim, probs, assignments, selected, "moe.topk");
    vp_drop(sim, probs);
    if (vp_op_flag(op, MOE_NORM_TOPK)) weights = vp_moe_renormalize(sim, weights, n);
    if (!qwen2_block(op)) return weights;
    /* the name rebound to the cast: the fp32 values go unless it is a no-op */
    vp_t cast = vp_to(sim, weights, (vp_dtype)vp_at(sim, *logits)->dtype, "moe.router_top_value.to");
    vp_drop(sim, weights);
    return cast;
}

/* The experts' forward's locals the loop rebinds: torch.where's columns,
 * the expert's input rows, and current_hidden_states, whose last value
 * (the weighted output, not saved) lives until the next expert's
 * act_fn(gate) * up replaces it. */
typedef struct {
    vp_t top_k_pos, token_idx, state, gate, up, current;
} eager_locals;

/* Experts.forward (the eager loop): for each expert hit, its tokens by
 * torch.where, hidden_states[token_idx], F.linear with gate_up_proj[e] (a
 * select: its backward makes a zero-filled gradient of the whole 3-D
 * parameter, select_backward), chunk, act_fn(gate) * up, F.linear with
 * down_proj[e], times the routing weights (fp32: the product is promoted),
 * cast to the output's dtype and index_add_'ed into it. */
static vp_t eager_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_dtype dtype = (vp_dtype)vp_at(sim, x)->dtype;
    vp_t out = vp_new(sim, vp_at(sim, x)->numel, dtype, "moe.final_hidden_states"); /* zeros_like */
    /* under no_grad: one_hot [tokens, k, experts], its per-expert sum and
     * the > 0 mask gone once nonzero() has listed the experts hit */
    vp_t expert_mask = vp_new(sim, vp_numel(sim, assignments, experts), VP_INT64, "moe.expert_mask");
    vp_t hit_count = vp_new(sim, experts, VP_INT64, "moe.expert_mask.sum");
    vp_t hit_mask = vp_new(sim, experts, VP_BOOL, "moe.expert_mask.greater");
    vp_drop(sim, hit_count);
    unsigned hit = assignments < experts ? (unsigned)assignments : experts;
    vp_t expert_hit = vp_new(sim, hit, VP_INT64, "moe.expert_hit");
    vp_drop(sim, hit_mask);
    eager_locals l = {0};
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        if (!tokens) continue;
        vp_moe_where(sim, tokens, &l.top_k_pos, &l.token_idx);
        vp_moe_rebind(sim, &l.state, vp_index(sim, x, l.token_idx, vp_numel(sim, tokens, h), "moe.current_state"));
        vp_t w_gate_up = vp_slice(sim, *s->w1, vp_numel(sim, 2 * f, h), "moe.experts.gate_up_proj[e]");
        vp_t both = vp_project(step, l.state, w_gate_up, 0, 2 * f, "moe.experts.gate_up");
        vp_drop(sim, w_gate_up);
        vp_t halves[2];
        vp_split(sim, both, 2, halves, "moe.experts.chunk");
        vp_drop(sim, both);
        vp_moe_rebind(sim, &l.gate, halves[0]);
        vp_moe_rebind(sim, &l.up, halves[1]);
        vp_t act = vp_unary(sim, l.gate, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, l.gate)->dtype, "moe.experts.act");
        vp_t m = vp_mul(sim, act, l.up, vp_at(sim, act)->numel, "moe.experts.mul");
        vp_drop(sim, act);
        vp_moe_rebind(sim, &l.current, m);
        vp_t w_down = vp_slice(sim, *s->w2, vp_numel(sim, h, f), "moe.experts.down_proj[e]");
        vp_t o = vp_project(step, l.current, w_down, 0, h, "moe.experts.down");
        vp_drop(sim, w_down);
        vp_moe_rebind(sim, &l.current, o);
        vp_t w = vp_index_pair(sim, top_k_weights, l.token_idx, l.top_k_pos, tokens, "moe.routing_weight");
        vp_moe_rebind(sim, &l.current, vp_mul(sim, l.current, w, vp_at(sim, l.current)->numel, "moe.weighted"));
        vp_drop(sim, w);
        vp_t cast = vp_to(sim, l.current, dtype, "moe.weighted.to");
        vp_t next = vp_index_add(sim, out, cast, l.token_idx, true, "moe.index_add");
        vp_drop(sim, cast);
        vp_drop(sim, out);
        out = next;
    }
    vp_t *names[] = {&l.top_k_pos, &l.token_idx, &l.state, &l.gate, &l.up, &l.current};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) vp_moe_rebind(sim, names[i], 0);
    vp_drop(sim, expert_hit);
    vp_drop(sim, expert_mask);
    return out;
}

/* grouped_mm_experts_forward (integrations/moe.py, the release with
 * _grouped_linear and the deterministic sum): the rows gathered, the
 * assignments sorted by expert (argsort: a sort whose values go) and the
 * inverse permutation scattered from an arange, per-expert counts (histc
 * of a 4-byte copy, a local kept to the end) and their int32 offsets, two grouped GEMMs around
 * act_fn(gate) * up, the routing weights (fp32: the product is promoted),
 * the order restored, each token's k rows summed and cast back. */
static vp_t grouped_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS);
    uint64_t n = vp_at(sim, x)->numel / h, rows = vp_numel(sim, n, vp_op_u64(op, MOE_TOP_K));
    /* arange(tokens).unsqueeze(1).expand(-1, k).reshape(-1): a copy */
    vp_t arange = vp_new(sim, n, VP_INT64, "moe.arange");
    vp_t token_idx = vp_new(sim, rows, VP_INT64, "moe.token_idx");
    vp_drop(sim, arange);
    vp_t selected = vp_index(sim, x, token_idx, vp_numel(sim, rows, h), "moe.selected_hidden_states");
    vp_t values = vp_new(sim, rows, VP_INT64, "moe.argsort.values");
    vp_t perm = vp_new(sim, rows, VP_INT64, "moe.argsort");
    vp_drop(sim, values);
    vp_t inv_perm = vp_new(sim, rows, VP_INT64, "moe.inv_perm"); /* empty_like, then inv_perm[perm] = arange */
    vp_drop(sim, vp_new(sim, rows, VP_INT64, "moe.inv_perm.arange"));
    vp_t expert_ids_g = vp_new(sim, rows, VP_INT64, "moe.expert_ids_g");
    vp_t weights_g = vp_index(sim, top_k_weights, perm, rows, "moe.sample_weights_g");
    vp_t states_g = vp_index(sim, selected, perm, vp_numel(sim, rows, h), "moe.selected_hidden_states_g");
    /* float on CPU, int32 on CUDA; a local, held until the function returns */
    vp_t histc_input = vp_new(sim, rows, VP_FP32, "moe.histc_input");
    vp_t counts = vp_new(sim, experts, VP_FP32, "moe.tokens_per_expert");
    vp_t offsets = vp_new(sim, experts, VP_INT32, "moe.offsets");
    vp_t both = vp_grouped_mm(sim, states_g, *s->w1, offsets, rows, 2 * f, "moe.experts.grouped_mm.gate_up");
    vp_t halves[2];
    vp_split(sim, both, 2, halves, "moe.experts.chunk");
    vp_t act = vp_unary(sim, halves[0], VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, halves[0])->dtype, "moe.experts.act");
    vp_t gated = vp_mul(sim, act, halves[1], vp_at(sim, act)->numel, "moe.experts.mul");
    vp_drop(sim, act); /* _apply_gate returns: its locals go */
    vp_drop(sim, halves[0]);
    vp_drop(sim, halves[1]);
    vp_t o = vp_grouped_mm(sim, gated, *s->w2, offsets, rows, h, "moe.experts.grouped_mm.down");
    /* out_per_sample_g rebound to the product: the GEMM's output lives on where the product saved it */
    vp_t weighted = vp_mul(sim, o, weights_g, vp_at(sim, o)->numel, "moe.weighted");
    vp_drop(sim, o);
    vp_t restored = vp_index(sim, weighted, inv_perm, vp_at(sim, weighted)->numel, "moe.out_per_sample");
    vp_t summed = vp_sum_of_view(sim, restored, vp_at(sim, x)->numel, "moe.final_hidden_states");
    vp_t out = vp_to(sim, summed, (vp_dtype)vp_at(sim, x)->dtype, "moe.final_hidden_states.to");
    /* the function returns: its locals go */
    vp_t locals[] = {token_idx, selected, perm,    inv_perm, expert_ids_g, weights_g, states_g, histc_input,
                     counts,    offsets,  both,    gated,    weighted,     restored,  summed};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    return out;
}

/* The experts by experts_implementation; takes nothing over. */
static vp_t run_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    return vp_recipe_experts_impl(step->recipe) == VP_EXPERTS_GROUPED_MM ? grouped_experts(step, op, s, x, top_k_weights)
                                                                         : eager_experts(step, op, s, x, top_k_weights);
}

/* DeepseekV3MoE.forward and DeepseekV2Moe.forward of transformers 5:
 * residuals = hidden_states; the router's logits (a local to the end),
 * route_tokens_to_experts (moe_hf.c), the experts on a view of the input
 * (an autograd node of its own, as 4.x's), then hidden_states +
 * shared_experts(residuals). */
static vp_t deepseek_block(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t selected, logits;
    vp_t weights = vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V3
                       ? vp_moe_v5_deepseek_v3_route(step, op, s, x, &selected, &logits)
                       : vp_moe_v5_deepseek_v2_route(step, op, s, x, &selected, &logits);
    vp_t flat = vp_alias(sim, x, "moe.view");
    vp_t routed = run_experts(step, op, s, flat, weights);
    vp_drop(sim, flat); /* the name rebound to the experts' output */
    vp_t out = vp_moe_plus_shared(step, op, s->shared, x, routed);
    /* forward returns: router_logits, topk_indices, topk_weights go */
    vp_drop(sim, logits);
    vp_drop(sim, selected);
    vp_drop(sim, weights);
    return out;
}

vp_t vp_moe_fused(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    if (vp_op_u64(op, MOE_BLOCK) != MOE_BLOCK_MIXTRAL) return deepseek_block(step, op, s, x);
    /* Qwen2-MoE's block runs its shared expert first; its output waits
     * through the routed experts for the sigmoid gate */
    vp_t shared = qwen2_block(op) ? vp_moe_shared_mlp(step, op, s->shared, x) : 0;
    vp_t logits, selected;
    vp_t weights = route(step, op, s, x, &logits, &selected);
    vp_t out = run_experts(step, op, s, x, weights);
    if (shared) { /* expert_output = expert_output + sigmoid(shared_expert_gate(x)) * shared_expert_output */
        shared = vp_moe_shared_gated(step, op, s->shared, x, shared);
        vp_t sum = vp_add(sim, out, shared, vp_at(sim, out)->numel, "moe.add_shared");
        vp_drop(sim, out);
        out = sum;
    }
    /* the block returns: its locals go (`_, top_k_weights, top_k_index =
     * self.gate(...)`: the logits are one of them); output_router_logits
     * records the logits (OutputRecorder on the router's output 0) for the
     * load-balancing loss */
    vp_drop(sim, shared);
    vp_drop(sim, weights);
    vp_drop(sim, selected);
    if (vp_op_flag(op, MOE_ROUTER_LOGITS)) vp_step_keep_router_logits(step, logits);
    vp_drop(sim, logits);
    return out;
}
