/* op_moe.c — a mixture of experts in place of the MLP: a router picks
 * top_k of `experts` gated MLPs for every token, optionally beside shared
 * experts (DeepSeekMoE's and Qwen-MoE's). The plain-PyTorch path is HF's
 * MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock loop over experts; with
 * framework megatron it is Megatron-Core's MoELayer: permute, all-to-all
 * dispatch over expert-parallel ranks, grouped GEMMs, and back. */
#include <math.h>

#include "checkpoint.h"
#include "ops.h"

enum {
    MOE_HIDDEN,
    MOE_INTERMEDIATE,
    MOE_EXPERTS,
    MOE_TOP_K,
    MOE_SHARED,
    MOE_SHARED_GATE,
    MOE_NORM_TOPK,
    MOE_CAPACITY,
    MOE_FIELDS
};

static const vp_field moe_fields[MOE_FIELDS] = {
    [MOE_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
    [MOE_INTERMEDIATE] = {"intermediate", VP_FIELD_INT, true, 0, 1, 1 << 22, NULL, "each expert's inner width"},
    [MOE_EXPERTS] = {"experts", VP_FIELD_INT, true, 0, 1, 1 << 14, NULL, "routed experts"},
    [MOE_TOP_K] = {"top_k", VP_FIELD_INT, true, 0, 1, 1 << 10, NULL, "experts per token"},
    [MOE_SHARED] = {"shared_intermediate", VP_FIELD_INT, false, 0, 0, 1 << 22, NULL,
                    "inner width of the always-on shared experts (0: none)"},
    [MOE_SHARED_GATE] = {"shared_gate", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                         "a sigmoid gate on the shared experts' output (Qwen2-MoE)"},
    [MOE_NORM_TOPK] = {"norm_topk", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                       "renormalize the top-k routing weights (Mixtral; DeepSeekMoE and Qwen-MoE do not)"},
    [MOE_CAPACITY] = {"capacity_factor", VP_FIELD_NUMBER, false, 0, 0, 64, NULL,
                      "Megatron: tokens an expert takes, as a multiple of its even share (0: dropless)"},
};

static const char *moe_check(const vp_op *op) {
    if (vp_op_u64(op, MOE_TOP_K) > vp_op_u64(op, MOE_EXPERTS)) return "top_k cannot exceed experts";
    return NULL;
}

static const char *moe_check_tp(const vp_op *op, unsigned tp) {
    (void)tp;
    if (vp_op_u64(op, MOE_SHARED) % tp) return "tp: must divide the shared experts' intermediate width";
    return NULL;
}

enum { ROUTER, W1, W3, W2, SHARED_UP, SHARED_GATE_PROJ, SHARED_DOWN, SHARED_GATE, MOE_SPECS };

/* Experts are split over expert-parallel ranks, each one's width over
 * expert-tensor-parallel ranks; shared experts split like a dense MLP. */
static unsigned moe_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), e = vp_op_u64(op, MOE_EXPERTS);
    uint64_t f = vp_op_u64(op, MOE_INTERMEDIATE) / split->etp;
    uint64_t fs = vp_op_u64(op, MOE_SHARED) / split->tp;
    unsigned local = (unsigned)(e / split->ep);
    out[ROUTER] = (vp_leaf_spec){e * h, VP_DTYPE_NONE, true, false, "moe.gate.weight", 1, false};
    out[W1] = (vp_leaf_spec){f * h, VP_DTYPE_NONE, true, false, "moe.experts.w1", local, true};
    out[W3] = (vp_leaf_spec){f * h, VP_DTYPE_NONE, true, false, "moe.experts.w3", local, true};
    out[W2] = (vp_leaf_spec){h * f, VP_DTYPE_NONE, true, false, "moe.experts.w2", local, true};
    out[SHARED_UP] = (vp_leaf_spec){fs * h, VP_DTYPE_NONE, true, false, "moe.shared_expert.up_proj", 1, false};
    out[SHARED_GATE_PROJ] = (vp_leaf_spec){fs * h, VP_DTYPE_NONE, true, false, "moe.shared_expert.gate_proj", 1, false};
    out[SHARED_DOWN] = (vp_leaf_spec){h * fs, VP_DTYPE_NONE, true, false, "moe.shared_expert.down_proj", 1, false};
    out[SHARED_GATE] = (vp_leaf_spec){vp_op_flag(op, MOE_SHARED_GATE) ? h : 0, VP_DTYPE_NONE, true, false,
                                      "moe.shared_expert_gate", 1, false};
    return MOE_SPECS;
}

/* Slots of each spec within the op, given the rank's expert count. */
typedef struct {
    const vp_t *router, *w1, *w3, *w2, *shared;
} moe_slots;

static moe_slots slots_of(const vp_t *leaves, unsigned local) {
    moe_slots s;
    s.router = leaves;
    s.w1 = leaves + 1;
    s.w3 = s.w1 + local;
    s.w2 = s.w3 + local;
    s.shared = s.w2 + local; /* up, gate, down, gate weight */
    return s;
}

