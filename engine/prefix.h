/* prefix.h — PEFT's prefix tuning: trained keys and values put before every
 * layer's own, through the key/value cache the model already has. */
#ifndef VRAMPLAN_PREFIX_H
#define VRAMPLAN_PREFIX_H

#include "step.h"

/* PeftModel.get_prompt before the model runs: the prefix table looked up for
 * every sequence and handed to the model as a DynamicCache of views, one
 * key and one value per layer, in the step's empty cache (kv_cache.h). */
void vp_prefix_begin(vp_step *step);

/* PrefixEncoder's table without a projection: num_virtual_tokens rows of
 * 2 x layers x the key/value width (an encoder-decoder's: its decoder's). */
uint64_t vp_prefix_table_width(const vp_model *model);

/* What keeps PEFT's prefix tuning from running on this model (a message
 * naming the key), or NULL. */
const char *vp_prefix_recipe_problem(const vp_model *model);

#endif
