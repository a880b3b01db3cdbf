/* ring_attention.c — context parallelism's attention core as Transformer
 * Engine runs it for Megatron-LM (--cp-comm-type p2p, the default):
 * AttnFuncWithCPAndKVP2P in transformer_engine/pytorch/attention/
 * dot_product_attention/context_parallel.py (TE 2.x, non-FP8, bshd/sbhd).
 * Each of cp ranks holds t = s / cp tokens (two half-chunks, for causal
 * balance); K and V travel round the ring and every step runs the flash
 * kernel on the local queries against one rank's keys. Sizes are the last
 * rank's, which keeps the most: its every step attends to whole chunks. */
#include "ring_attention.h"

#include "op_context.h"
#include "prims.h"


static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* Backward: two ring slots, each a [kv, dkv] pair in kv's dtype (dK and dV
 * accumulate in them; the returned dk and dv are views of one), dq made
 * with empty_like(q) and accumulated in place, and one step's temporaries
 * at a time (TE drops them at the top of each step): that step's dq and
 * dkv from the kernel, the second half of the log-sum-exp made contiguous,
 * and FlashAttention-2's own workspaces (softmax_d and an fp32 dq_accum,
 * csrc/flash_attn/flash_api.cpp, mha_bwd). */
static void backward_ring(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_ring_shape s = vp_ring_shape_get(node);
    uint64_t b = s.batch, t = s.seq, heads = s.heads, kv_heads = s.kv_heads, d = s.head_dim;
    vp_dtype dt = (vp_dtype)vp_at(sim, node->out[0])->dtype;
    uint64_t nq = vp_numel4(sim, b, t, heads, d), nkv = 2 * vp_numel4(sim, b, t, kv_heads, d);
    const char *label = "attention.ring_backward";
    vp_t slots[2];
    for (unsigned i = 0; i < 2; i++) slots[i] = vp_grad_sized(sim, 2 * nkv, dt, label);
    vp_t dq = vp_grad_sized(sim, nq, dt, label);
    uint64_t step_bytes = vp_bytes_of(dt, nq) + vp_bytes_of(dt, nkv) + vp_bytes_of(VP_FP32, vp_numel3(sim, b, heads, t / 2)) +
                          vp_ring_flash_workspace(sim, b, heads, t, d);
    vp_scratch(sim, step_bytes, label);
    vp_t grads[3] = {dq, vp_view(sim, slots[0], nkv / 2, label), vp_view(sim, slots[0], nkv / 2, label)};
    vp_drop(sim, slots[0]);
    vp_drop(sim, slots[1]);
    vp_ring_give_grads(sim, index, grads);
}

void vp_ring_shape_put(vp_node *node, const vp_ring_shape *shape) {
    const uint64_t v[5] = {shape->batch, shape->seq, shape->heads, shape->kv_heads, shape->head_dim};
    for (unsigned i = 0; i < 5; i++) node->aux[i] = v[i];
}

vp_ring_shape vp_ring_shape_get(const vp_node *node) {
    return (vp_ring_shape){node->aux[0], node->aux[1], node->aux[2], node->aux[3], node->aux[4]};
}

uint64_t vp_ring_flash_workspace(vp_sim *sim, uint64_t b, uint64_t heads, uint64_t t, uint64_t d) {
    uint64_t rows = round_up(t, 128);
    return vp_bytes_of(VP_FP32, vp_numel3(sim, b, heads, rows)) +
           vp_bytes_of(VP_FP32, vp_numel4(sim, b, rows, heads, round_up(d, d <= 128 ? 32 : 64)));
}

void vp_ring_give_grads(vp_sim *sim, uint32_t index, const vp_t *grads) {
    for (unsigned i = 0; i < 3; i++) {
        vp_node *node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) vp_give_grad(sim, node, i, grads[i]);
        else vp_drop(sim, grads[i]);
    }
}

vp_t vp_ring_attention(vp_step *step, vp_t q, vp_t k, vp_t v, uint64_t heads, uint64_t kv_heads, uint64_t head_dim) {
    vp_sim *sim = &step->sim;
    uint64_t b = step->batch, t = step->seq;
    unsigned cp = step->cp;
    vp_t qa = vp_autocast_low(step, q, "attention.q_cast");
    vp_t ka = vp_autocast_low(step, k, "attention.k_cast");
    vp_t va = vp_autocast_low(step, v, "attention.v_cast");
    vp_dtype dt = (vp_dtype)vp_at(sim, qa)->dtype;
    uint64_t nq = vp_numel4(sim, b, t, heads, head_dim), nkv = 2 * vp_numel4(sim, b, t, kv_heads, head_dim);
    uint64_t lse = vp_numel3(sim, b, heads, t);
    /* p2p_comm_buffers: the first is torch.cat of k and v, then one
     * empty_like per step for the next rank's; the list lives to the end
     * of the loop. out_per_step and softmax_lse_per_step (fp32) too: the
     * output is corrected only after the loop. */
    vp_t *buffers = vp_step_scratch(step, 3 * (size_t)cp * sizeof *buffers);
    if (!buffers) return qa;
    vp_t *outs = buffers + cp, *lses = buffers + 2 * (size_t)cp;
    buffers[0] = vp_new(sim, nkv, dt, "attention.cp_kv_ring");
    vp_t merged_lse = 0;
    for (unsigned i = 0; i < cp; i++) {
        if (i + 1 < cp) buffers[i + 1] = vp_new(sim, nkv, dt, "attention.cp_kv_ring");
        outs[i] = vp_new(sim, nq, dt, "attention.cp_out_per_step");
        lses[i] = vp_new(sim, lse, VP_FP32, "attention.cp_lse_per_step");
        if (i == 0) merged_lse = vp_new(sim, lse, VP_FP32, "attention.cp_lse"); /* a clone, corrected in place */
    }
    vp_t out = vp_new(sim, nq, dt, "attention.cp_out");
    vp_t inputs[3] = {qa, ka, va};
    vp_node *node = vp_record(sim, backward_ring, "attention.ring", inputs, 3, &out, 1);
    if (node) {
        vp_ring_shape_put(node, &(vp_ring_shape){b, t, heads, kv_heads, head_dim});
        /* ctx.save_for_backward: q, the last ring buffer (not k and v), out, the merged log-sum-exp */
        vp_save(sim, node, qa);
        vp_save(sim, node, buffers[cp - 1]);
        vp_save(sim, node, out);
        vp_save(sim, node, merged_lse);
    }
    for (unsigned i = 0; i < cp; i++) {
        vp_drop(sim, outs[i]);
        vp_drop(sim, lses[i]);
        vp_drop(sim, buffers[i]);
    }
    vp_drop(sim, merged_lse);
    vp_drop(sim, qa);
    vp_drop(sim, ka);
    vp_drop(sim, va);
    return out;
}
