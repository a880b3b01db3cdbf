/* finetune.h — what a recipe trains: which of a model's weights, which get
 * LoRA's adapters or are stored 4-bit, and how many parameters that is. */
#ifndef VRAMPLAN_FINETUNE_H
#define VRAMPLAN_FINETUNE_H

#include "finetune_method.h"
#include "model.h"
#include "recipe.h"

/* Whether the recipe trains this parameter itself: full fine-tuning, a
 * module of modules_to_save, or with freezing a parameter outside the
 * frozen part (`frozen`: the embeddings and the layers before the trained
 * ones). */
bool vp_finetune_trains(const vp_recipe *recipe, const vp_leaf_spec *spec, bool frozen);

/* PEFT's ModulesToSaveWrapper: a module named in modules_to_save is
 * trained as a deep copy, the original kept beside it, frozen. */
bool vp_finetune_keeps_original(const vp_recipe *recipe, const vp_leaf_spec *spec);

/* Whether LoRA puts adapters beside this weight. */
bool vp_lora_adapts(const vp_recipe *recipe, const vp_leaf_spec *spec);
/* Whether PEFT's target_parameters give the 3-D experts parameter of
 * `spec` adapters (lora.ParamWrapper) in the model's layer `layer`. */
bool vp_lora_adapts_param(const vp_recipe *recipe, const vp_leaf_spec *spec, unsigned layer);

/* Whether QLoRA stores this weight quantized (every linear weight but the
 * head). */
bool vp_quantizes(const vp_recipe *recipe, const vp_leaf_spec *spec);

/* Whether QLoRA's 4-bit weights are double-quantized (their block absmax
 * in 8 bits, with a second level of fp32 scales). */
bool vp_double_quantizes(const vp_recipe *recipe);

/* The fp32 block scales dequantize_4bit makes of a 4-bit weight of `numel`
 * elements before the weight itself: its double-quantized absmax, one per
 * 64 elements (0 without double quantization, or for int8). */
uint64_t vp_dequant_absmax_numel(const vp_recipe *recipe, uint64_t numel);

/* The dtype of the adapters: PEFT upcasts 16-bit adapters to fp32
 * (get_peft_model's autocast_adapter_dtype=True) unless a framework casts
 * the whole module (DeepSpeed's and Megatron's mixed precision). */
vp_dtype vp_lora_dtype(const vp_recipe *recipe, vp_dtype params);

/* The parameters the recipe trains: its own, adapters included. */
uint64_t vp_finetune_trainable_params(const vp_model *model, const vp_recipe *recipe);

/* The first problem of the recipe's fine-tuning with this model (a target
 * it does not have, a method not modelled), or NULL. */
const char *vp_finetune_problem(const vp_model *model, const vp_recipe *recipe);

/* The modules LoRA puts adapters on in this model: the recipe's targets
 * (or PEFT's defaults, or all-linear) that the model has. */
vp_module_set vp_lora_adapted(const vp_model *model, const vp_recipe *recipe);

/* Those modules' names, comma-separated, Lua blocks' own names after the
 * core's (writes at most size bytes). */
void vp_lora_adapted_names(const vp_model *model, const vp_recipe *recipe, char *out, unsigned size);

/* The modules of this model trained in full beside what the method trains,
 * by name ("" for none): the recipe's modules_to_save (a Lua block's own
 * ones after the core's) and, under PEFT, a classifier's head. */
void vp_finetune_saved_names(const vp_model *model, const vp_recipe *recipe, char *out, unsigned size);

#endif
