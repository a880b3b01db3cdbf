/* moe_fused.c — transformers 5's mixtures: MixtralSparseMoeBlock,
 * Qwen3MoeSparseMoeBlock and Qwen2MoeSparseMoeBlock with a TopKRouter,
 * DeepseekV3MoE and DeepseekV2Moe with their own, and GptOssMLP (biases,
 * its own gate; models/gpt_oss/modular_gpt_oss.py), the experts held as two
 * 3-D parameters (integrations/moe.py's
 * @use_experts_implementation), run by the per-expert loop
 * (experts_implementation "eager") or by torch._grouped_mm ("grouped_mm").
 * Read from transformers' main of 2026 (models/mixtral, qwen3_moe and
 * qwen2_moe, the release whose models' forward carries @capture_outputs;
 * integrations/moe.py; DeepseekV3MoE and DeepseekV2Moe from
 * models/deepseek_v3 and deepseek_v2, the same release). */
#include "moe.h"

#include "lora.h"
#include "op_context.h"

/* PEFT's lora.ParamWrapper (peft/tuners/lora/layer.py, main of 2026) around
 * the experts module, one for each 3-D parameter target_parameters names,
 * nested in the order the module registers them: down_proj's wraps
 * gate_up_proj's (_inject_parameters walks named_parameters). Each one's
 * _activate_lora makes get_delta_weight's update, registers a
 * parametrization W + delta (torch.nn.utils.parametrize, whose
 * ParametrizationList checks it by computing it once) and runs the inner
 * module under parametrize.cached(): the first read of the parameter makes
 * W + delta, kept in the cache until the outermost cached() exits and by
 * what autograd saves of it. */
enum { GATE_UP, DOWN };
struct moe_param_wrappers {
    const vp_lora_adapter *adapter[2]; /* gate_up_proj's, down_proj's (NULL: not wrapped) */
    vp_t delta[2], effective[2];
};

/* The experts' 3-D parameter itself: gate_up_proj or down_proj. */
static vp_t experts_param(const moe_slots *s, unsigned which) { return which == GATE_UP ? *s->w1 : *s->w2; }

/* The experts' parameter as their forward reads it: the parameter, or W +
 * delta (made at the first read; the wrapper keeps the reference). */
static vp_t experts_weight(vp_step *step, const moe_slots *s, unsigned which) {
    struct moe_param_wrappers *p = s->wrapped;
    vp_t w = experts_param(s, which);
    if (!p || !p->adapter[which]) return w;
    if (!p->effective[which])
        p->effective[which] = vp_add(&step->sim, w, p->delta[which], vp_at(&step->sim, w)->numel,
                                     "lora.parametrized_weight");
    return p->effective[which];
}

/* get_delta_weight with several experts: lora_A's weight viewed [experts,
 * r, in], lora_B's [out, r, experts], and torch.einsum("o r e, e r i ->
 * e i o") (GPT-OSS's transposed layout; "e o i" for the others), which
 * ATen runs as one bmm of B permuted to [experts, out, r] by A [experts,
 * r, in] (sumproduct_pair): under autocast its operands cast (views: not
 * cached) and saved; the permuted operand copied for the GEMM (CUDA's bmm
 * clones it whole, prepare_batch_matrix_for_cublas; the CPU's one
 * expert's slice at a time); the product [experts, out, in] viewed in the
 * weight's layout. Then times scaling (a new tensor, the product gone) and
 * .to(weight's dtype) where it differs. Returns delta_weight. */
