/* lora.h — LoRA's adapters beside the weights a recipe targets. */
#ifndef VRAMPLAN_LORA_H
#define VRAMPLAN_LORA_H

#include "finetune.h"

struct vp_step;

/* Adapters of one weight (the step records them: vp_step_add_adapter,
 * vp_step_adapter): A [r x in], B [out x r], and with DoRA the
 * magnitude [out] (else 0). Of a 3-D experts parameter (PEFT's
 * target_parameters, lora.ParamWrapper): A [r x experts, in] and B [out,
 * r x experts], `experts` its first dimension (0 for a linear weight). */
typedef struct vp_lora_adapter {
    vp_t weight, a, b, magnitude;
    uint64_t out_features;
    uint64_t experts, in_features;
} vp_lora_adapter;

/* PEFT's lora.Linear.forward after the base layer gave `result` for input
 * x (bias: the base layer's, 0 for none): x cast to the adapters' dtype,
 * dropout, A, B, times alpha / r, added, cast back; with DoRA, its variant
 * (dora.c). Takes over the reference to result; returns the new one.
 * Without adapters on `weight` returns result as it is. */
vp_t vp_lora_forward(struct vp_step *step, vp_t x, vp_t weight, vp_t bias, vp_t result, const char *label);

/* DoraLinearVariant.forward: result plus DoRA's term for input x (already
 * cast to the adapters' dtype). Takes over result; returns the sum. */
vp_t vp_dora_forward(struct vp_step *step, const vp_lora_adapter *adapter, vp_t x, vp_t bias, vp_t result);

#endif
