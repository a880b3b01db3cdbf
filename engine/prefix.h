/* prefix.h — PEFT's prefix tuning: trained keys and values put before every
 * layer's own, through the key/value cache the model already has. */
#ifndef VRAMPLAN_PREFIX_H
#define VRAMPLAN_PREFIX_H

#include "step.h"

/* PeftModel.get_prompt before the model runs: the prefix table looked up for
 * every sequence and handed to the model as a DynamicCache of views, one
 * key and one value per layer. Fills step->kv_cache (2 per layer). */
void vp_prefix_begin(vp_step *step);

/* DynamicCache.update in layer `layer`: the cached prefix and the layer's
 * new keys (which = 0) or values (1) joined along the sequence, stored in
 * the cache in the prefix's place. Returns the joined tensor, a new
 * reference; x is borrowed. */
vp_t vp_prefix_join(vp_step *step, unsigned layer, unsigned which, vp_t x);

/* The model's outputs let go of the cache. */
void vp_prefix_release(vp_step *step, vp_t *cache);

/* PrefixEncoder's table without a projection: num_virtual_tokens rows of
 * 2 x layers x the key/value width. */
uint64_t vp_prefix_table_width(const vp_model *model);

#endif