static vp_t param_delta(vp_step *step, const vp_lora_adapter *ad, vp_t w) {
    vp_sim *sim = &step->sim;
    uint64_t r = step->recipe->lora_rank, e = ad->experts;
    vp_t b_view = vp_alias(sim, ad->b, "lora.param_B.reshape");
    vp_t a_view = vp_alias(sim, ad->a, "lora.param_A.reshape");
    vp_t left = vp_autocast_low(step, b_view, "lora.param_B.cast");
    vp_t right = vp_autocast_low(step, a_view, "lora.param_A.cast");
    vp_drop(sim, b_view);
    vp_drop(sim, a_view);
    vp_t product = vp_matmul(sim, left, right, vp_numel3(sim, e, ad->out_features, ad->in_features), false,
                             "lora.param_delta");
    bool cuda = step->recipe->device == VP_DEVICE_CUDA;
    uint64_t copied = cuda ? vp_numel3(sim, e, ad->out_features, r) : vp_numel(sim, ad->out_features, r);
    vp_drop(sim, vp_new(sim, copied, (vp_dtype)vp_at(sim, left)->dtype, "lora.param_delta.contiguous"));
    vp_drop(sim, left);
    vp_drop(sim, right);
    vp_t scaled = vp_scale(sim, product, "lora.param_scaling");
    vp_drop(sim, product);
    vp_dtype dtype = (vp_dtype)vp_at(sim, w)->dtype;
    if (vp_at(sim, scaled)->dtype == dtype) return scaled;
    vp_t cast = vp_to(sim, scaled, dtype, "lora.param_delta.to");
    vp_drop(sim, scaled);
    return cast;
}

/* The wrappers' _activate_lora, outermost first: each one's update, and
 * register_parametrization's check of W + delta, made and dropped. */
static void wrappers_enter(vp_step *step, const moe_slots *s, struct moe_param_wrappers *p) {
    vp_sim *sim = &step->sim;
    for (int which = DOWN; which >= GATE_UP; which--) {
        if (!p->adapter[which]) continue;
        vp_t w = experts_param(s, (unsigned)which);
        p->delta[which] = param_delta(step, p->adapter[which], w);
        vp_drop(sim, vp_add(sim, w, p->delta[which], vp_at(sim, w)->numel, "lora.parametrization_check"));
    }
}

/* ... and their exits, innermost first: each removes its parametrization
 * (its update goes with the proxy module holding it); the outermost's
 * cached() exits first, clearing the cache of both W + delta. */
static void wrappers_exit(vp_step *step, struct moe_param_wrappers *p) {
    vp_sim *sim = &step->sim;
    int outermost = p->adapter[DOWN] ? DOWN : GATE_UP;
    for (int which = GATE_UP; which <= DOWN; which++) {
        if (!p->adapter[which]) continue;
        if (which == outermost) {
            vp_drop(sim, p->effective[GATE_UP]);
            vp_drop(sim, p->effective[DOWN]);
        }
        vp_drop(sim, p->delta[which]);
    }
}

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

/* The eager loop's start, under no_grad: one_hot [tokens, k, experts], its
 * per-expert sum and the > 0 mask gone once nonzero() has listed the
 * experts hit; *expert_mask and *expert_hit get the two that stay. */
static void experts_hit(vp_sim *sim, uint64_t assignments, unsigned experts, vp_t *expert_mask, vp_t *expert_hit) {
    *expert_mask = vp_new(sim, vp_numel(sim, assignments, experts), VP_INT64, "moe.expert_mask");
    vp_t hit_count = vp_new(sim, experts, VP_INT64, "moe.expert_mask.sum");
    vp_t hit_mask = vp_new(sim, experts, VP_BOOL, "moe.expert_mask.greater");
    vp_drop(sim, hit_count);
    unsigned hit = assignments < experts ? (unsigned)assignments : experts;
    *expert_hit = vp_new(sim, hit, VP_INT64, "moe.expert_hit");
    vp_drop(sim, hit_mask);
}

/* The loop body's end: current * top_k_weights[token_idx, top_k_pos, None]
 * (fp32 weights promote the product), bound to `weighted` (current itself
 * where the code rebinds that name), cast to the output's dtype and
 * index_add_'ed into it. Takes over out; returns it. */
static vp_t weigh_and_add(vp_sim *sim, vp_t out, vp_t top_k_weights, vp_t token_idx, vp_t top_k_pos, uint64_t tokens,
                          vp_t *current, vp_t *weighted) {
    vp_t w = vp_index_pair(sim, top_k_weights, token_idx, top_k_pos, tokens, "moe.routing_weight");
    vp_moe_rebind(sim, weighted, vp_mul(sim, *current, w, vp_at(sim, *current)->numel, "moe.weighted"));
    vp_drop(sim, w);
    vp_t cast = vp_to(sim, *weighted, (vp_dtype)vp_at(sim, out)->dtype, "moe.weighted.to");
    vp_t next = vp_index_add(sim, out, cast, token_idx, true, "moe.index_add");
    vp_drop(sim, cast);
    vp_drop(sim, out);
    return next;
}

