/* prefix.h — PEFT's prefix tuning: trained keys and values put before every
 * layer's own, through the key/value cache the model already has. */
#ifndef VRAMPLAN_PREFIX_H
#define VRAMPLAN_PREFIX_H

#include "prefix_table.h"
#include "step.h"

/* PeftModel.get_prompt before the model runs: the prefix table looked up for
 * every sequence and handed to the model as a DynamicCache of views, one
 * key and one value per layer, in the step's empty cache (kv_cache.h). */
void vp_prefix_begin(vp_step *step);

#endif