/* softmax(logits, dim=-1, dtype=torch.float32): fp32, and ATen converts a
 * 16-bit input first (SoftMax.cpp; fp16 on CUDA has its own kernel). */
static vp_t softmax_fp32(vp_step *step, vp_t logits, const char *label) {
    vp_sim *sim = &step->sim;
    vp_dtype dt = (vp_dtype)vp_at(sim, logits)->dtype;
    if (dt == VP_FP32 || (dt == VP_FP16 && step->recipe->device == VP_DEVICE_CUDA))
        return vp_unary(sim, logits, VP_SAVES_OUTPUT, 0, VP_FP32, label);
    vp_t up = vp_to(sim, logits, VP_FP32, label);
    vp_t p = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, label);
    vp_drop(sim, up);
    return p;
}

/* The tokens expert e gets out of n assignments (an even routing; the sum
 * over experts is exact whatever the routing, the share of one is not). */
static uint64_t share(uint64_t n, unsigned experts, unsigned e) { return n / experts + (e < n % experts); }

/* HF's expert MLP: w2(act_fn(w1(x)) * w3(x)) */
static vp_t expert(vp_step *step, vp_t x, vp_t w1, vp_t w3, vp_t w2, uint64_t f, uint64_t h) {
    vp_sim *sim = &step->sim;
    vp_t g = vp_project(step, x, w1, 0, f, "moe.expert.w1");
    vp_t a = vp_unary(sim, g, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, g)->dtype, "moe.expert.silu");
    vp_drop(sim, g);
    vp_t u = vp_project(step, x, w3, 0, f, "moe.expert.w3");
    vp_t m = vp_mul(sim, a, u, vp_at(sim, u)->numel, "moe.expert.mul");
    vp_drop(sim, a);
    vp_drop(sim, u);
    vp_t o = vp_project(step, m, w2, 0, h, "moe.expert.w2");
    vp_drop(sim, m);
    return o;
}

/* The shared experts: a gated MLP on every token, optionally scaled by a
 * sigmoid gate (Qwen2MoeSparseMoeBlock). */
static vp_t shared_experts(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), fs = vp_split_tp(step, vp_op_u64(op, MOE_SHARED));
    vp_t g = vp_project_column(step, x, shared[1], 0, fs, "moe.shared.gate_proj");
    vp_t a = vp_unary(sim, g, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, g)->dtype, "moe.shared.silu");
    vp_drop(sim, g);
    vp_t u = vp_project_column(step, x, shared[0], 0, fs, "moe.shared.up_proj");
    vp_t m = vp_mul(sim, a, u, vp_at(sim, u)->numel, "moe.shared.mul");
    vp_drop(sim, a);
    vp_drop(sim, u);
    vp_t o = vp_project_row(step, m, shared[2], 0, h, "moe.shared.down_proj");
    vp_drop(sim, m);
    if (!vp_op_flag(op, MOE_SHARED_GATE)) return o;
    vp_t logit = vp_project(step, x, shared[3], 0, 1, "moe.shared_expert_gate");
    vp_t gate = vp_unary(sim, logit, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, logit)->dtype, "moe.shared.sigmoid");
    vp_drop(sim, logit);
    vp_t scaled = vp_mul(sim, gate, o, vp_at(sim, o)->numel, "moe.shared.gate_mul");
    vp_drop(sim, gate);
    vp_drop(sim, o);
    return scaled;
}

/* The routed experts' output plus the shared experts' (none: as it is). */
static vp_t plus_shared_experts(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x, vp_t routed) {
    if (!vp_op_u64(op, MOE_SHARED)) return routed;
    vp_sim *sim = &step->sim;
    vp_t y = shared_experts(step, op, shared, x);
    vp_t sum = vp_add(sim, routed, y, vp_at(sim, routed)->numel, "moe.add_shared");
    vp_drop(sim, y);
    vp_drop(sim, routed);
    return sum;
}

/* transformers' MixtralSparseMoeBlock.forward (Qwen2-MoE alike): router
 * logits, an fp32 softmax, top-k (renormalized for Mixtral) cast back,
 * one_hot(selected_experts) as int64 [tokens, k, experts], then for every
 * expert: torch.where for its tokens, hidden_states[None, top_x] (a copy
 * its MLP keeps), the expert MLP, times its routing weights, index_add_
 * into the zero-initialized output. */
