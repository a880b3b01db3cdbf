/* sdpa_ring_attention.c — context parallelism's attention core as PyTorch
 * runs it (torch.distributed.tensor.experimental.context_parallel, which
 * torchtitan applies): SDPA's flash kernel dispatched to
 * _templated_ring_attention and _templated_ring_attention_backward
 * (torch/distributed/tensor/experimental/_attention.py, torch 2.6-2.7) with
 * _cp_options' defaults as torchtitan keeps them: round-robin load balance
 * (2 x cp chunks of the sequence), the partial results merged in fp32
 * (convert_to_f32), K and V rotated by one all-gather (rotate_method
 * "allgather", torchtitan's context_parallel_rotate_method default) and
 * their gradients by all-to-all. Each rank holds t = s / cp tokens.
 *
 * Compiled (compile = true: torchtitan compiles each block with
 * fullgraph=True, so the ring is traced into the block's graph, docs/compile.md):
 * AOTAutograd's CSE merges the backward's K/V all-gather with the forward's
 * (the same ops on the same k and v), and the min-cut partitioner of torch
 * 2.6 bans the collective from recomputation (not in its allowlist; pytorch
 * issue 146693): the forward's all-gather is kept for the ring's backward,
 * or, under a full checkpoint, the recompute's is. Inductor fuses the merge. */
#include "ring_attention.h"

#include "op_context.h"
#include "prims.h"

enum { SDPA_RING_CP = 5 }; /* aux[0..4]: vp_ring_shape */

static uint64_t fp32_bytes(uint64_t numel) { return 4 * numel; }

/* The K/V all-gather a compiled block keeps for the backward (0: eager). */
static vp_t kept_all_gather(vp_sim *sim, const vp_node *node) {
    for (unsigned k = 0; k < VP_NODE_MAX_SAVED; k++)
        if (node->saved[k] && vp_at(sim, node->saved[k])->aten == VP_ATEN_ALL_GATHER) return node->saved[k];
    return 0;
}

/* _templated_ring_attention_backward: fp32 accumulators for dq, dk and dv
 * (zeros_like(..., dtype=float32)); key.contiguous() and value.contiguous()
 * (the saved ones are); the K/V all-gather again (its torch.cat input and
 * the cp-fold output, kept to the end); per step the flash backward's dq,
 * dk, dv and FlashAttention-2's workspaces (softmax_d, an fp32 dq_accum:
 * flash_api.cpp mha_bwd), and the dK/dV rotation: torch.cat of the fp32
 * accumulators and permute_tensor's fp32 output. At the end dq.to(bf16) and
 * the last received dK/dV .to(bf16), whose views are the gradients.
 * Compiled, the all-gather is the forward's, kept (no cat, no new one). */
static void backward_sdpa_ring(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_ring_shape s = vp_ring_shape_get(node);
    uint64_t b = s.batch, t = s.seq, heads = s.heads, kv_heads = s.kv_heads, d = s.head_dim;
    uint64_t cp = node->aux[SDPA_RING_CP];
    vp_dtype dt = (vp_dtype)vp_at(sim, node->out[0])->dtype;
    uint64_t nq = vp_numel4(sim, b, t, heads, d), nk = vp_numel4(sim, b, t, kv_heads, d);
    const char *label = "attention.cp_ring_backward";
    vp_t dq32 = vp_grad_sized(sim, nq, VP_FP32, label);
    vp_t dkv32 = vp_grad_sized(sim, 2 * nk, VP_FP32, label);
    bool kept = kept_all_gather(sim, node) != 0;
    vp_t cat = kept ? 0 : vp_grad_sized(sim, 2 * nk, dt, label);
    vp_t gathered = kept ? 0 : vp_grad_sized(sim, cp * 2 * nk, dt, label);
    uint64_t step_bytes =
        vp_bytes_of(dt, nq + 2 * nk) + 2 * fp32_bytes(2 * nk) + vp_ring_flash_workspace(sim, b, heads, t, d);
    vp_scratch(sim, step_bytes, label);
    vp_drop(sim, cat);
    vp_t dq = vp_grad_sized(sim, nq, dt, label);
    vp_drop(sim, dq32);
    vp_t dkv = vp_grad_sized(sim, 2 * nk, dt, label);
    vp_drop(sim, dkv32);
    vp_drop(sim, gathered);
    vp_t grads[3] = {dq, vp_view(sim, dkv, nk, label), vp_view(sim, dkv, nk, label)};
    vp_drop(sim, dkv);
    vp_ring_give_grads(sim, index, grads);
}

