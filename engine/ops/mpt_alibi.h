/* mpt_alibi.h — what MptModel.forward makes once per step for its layers'
 * attention: the ALiBi table and the bool causal mask. */
#ifndef VRAMPLAN_MPT_ALIBI_H
#define VRAMPLAN_MPT_ALIBI_H

#include "step.h"

/* The all-ones [b, s] mask (a local of the model's forward) and
 * build_mpt_alibi_tensor's [heads, 1, width] fp32 table, into step->alibi. */
void vp_mpt_prepare_alibi(vp_step *step, uint64_t heads, uint64_t width);

/* _prepare_4d_causal_attention_mask(...).bool(): a [b, 1, s, s] bool mask,
 * into step->causal_mask. */
void vp_mpt_prepare_mask(vp_step *step);

#endif
