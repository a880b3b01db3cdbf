/* sac_policy.h — the op-level selective activation checkpointing policy
 * (checkpointing = op-selective), as data. */
#ifndef VP_SAC_POLICY_H
#define VP_SAC_POLICY_H

#include "sim.h"

/* torchtitan's per-op policy: the ops of its save list saved, every second
 * mm recomputed, the rest recomputed (sac_policy.c cites the list). */
void vp_sac_torchtitan(vp_sac_rules *rules);

#endif