/* The forward: key.contiguous() and value.contiguous() (copies unless they
 * are); torch.cat of K and V and its all-gather over the cp ranks (kept to
 * the end of the loop; the cat until the first wait); per step SDPA's
 * output and log-sum-exp, merged by _SDPAMerger in fp32: the first step's
 * output .to(float32), then each later one out - sigmoid(lse_i - lse) x
 * (out - out_i), two fp32 temporaries at a time beside the running fp32
 * output (compiled: one kernel writing the new fp32 output, docs/compile.md
 * Fusion); the result .to(bf16). The autograd node is SDPA's: it saves q, k
 * and v as given, the output and the log-sum-exp, as the flash kernel does
 * on t tokens. */
vp_t vp_sdpa_ring_attention(vp_step *step, vp_t q, vp_t k, vp_t v, bool kv_contiguous, uint64_t heads,
                            uint64_t kv_heads, uint64_t head_dim) {
    vp_sim *sim = &step->sim;
    uint64_t b = step->batch, t = step->seq;
    unsigned cp = step->cp;
    bool compiled = step->recipe->compile;
    vp_t qa = vp_autocast_low(step, q, "attention.q_cast");
    vp_t ka = vp_autocast_low(step, k, "attention.k_cast");
    vp_t va = vp_autocast_low(step, v, "attention.v_cast");
    vp_dtype dt = (vp_dtype)vp_at(sim, qa)->dtype;
    uint64_t nq = vp_numel4(sim, b, t, heads, head_dim), nk = vp_numel4(sim, b, t, kv_heads, head_dim);
    uint64_t lse_n = vp_numel3(sim, b, heads, t);
    vp_t kc = kv_contiguous ? 0 : vp_new(sim, nk, dt, "attention.cp_contiguous");
    vp_t vc = kv_contiguous ? 0 : vp_new(sim, nk, dt, "attention.cp_contiguous");
    vp_t cat = vp_new(sim, 2 * nk, dt, "attention.cp_kv_cat");
    vp_t gathered = vp_sac_new(sim, VP_ATEN_ALL_GATHER, (uint64_t)cp * 2 * nk, dt, "attention.cp_kv_all_gather");
    vp_t step_out = vp_new(sim, nq, dt, "attention.cp_step_out");
    /* the op's outputs, which a selective checkpoint's policy sees as SDPA's */
    vp_t lse = vp_sac_new(sim, VP_ATEN_SDPA_FLASH, lse_n, VP_FP32, "attention.cp_lse");
    vp_t out32 = vp_new(sim, nq, VP_FP32, "attention.cp_merged_out");
    vp_drop(sim, cat); /* waited for at the second step */
    if (cp > 1) { /* a later step: its output beside the merge's temporaries */
        vp_drop(sim, step_out);
        step_out = vp_new(sim, nq, dt, "attention.cp_step_out");
        vp_scratch(sim, (compiled ? 1 : 2) * fp32_bytes(nq), "attention.cp_merge");
    }
    vp_drop(sim, step_out);
    vp_t out = vp_sac_new(sim, VP_ATEN_SDPA_FLASH, nq, dt, "attention.cp_out");
    vp_drop(sim, out32);
    if (!compiled) vp_drop(sim, gathered);
    vp_drop(sim, kc);
    vp_drop(sim, vc);
    vp_t inputs[3] = {qa, ka, va};
    vp_node *node = vp_record(sim, backward_sdpa_ring, "attention.cp_ring", inputs, 3, &out, 1);
    if (node) {
        vp_ring_shape_put(node, &(vp_ring_shape){b, t, heads, kv_heads, head_dim});
        node->aux[SDPA_RING_CP] = cp;
        vp_save(sim, node, qa);
        vp_save(sim, node, ka);
        vp_save(sim, node, va);
        vp_save(sim, node, out);
        vp_save(sim, node, lse);
        if (compiled) vp_save(sim, node, gathered);
    }
    if (compiled) vp_drop(sim, gathered);
    vp_drop(sim, lse);
    vp_drop(sim, qa);
    vp_drop(sim, ka);
    vp_drop(sim, va);
    return out;
}
