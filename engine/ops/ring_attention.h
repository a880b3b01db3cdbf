/* ring_attention.h — the attention core under context parallelism. */
#ifndef VRAMPLAN_RING_ATTENTION_H
#define VRAMPLAN_RING_ATTENTION_H

#include "step.h"

/* Causal attention of this rank's queries against the whole sequence, its
 * K and V passed round the ring of step->cp ranks. q, k and v are this
 * rank's (step->batch x step->seq rows; heads, kv_heads x head_dim wide),
 * borrowed; returns the output, a new reference. */
vp_t vp_ring_attention(vp_step *step, vp_t q, vp_t k, vp_t v, uint64_t heads, uint64_t kv_heads, uint64_t head_dim);

/* A ring's shape on its autograd node (aux[0..4]): this rank's tokens t. */
typedef struct {
    uint64_t batch, seq, heads, kv_heads, head_dim;
} vp_ring_shape;
void vp_ring_shape_put(vp_node *node, const vp_ring_shape *shape);
vp_ring_shape vp_ring_shape_get(const vp_node *node);

/* FlashAttention-2's backward workspaces for one ring step on t tokens:
 * softmax_d and an fp32 dq_accum (csrc/flash_attn/flash_api.cpp, mha_bwd). */
uint64_t vp_ring_flash_workspace(vp_sim *sim, uint64_t b, uint64_t heads, uint64_t t, uint64_t d);
/* A ring's backward hands dq, dk, dv to node `index`'s inputs (dropping
 * those none needs). */
void vp_ring_give_grads(vp_sim *sim, uint32_t index, const vp_t *grads);

/* The same as PyTorch's context_parallel runs SDPA (sdpa_ring_attention.c):
 * k and v as SDPA gets them (kv_heads of them, repeated or not), copied to
 * contiguous unless kv_contiguous. */
vp_t vp_sdpa_ring_attention(vp_step *step, vp_t q, vp_t k, vp_t v, bool kv_contiguous, uint64_t heads,
                            uint64_t kv_heads, uint64_t head_dim);

#endif