/* GptOssExperts._apply_gate(gate_up): gate_up[..., ::2] and [..., 1::2]
 * (strided views: each one's backward a zero-filled gradient of all of
 * gate_up), gate.clamp(max=7.0) and up.clamp(-7.0, 7.0) (each keeping its
 * view, so gate_up with it), gate * sigmoid(gate * 1.702) (the scaled
 * gate a temporary, sigmoid keeping its output, the product both
 * operands), (up + 1) * glu (the sum a temporary the product keeps); the
 * method's locals go as it returns. Returns gated_output. */
static vp_t gpt_oss_gate(vp_sim *sim, vp_t gate_up) {
    uint64_t half = vp_at(sim, gate_up)->numel / 2;
    vp_t gate_view = vp_slice_columns(sim, gate_up, half, 0, "moe.experts.gate");
    vp_t up_view = vp_slice_columns(sim, gate_up, half, 1, "moe.experts.up");
    vp_t gate = vp_clamp_bounds(sim, gate_view, 1, "moe.experts.gate.clamp");
    vp_drop(sim, gate_view);
    vp_t up = vp_clamp_bounds(sim, up_view, 2, "moe.experts.up.clamp");
    vp_drop(sim, up_view);
    vp_t scaled = vp_scale(sim, gate, "moe.experts.gate_alpha");
    vp_t sigmoid = vp_unary(sim, scaled, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, scaled)->dtype, "moe.experts.sigmoid");
    vp_drop(sim, scaled);
    vp_t glu = vp_mul(sim, gate, sigmoid, half, "moe.experts.glu");
    vp_drop(sim, sigmoid);
    vp_t up_plus = vp_shift(sim, up, (vp_dtype)vp_at(sim, up)->dtype, half, "moe.experts.up_plus_one");
    vp_t gated = vp_mul(sim, up_plus, glu, half, "moe.experts.gated");
    vp_drop(sim, up_plus);
    vp_drop(sim, glu);
    vp_drop(sim, up);
    vp_drop(sim, gate);
    return gated;
}

/* x @ w[e] + b[e] of GPT-OSS's experts: the weight's and the bias's
 * select views (each one's backward a zero-filled gradient of the whole
 * 3-D parameter), the product, the sum (in the promoted dtype: an fp32
 * bias makes autocast's 16-bit product fp32). */
static vp_t expert_linear(vp_step *step, vp_t x, vp_t w, vp_t b, unsigned e, uint64_t in, uint64_t out,
                          const char *label, const char *bias_label) {
    vp_sim *sim = &step->sim;
    uint64_t numel = vp_numel(sim, in, out);
    vp_t w_e = vp_slice_rows(sim, w, numel, vp_numel(sim, e, numel), label);
    /* x @ w[e]: the [in, out] matrix taken as it is, not a Linear's
     * weight.t() (what matmul saves for x's gradient is the view itself) */
    vp_at(sim, w_e)->conv1d = true;
    vp_t product = vp_project(step, x, w_e, 0, out, label);
    vp_drop(sim, w_e);
    vp_t b_e = vp_slice(sim, b, out, bias_label);
    vp_t sum = vp_add(sim, product, b_e, vp_at(sim, product)->numel, bias_label);
    vp_drop(sim, b_e);
    vp_drop(sim, product);
    return sum;
}

/* GptOssExperts.forward (the eager loop of transformers 5; the training
 * path of 4.55-4.57 alike): for each expert hit, torch.where, the rows,
 * current_state @ gate_up_proj[e] + gate_up_proj_bias[e], _apply_gate,
 * gated_output @ down_proj[e] + down_proj_bias[e], weighted and
 * index_add_'ed; each name rebound by the next iteration, the last ones
 * going as the function returns. */
