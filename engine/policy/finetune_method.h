/* finetune_method.h — the fine-tuning methods as one registered table:
 * what each trains, adds and refuses, as properties the census, the layout
 * and the step ask (finetune_method.c). No code compares a recipe's method
 * with a particular one: it asks the entry (vp_finetune_method_of). */
#ifndef VRAMPLAN_FINETUNE_METHOD_H
#define VRAMPLAN_FINETUNE_METHOD_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "recipe.h"

/* Where a prompt-learning method's virtual tokens go. */
typedef enum {
    VP_VIRTUAL_NONE,
    VP_VIRTUAL_PROMPT, /* before every sequence: the model runs on seq_len + num_virtual_tokens */
    VP_VIRTUAL_PREFIX, /* before every layer's keys and values (PEFT's past_key_values) */
} vp_virtual_tokens;

typedef struct {
    const char *name;            /* as a recipe names it: finetune = qlora */
    bool peft;                   /* a PEFT model runs it (PeftModel: its hooks, modules_to_save's copies) */
    bool frozen_base;            /* the base model's weights are frozen, all or in part */
    bool trains_last_layers;     /* trainable_layers: the last layers, the final norm and head trained */
    bool adapts_linear;          /* LoRA's adapters beside the targeted linear weights (PEFT's lora.Linear) */
    bool quantizes_base;         /* the frozen base's linear weights stored quantized (bitsandbytes) */
    vp_virtual_tokens virtual_tokens; /* num_virtual_tokens applies (the prompt or prefix table) */
    /* The parameters the method adds beside the model's own (PEFT's
     * prompt or prefix table); NULL: none. */
    uint64_t (*leaves)(const vp_model *model, const vp_recipe *recipe);
    /* What the method cannot run under the recipe (with this model, when
     * given), a message naming the key, or NULL; asked after the checks
     * of the keys every method shares (vp_finetune_problem). */
    const char *(*problem)(const vp_model *model, const vp_recipe *recipe);
    /* What keeps the method from this encoder-decoder model, or NULL
     * (asked with the other encoder-decoder checks). */
    const char *(*encoder_decoder_problem)(const vp_model *model);
} vp_finetune_method;

/* The index-th registered method (in vp_finetune's order), NULL past the last. */
const vp_finetune_method *vp_finetune_method_at(unsigned index);

/* The recipe's method. */
const vp_finetune_method *vp_finetune_method_of(const vp_recipe *recipe);

/* PEFT's num_transformer_submodules: prompt tables of encoder-decoders
 * hold two sets of virtual tokens (PeftModelForSeq2SeqLM), others one. */
unsigned vp_prompt_submodules(const vp_model *model);

#endif
