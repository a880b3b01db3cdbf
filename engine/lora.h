/* lora.h — parameter-efficient fine-tuning: which of a model's weights a
 * recipe trains, and LoRA's adapters beside the weights it targets. */
#ifndef VRAMPLAN_LORA_H
#define VRAMPLAN_LORA_H

#include "model.h"
#include "recipe.h"

struct vp_step;

/* Whether the recipe trains this parameter itself: full fine-tuning, a
 * module of modules_to_save, or with freezing a parameter outside the
 * frozen part (`frozen`: the embeddings and the layers before the trained
 * ones). */
bool vp_finetune_trains(const vp_recipe *recipe, const vp_leaf_spec *spec, bool frozen);

/* Whether LoRA puts adapters beside this weight. */
bool vp_lora_adapts(const vp_recipe *recipe, const vp_leaf_spec *spec);

/* Whether QLoRA stores this weight quantized (every linear weight but the
 * head). */
bool vp_quantizes(const vp_recipe *recipe, const vp_leaf_spec *spec);

/* The dtype of the adapters: PEFT upcasts 16-bit adapters to fp32
 * (get_peft_model's autocast_adapter_dtype=True) unless a framework casts
 * the whole module (DeepSpeed's and Megatron's mixed precision). */
vp_dtype vp_lora_dtype(const vp_recipe *recipe, vp_dtype params);

/* The parameters the recipe trains: its own, adapters included. */
uint64_t vp_finetune_trainable_params(const vp_model *model, const vp_recipe *recipe);

/* The first problem of the recipe's fine-tuning with this model (a target
 * it does not have, a method not modelled), or NULL. */
const char *vp_finetune_problem(const vp_model *model, const vp_recipe *recipe);

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