static vp_t gpt_oss_eager_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t out = vp_new(sim, vp_at(sim, x)->numel, (vp_dtype)vp_at(sim, x)->dtype, "moe.next_states"); /* zeros_like */
    vp_t expert_mask, expert_hit;
    experts_hit(sim, assignments, experts, &expert_mask, &expert_hit);
    /* (out and weighted_output are two names: the expert's output lives to
     * the next iteration's, beside its weighted copy) */
    vp_t top_k_pos = 0, token_idx = 0, state = 0, gate_up = 0, gated = 0, current = 0, weighted = 0;
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        if (!tokens) continue;
        vp_moe_where(sim, tokens, &top_k_pos, &token_idx);
        vp_moe_rebind(sim, &state, vp_index(sim, x, token_idx, vp_numel(sim, tokens, h), "moe.current_state"));
        vp_moe_rebind(sim, &gate_up, expert_linear(step, state, experts_weight(step, s, GATE_UP), *s->w1_bias, e, h, 2 * f,
                                                   "moe.experts.gate_up_proj[e]", "moe.experts.gate_up_proj_bias[e]"));
        vp_moe_rebind(sim, &gated, gpt_oss_gate(sim, gate_up));
        vp_moe_rebind(sim, &current, expert_linear(step, gated, experts_weight(step, s, DOWN), *s->w2_bias, e, f, h,
                                                   "moe.experts.down_proj[e]",
                                                   "moe.experts.down_proj_bias[e]"));
        out = weigh_and_add(sim, out, top_k_weights, token_idx, top_k_pos, tokens, &current, &weighted);
    }
    vp_t *names[] = {&top_k_pos, &token_idx, &state, &gate_up, &gated, &current, &weighted};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) vp_moe_rebind(sim, names[i], 0);
    vp_drop(sim, expert_hit);
    vp_drop(sim, expert_mask);
    return out;
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
    vp_t expert_mask, expert_hit;
    experts_hit(sim, assignments, experts, &expert_mask, &expert_hit);
    eager_locals l = {0};
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = vp_moe_share(assignments, experts, e);
        if (!tokens) continue;
        vp_moe_where(sim, tokens, &l.top_k_pos, &l.token_idx);
        vp_moe_rebind(sim, &l.state, vp_index(sim, x, l.token_idx, vp_numel(sim, tokens, h), "moe.current_state"));
        uint64_t gate_up_numel = vp_numel(sim, 2 * f, h), down_numel = vp_numel(sim, h, f);
        vp_t w_gate_up = vp_slice_rows(sim, experts_weight(step, s, GATE_UP), gate_up_numel,
                                       vp_numel(sim, e, gate_up_numel), "moe.experts.gate_up_proj[e]");
        vp_t both = vp_project(step, l.state, w_gate_up, 0, 2 * f, "moe.experts.gate_up");
        vp_drop(sim, w_gate_up);
        vp_t halves[2];
        vp_split_columns(sim, both, 2, halves, "moe.experts.chunk");
        vp_drop(sim, both);
        vp_moe_rebind(sim, &l.gate, halves[0]);
        vp_moe_rebind(sim, &l.up, halves[1]);
        vp_t act = vp_unary(sim, l.gate, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, l.gate)->dtype, "moe.experts.act");
        vp_t m = vp_mul(sim, act, l.up, vp_at(sim, act)->numel, "moe.experts.mul");
        vp_drop(sim, act);
        vp_moe_rebind(sim, &l.current, m);
        vp_t w_down = vp_slice_rows(sim, experts_weight(step, s, DOWN), down_numel, vp_numel(sim, e, down_numel),
                                    "moe.experts.down_proj[e]");
        vp_t o = vp_project(step, l.current, w_down, 0, h, "moe.experts.down");
        vp_drop(sim, w_down);
        vp_moe_rebind(sim, &l.current, o);
        out = weigh_and_add(sim, out, top_k_weights, l.token_idx, l.top_k_pos, tokens, &l.current, &l.current);
    }
    vp_t *names[] = {&l.top_k_pos, &l.token_idx, &l.state, &l.gate, &l.up, &l.current};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) vp_moe_rebind(sim, names[i], 0);
    vp_drop(sim, expert_hit);
    vp_drop(sim, expert_mask);
    return out;
}

