/* lora.h — LoRA's adapters beside the weights a recipe targets. */
#ifndef VRAMPLAN_LORA_H
#define VRAMPLAN_LORA_H

#include "finetune.h"

struct vp_step;

/* Adapters of one weight: A [r x in], B [out x r]. */
typedef struct vp_lora_adapter {
    vp_t weight, a, b;
    uint64_t out_features;
} vp_lora_adapter;

/* Records the adapters of `weight` for the step's forward. */
bool vp_lora_register(struct vp_step *step, vp_t weight, vp_t a, vp_t b, uint64_t out_features);

/* PEFT's lora.Linear.forward after the base layer gave `result` for input
 * x: x cast to the adapters' dtype, dropout, A, B, times alpha / r, added,
 * cast back. Takes over the reference to result; returns the new one.
 * Without adapters on `weight` returns result as it is. */
vp_t vp_lora_forward(struct vp_step *step, vp_t x, vp_t weight, vp_t result, const char *label);

#endif
