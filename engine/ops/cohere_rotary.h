/* cohere_rotary.h — Cohere's apply_rotary_pos_emb (transformers,
 * models/cohere/modeling_cohere.py): q and k rotated in fp32, interleaved. */
#ifndef VRAMPLAN_COHERE_ROTARY_H
#define VRAMPLAN_COHERE_ROTARY_H

#include "step.h"

/* Replaces *q and *k ([b, heads, s, d] views of the projections) with
 * their rotations, in their own dtype again. */
void vp_cohere_rotary(vp_step *step, vp_t *q, vp_t *k);

#endif
