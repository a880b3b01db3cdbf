/* chunked_rotary.h — GPT-OSS's apply_rotary_pos_emb (transformers 5,
 * models/gpt_oss): each head's halves rotated by half-width tables and
 * joined by torch.cat. */
#ifndef VRAMPLAN_CHUNKED_ROTARY_H
#define VRAMPLAN_CHUNKED_ROTARY_H

#include "step.h"

/* Replaces *q and *k ([b, heads, s, d] views of the projections) with
 * their rotations: contiguous [b, heads, s, d] tensors. */
void vp_chunked_rotary(vp_step *step, vp_t *q, vp_t *k);

#endif
