/* float8.h — the recipes torchao's float8 training is modelled for. */
#ifndef VP_FLOAT8_H
#define VP_FLOAT8_H

#include "recipe.h"

/* NULL, or why the recipe's float8 keys cannot be estimated (precision
 * fp8-torchao with megatron or a frozen base; fp8_all_gather outside
 * FSDP2 or with a rowwise recipe; fp8_recipe without fp8-torchao). */
const char *vp_float8_problem(const vp_recipe *recipe);

#endif
