/* sdpa_math.h — the math backend of PyTorch's scaled_dot_product_attention,
 * which SDPA runs when its fused kernels refuse the inputs. */
#ifndef VRAMPLAN_SDPA_MATH_H
#define VRAMPLAN_SDPA_MATH_H

#include "step.h"

typedef struct {
    uint64_t heads, kv_heads, head_dim;
    bool q_contiguous;      /* q is a contiguous [b, heads, s, d] (else a transposed layout) */
    bool repeat_interleave; /* enable_gqa: the key and value heads repeated to every query head first */
} vp_sdpa_math_shape;

/* F.scaled_dot_product_attention(q, k, v, is_causal=True) without a mask or
 * dropout, q, k and v borrowed as [b, heads or kv_heads, s, d]; returns
 * the new [b, heads, s, d] output (contiguous). */
vp_t vp_sdpa_math(vp_step *step, const vp_sdpa_math_shape *shape, vp_t q, vp_t k, vp_t v);

#endif
