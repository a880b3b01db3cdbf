/* falcon_qkv.h — FalconAttention's query_key_value output split into q, k
 * and v as _split_heads does it (transformers, models/falcon/
 * modeling_falcon.py, commit 00dcc6d of the 4.5x line): views where it
 * slices, copies where it indexes with a list or flattens what cannot be
 * viewed. */
#ifndef VRAMPLAN_FALCON_QKV_H
#define VRAMPLAN_FALCON_QKV_H

#include "step.h"

typedef enum {
    VP_FALCON_MULTI_QUERY, /* falcon-7b: multi_query, [b, s, heads + 2, d] */
    VP_FALCON_GROUPED,     /* new_decoder_architecture: [b, s, kv_heads, heads / kv_heads + 2, d] */
    VP_FALCON_HEADS        /* neither: [b, s, heads, 3, d] */
} vp_falcon_layout;

typedef struct {
    vp_falcon_layout layout;
    uint64_t heads, kv_heads, head_dim;
} vp_falcon_shape;

/* Splits `fused` (borrowed) into new references *q, *k and *v, each
 * [b, s, heads, d] (the multi-query key and value: one head) as the
 * attention then reads them: multi-query's keys and values and the grouped
 * layout's three are contiguous copies, the rest views of `fused`. */
void vp_falcon_split(vp_step *step, const vp_falcon_shape *shape, vp_t fused, vp_t *q, vp_t *k, vp_t *v);

/* The key/value heads the attention sees after the split: one for
 * multi-query, every query head otherwise (the grouped layout's are
 * broadcast and copied). */
uint64_t vp_falcon_kv_heads(const vp_falcon_shape *shape);

#endif
