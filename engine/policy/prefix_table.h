/* prefix_table.h — PEFT's prefix tuning as a recipe sees it: the trained
 * table's width and the models it cannot run on. What the prefix does in
 * the step is the op side's (prefix.h). */
#ifndef VRAMPLAN_PREFIX_TABLE_H
#define VRAMPLAN_PREFIX_TABLE_H

#include <stdint.h>

#include "model.h"

/* PrefixEncoder's table without a projection: num_virtual_tokens rows of
 * 2 x layers x the key/value width (an encoder-decoder's: its decoder's). */
uint64_t vp_prefix_table_width(const vp_model *model);

/* What keeps PEFT's prefix tuning from running on this model (a message
 * naming the key), or NULL. */
const char *vp_prefix_recipe_problem(const vp_model *model);

#endif
