/* sdpa_math.c — _scaled_dot_product_attention_math (PyTorch 2.1-2.x,
 * aten/src/ATen/native/transformers/attention.cpp), causal, without a mask
 * or dropout, as SDPA runs it when the fused kernels refuse the inputs:
 * key and value heads fewer than the query heads, which they take only
 * with enable_gqa (sdp_utils.cpp, check_batch_size_and_num_heads_dense);
 * FalconAttention passes one key head for all. SDPA is on autocast's
 * lower-precision list: q, k and v are cast first, and its ops run in that
 * dtype. Line by line:
 *   query = query_ * sqrt(scale)                       a new tensor
 *   mask = ones(L, S, bool).tril()                     then, made additive,
 *   new = zeros_like(mask, q.dtype); new.masked_fill_(mask.logical_not(), -inf)
 *   attn = matmul(query, key.transpose(-2, -1) * sqrt(scale))
 *   attn.add_(mask); attn = softmax(attn, -1); return matmul(attn, value)
 * matmul broadcasts the key and value heads (expand, then the batch fold's
 * reshape: a copy with several sequences, a view with one). With
 * enable_gqa (PyTorch 2.5+), pre_process_group_query_attention_input first
 * repeats them to every query head (repeat_interleave: copies, kept as the
 * function's locals), which the matmuls then take as they are. */
#include "sdpa_math.h"

#include "ops.h"

/* matmul's batch fold of an operand: a view with one sequence or a
 * contiguous operand, else a copy */
static vp_t folded(vp_step *step, vp_t x, bool contiguous, const char *label) {
    return vp_contiguous(&step->sim, x, contiguous || step->batch == 1, label);
}

/* x broadcast over `rep` heads (a view; summed back in backward), or itself */
static vp_t broadcast(vp_sim *sim, vp_t x, uint64_t rep) {
    if (rep == 1) {
        vp_hold(sim, x);
        return x;
    }
    return vp_expand(sim, x, vp_numel(sim, vp_at(sim, x)->numel, rep), "sdpa_math.broadcast");
}

/* is_causal's mask: ones(L, S, bool).tril(), made additive in q's dtype
 * (convert_boolean_attn_mask); needs no gradient */
static vp_t causal_mask(vp_step *step, vp_dtype dtype) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    uint64_t n = vp_numel(sim, step->seq, step->seq);
    vp_t ones = vp_new(sim, n, VP_BOOL, "sdpa_math.ones");
    vp_t lower = vp_new(sim, n, VP_BOOL, "sdpa_math.tril");
    vp_drop(sim, ones);
    vp_t additive = vp_new(sim, n, dtype, "sdpa_math.mask");
    vp_t outside = vp_new(sim, n, VP_BOOL, "sdpa_math.logical_not");
    vp_drop(sim, outside);
    vp_drop(sim, lower);
    sim->grad_mode = grad_mode;
    return additive;
}

/* repeat_interleave of x's heads `rep` times, or x itself */
static vp_t interleaved(vp_sim *sim, vp_t x, uint64_t rep, bool repeats) {
    if (!repeats || rep == 1) {
        vp_hold(sim, x);
        return x;
    }
    return vp_repeat(sim, x, (unsigned)rep, "sdpa_math.repeat_interleave");
}

vp_t vp_sdpa_math(vp_step *step, const vp_sdpa_math_shape *shape, vp_t q, vp_t k, vp_t v) {
    vp_sim *sim = &step->sim;
    uint64_t rep = shape->heads / shape->kv_heads, b = step->batch, n = step->seq;
    vp_t qa = vp_autocast_low(step, q, "sdpa_math.q_cast");
    vp_t cast_k = vp_autocast_low(step, k, "sdpa_math.k_cast");
    vp_t cast_v = vp_autocast_low(step, v, "sdpa_math.v_cast");
    vp_t ka = interleaved(sim, cast_k, rep, shape->repeat_interleave);
    vp_t va = interleaved(sim, cast_v, rep, shape->repeat_interleave);
    if (shape->repeat_interleave) rep = 1;
    vp_t query = vp_scale(sim, qa, "sdpa_math.scale_q");
    vp_t mask = causal_mask(step, (vp_dtype)vp_at(sim, query)->dtype);
    vp_t key = vp_scale(sim, ka, "sdpa_math.scale_k");
    vp_t qm = folded(step, query, shape->q_contiguous, "sdpa_math.q_fold");
    vp_t kb = broadcast(sim, key, rep);
    vp_t km = folded(step, kb, rep == 1, "sdpa_math.k_fold");
    vp_t scores = vp_matmul(sim, qm, km, vp_numel4(sim, b, shape->heads, n, n), false, "sdpa_math.scores");
    vp_drop(sim, qm);
    vp_drop(sim, km);
    vp_drop(sim, kb);
    vp_drop(sim, key);
    vp_t masked = vp_add_(sim, scores, mask, "sdpa_math.add_mask");
    vp_drop(sim, scores);
    vp_t probs = vp_unary(sim, masked, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, masked)->dtype, "sdpa_math.softmax");
    vp_drop(sim, masked);
    vp_t vb = broadcast(sim, va, rep);
    vp_t vm = folded(step, vb, rep == 1, "sdpa_math.v_fold");
    vp_t out = vp_matmul(sim, probs, vm, vp_numel4(sim, b, shape->heads, n, shape->head_dim), false, "sdpa_math.out");
    vp_drop(sim, vm);
    vp_drop(sim, vb);
    vp_drop(sim, probs);
    /* the function's locals (query, the mask) and the op's casts go as it returns */
    vp_drop(sim, query);
    vp_drop(sim, mask);
    vp_drop(sim, qa);
    vp_drop(sim, ka);
    vp_drop(sim, va);
    vp_drop(sim, cast_k);
    vp_drop(sim, cast_v);
    return out;
}