static vp_t moe_hf(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    uint64_t n = vp_at(sim, x)->numel / h, assignments = vp_numel(sim, n, k);
    vp_t logits = vp_project(step, x, *s->router, 0, experts, "moe.gate");
    vp_t probs = softmax_fp32(step, logits, "moe.router_softmax");
    vp_t selected;
    vp_t weights = vp_topk(sim, probs, assignments, &selected, "moe.topk");
    if (vp_op_flag(op, MOE_NORM_TOPK)) { /* routing_weights /= routing_weights.sum(dim=-1, keepdim=True) */
        vp_t sum = vp_reduce(sim, weights, n, "moe.topk_sum");
        vp_t normed = vp_mul(sim, weights, sum, assignments, "moe.topk_norm");
        vp_drop(sim, sum);
        vp_drop(sim, weights);
        weights = normed;
    }
    /* the name is rebound to the cast: the fp32 values go unless the cast is a no-op */
    vp_t routing = vp_to(sim, weights, (vp_dtype)vp_at(sim, x)->dtype, "moe.routing_weights");
    vp_drop(sim, weights);
    vp_t out = vp_new(sim, vp_at(sim, x)->numel, (vp_dtype)vp_at(sim, x)->dtype, "moe.final_hidden_states");
    vp_t one_hot = vp_new(sim, vp_numel(sim, assignments, experts), VP_INT64, "moe.expert_mask");
    for (unsigned e = 0; e < experts; e++) {
        uint64_t tokens = share(assignments, experts, e);
        if (!tokens) continue;
        /* torch.where(mask) is nonzero(as_tuple=True): one [tokens, 2] int64
         * tensor whose columns idx and top_x are views */
        vp_t hits = vp_new(sim, vp_numel(sim, tokens, 2), VP_INT64, "moe.where");
        vp_t which = vp_view(sim, hits, tokens, "moe.where.idx"), top_x = vp_view(sim, hits, tokens, "moe.where.top_x");
        vp_drop(sim, hits);
        vp_t state = vp_index(sim, x, top_x, vp_numel(sim, tokens, h), "moe.current_state");
        vp_t y = expert(step, state, s->w1[e], s->w3[e], s->w2[e], f, h);
        vp_drop(sim, state);
        vp_t w = vp_index(sim, routing, which, tokens, "moe.routing_weight");
        vp_t weighted = vp_mul(sim, y, w, vp_at(sim, y)->numel, "moe.weighted");
        vp_drop(sim, y);
        vp_drop(sim, w);
        vp_t next = vp_index_add(sim, out, weighted, top_x, true, "moe.index_add");
        vp_drop(sim, weighted);
        vp_drop(sim, out);
        out = next;
        vp_drop(sim, which);
        vp_drop(sim, top_x);
    }
    out = plus_shared_experts(step, op, s->shared, x, out);
    vp_drop(sim, one_hot);
    vp_drop(sim, routing);
    vp_drop(sim, selected);
    vp_drop(sim, probs);
    vp_drop(sim, logits); /* router_logits leave with the layer's outputs */
    return out;
}

/* Megatron-Core's MoELayer (megatron/core/transformer/moe): TopKRouter
 * (fp32 softmax, top-k), the token dispatcher's permute (index_select into
 * tokens x top_k rows, or capacity-padded), an all-to-all to the experts'
 * ranks and back, grouped GEMMs (fc1 with gate and up side by side, the
 * fused swiglu keeping fc1's output), and the unpermute that weighs by the
 * routing probabilities and scatters back. With an even routing each rank
 * receives as many rows as it sends. */
static vp_t moe_megatron(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), f = vp_op_u64(op, MOE_INTERMEDIATE);
    unsigned experts = (unsigned)vp_op_u64(op, MOE_EXPERTS), k = (unsigned)vp_op_u64(op, MOE_TOP_K);
    unsigned local = experts / step->ep;
    uint64_t n = vp_at(sim, x)->numel / h, rows = vp_numel(sim, n, k);
    double capacity = op->value[MOE_CAPACITY];
    if (capacity > 0) rows = (uint64_t)ceil(capacity * (double)rows);
    vp_t logits = vp_project(step, x, *s->router, 0, experts, "moe.router");
    vp_t probs = softmax_fp32(step, logits, "moe.router_softmax");
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
    out = plus_shared_experts(step, op, s->shared, x, out);
    return out;
}

static vp_t moe_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    unsigned local = (unsigned)(vp_op_u64(op, MOE_EXPERTS) / step->ep);
    moe_slots s = slots_of(leaves, local);
    if (step->recipe->framework == VP_FRAMEWORK_MEGATRON) return moe_megatron(step, op, &s, x);
    return moe_hf(step, op, &s, x);
}

static const char *moe_check_ep(const vp_op *op, const vp_ranks *split) {
    if (vp_op_u64(op, MOE_EXPERTS) % split->ep) return "ep: must divide the experts";
    if (vp_op_u64(op, MOE_INTERMEDIATE) % split->etp) return "etp: must divide each expert's intermediate width";
    return NULL;
}

const vp_op_kind vp_op_moe = {
    .name = "moe",
    .doc = "a mixture of gated-MLP experts with a top-k router, optionally with shared experts",
    .fields = moe_fields,
    .n_fields = MOE_FIELDS,
    .check = moe_check,
    .check_tp = moe_check_tp,
    .check_ep = moe_check_ep,
    .leaves = moe_leaves,
    .forward = moe_forward,
};
