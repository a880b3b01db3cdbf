/* gptj_rotary.h — GPT-J's rotary embedding as GPTJAttention.forward makes
 * it (transformers, models/gptj/modeling_gptj.py): its own fp32 table per
 * layer, rotate_every_two on the first rotary_dim of each head of q and k. */
#ifndef VRAMPLAN_GPTJ_ROTARY_H
#define VRAMPLAN_GPTJ_ROTARY_H

#include "step.h"

typedef struct {
    uint64_t head_dim, rotary_dim; /* the rotated width of each head, even, nonzero */
    uint64_t positions;            /* n_positions: the table's rows */
} vp_gptj_rotary_shape;

/* Rotates *q and *k (projections viewed [b, s, heads, head_dim]) in place
 * of the references: the new ones are fp32 (the fp32 table promotes a
 * 16-bit q and k). The forward's other locals (the repeated table, the
 * gathered rows, the rotated parts and the unrotated rests) go to keep(ctx, t)
 * and are left for the caller to drop when the module returns. */
void vp_gptj_rotary(vp_step *step, const vp_gptj_rotary_shape *shape, vp_t *q, vp_t *k,
                    void (*keep)(void *ctx, vp_t t), void *ctx);

#endif
