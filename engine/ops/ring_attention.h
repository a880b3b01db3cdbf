/* ring_attention.h — the attention core under context parallelism. */
#ifndef VRAMPLAN_RING_ATTENTION_H
#define VRAMPLAN_RING_ATTENTION_H

#include "step.h"

/* Causal attention of this rank's queries against the whole sequence, its
 * K and V passed round the ring of step->cp ranks. q, k and v are this
 * rank's (step->batch x step->seq rows; heads, kv_heads x head_dim wide),
 * borrowed; returns the output, a new reference. */
vp_t vp_ring_attention(vp_step *step, vp_t q, vp_t k, vp_t v, uint64_t heads, uint64_t kv_heads, uint64_t head_dim);

#endif