/* _default_apply_gate: gate, up = chunk(2) (views), act_fn(gate) * up;
 * its locals go as it returns. */
static vp_t default_gate(vp_sim *sim, vp_t both) {
    vp_t halves[2];
    vp_split_columns(sim, both, 2, halves, "moe.experts.chunk");
    vp_t act = vp_unary(sim, halves[0], VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, halves[0])->dtype, "moe.experts.act");
    vp_t gated = vp_mul(sim, act, halves[1], vp_at(sim, act)->numel, "moe.experts.mul");
    vp_drop(sim, act);
    vp_drop(sim, halves[0]);
    vp_drop(sim, halves[1]);
    return gated;
}

/* _grouped_linear: the grouped GEMM, then `out = out + bias` with the rows'
 * gathered biases (a new tensor; the GEMM's output goes with the name). */
/* _grouped_linear(..., is_transposed): `w_transposed` for weights [experts,
 * out, in], handed over transposed; GPT-OSS's are [experts, in, out] and go
 * as they are */
static vp_t grouped_linear(vp_sim *sim, vp_t x, vp_t w, bool w_transposed, vp_t offsets, vp_t bias, uint64_t rows,
                           uint64_t out_features, const char *label) {
    vp_t out = vp_grouped_mm(sim, x, w, w_transposed, offsets, rows, out_features, label);
    if (!bias) return out;
    vp_t sum = vp_add(sim, out, bias, vp_at(sim, out)->numel, label);
    vp_drop(sim, out);
    return sum;
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
    /* has_bias (GPT-OSS): each row's expert's biases gathered,
     * gate_up_proj_bias[expert_ids_g] and down_proj_bias[expert_ids_g] */
    bool biased = vp_moe_gpt_oss(op);
    vp_t gate_up_bias = biased ? vp_index(sim, *s->w1_bias, expert_ids_g, vp_numel(sim, rows, 2 * f),
                                          "moe.selected_gate_up_bias")
                               : 0;
    vp_t down_bias = biased ? vp_index(sim, *s->w2_bias, expert_ids_g, vp_numel(sim, rows, h), "moe.selected_down_bias")
                            : 0;
    /* float on CPU, int32 on CUDA; a local, held until the function returns */
    vp_t histc_input = vp_new(sim, rows, VP_FP32, "moe.histc_input");
    vp_t counts = vp_new(sim, experts, VP_FP32, "moe.tokens_per_expert");
    vp_t offsets = vp_new(sim, experts, VP_INT32, "moe.offsets");
    vp_t both = grouped_linear(sim, states_g, experts_weight(step, s, GATE_UP), !biased, offsets, gate_up_bias, rows,
                               2 * f, "moe.experts.grouped_mm.gate_up");
    vp_t gated = biased ? gpt_oss_gate(sim, both) : default_gate(sim, both);
    vp_t o = grouped_linear(sim, gated, experts_weight(step, s, DOWN), !biased, offsets, down_bias, rows, h,
                            "moe.experts.grouped_mm.down");
    /* out_per_sample_g rebound to the product: the GEMM's output lives on where the product saved it */
    vp_t weighted = vp_mul(sim, o, weights_g, vp_at(sim, o)->numel, "moe.weighted");
    vp_drop(sim, o);
    vp_t restored = vp_index(sim, weighted, inv_perm, vp_at(sim, weighted)->numel, "moe.out_per_sample");
    vp_t summed = vp_sum_of_view(sim, restored, vp_at(sim, x)->numel, "moe.final_hidden_states");
    vp_t out = vp_to(sim, summed, (vp_dtype)vp_at(sim, x)->dtype, "moe.final_hidden_states.to");
    /* the function returns: its locals go */
    vp_t locals[] = {token_idx, selected, perm,  inv_perm, expert_ids_g, weights_g, states_g,
                     gate_up_bias, down_bias, histc_input, counts, offsets, both, gated, weighted, restored, summed};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    return out;
}

/* LigerExperts.forward (src/liger_kernel/transformers/swiglu.py), bound to
 * the experts module by Liger's patch under transformers 5: the indices as
 * int32 (a copy, a local), LigerFusedMoEFunction on the rows, the 3-D
 * weights and the routing weights; experts_implementation is bypassed. */
static vp_t liger_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t index32 = vp_new(sim, assignments, VP_INT32, "moe.liger.top_k_index");
    uint64_t tiles = 0; /* an even routing's rows per expert, in tiles */
    for (unsigned e = 0; e < experts; e++)
        tiles += (vp_moe_share(assignments, experts, e) + VP_LIGER_MOE_TILE_ROWS - 1) / VP_LIGER_MOE_TILE_ROWS;
    vp_t out = vp_liger_fused_moe(sim, x, *s->w1, *s->w2, top_k_weights, n, k, experts, f, h, tiles,
                                  "moe.liger_fused_moe");
    vp_drop(sim, index32);
    return out;
}

/* The experts by experts_implementation; takes nothing over. */
static vp_t experts_forward(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    if (step->recipe->liger_swiglu && vp_op_flag(op, MOE_LIGER)) return liger_experts(step, op, s, x, top_k_weights);
    if (vp_recipe_experts_impl(step->recipe) == VP_EXPERTS_GROUPED_MM) return grouped_experts(step, op, s, x, top_k_weights);
    return vp_moe_gpt_oss(op) ? gpt_oss_eager_experts(step, op, s, x, top_k_weights)
                              : eager_experts(step, op, s, x, top_k_weights);
}

/* The experts module called: inside PEFT's ParamWrappers where
 * target_parameters name its parameters. */
static vp_t run_experts(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t top_k_weights) {
    struct moe_param_wrappers p = {{vp_step_adapter(step, *s->w1), vp_step_adapter(step, *s->w2)}, {0, 0}, {0, 0}};
    if (!p.adapter[GATE_UP] && !p.adapter[DOWN]) return experts_forward(step, op, s, x, top_k_weights);
    moe_slots wrapped = *s;
    wrapped.wrapped = &p;
    wrappers_enter(step, s, &p);
    vp_t out = experts_forward(step, op, &wrapped, x, top_k_weights);
    wrappers_exit(step, &p);
    return out;
}

/* GptOssTopKRouter.forward: router_logits = F.linear(x, weight, bias);
 * the top-k of the logits themselves (values and int64 indices); softmax
 * over the k values with their own dtype (autocast leaves a softmax with
 * a dtype alone), the values going as it returns. Returns the scores
 * [tokens, k]; *logits and *selected get the logits and indices. */
static vp_t gpt_oss_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *logits, vp_t *selected) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel / vp_op_u64(op, MOE_HIDDEN);
    *logits = vp_project(step, x, *s->router, *s->router_bias, vp_op_u64(op, MOE_EXPERTS), "moe.router");
    vp_t top = vp_topk(sim, *logits, vp_numel(sim, n, vp_op_u64(op, MOE_TOP_K)), selected, "moe.topk");
    vp_t scores = vp_unary(sim, top, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, top)->dtype, "moe.router_softmax");
    vp_drop(sim, top);
    return scores;
}

/* GptOssMLP.forward (transformers 5): the input viewed as rows, the
 * router, the experts; `_` (the logits) and the indices go as it returns.
 * GptOssDecoderLayer binds its attention's weights and then the router
 * scores to one name (`hidden_states, _ = self.self_attn(...)`, then
 * `hidden_states, _ = self.mlp(...)`): the scores take the weights' place
 * among the layer's locals before the residual add. */
static vp_t gpt_oss_block(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t logits, selected;
    vp_t scores = gpt_oss_route(step, op, s, x, &logits, &selected);
    vp_t out = run_experts(step, op, s, x, scores);
    vp_drop(sim, logits);
    vp_drop(sim, selected);
    vp_step_rebind_layer_local(step, scores);
    vp_drop(sim, scores);
    return out;
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
    if (vp_moe_gpt_oss(op)) return gpt_oss_block(step, op, s, x);
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
