/* float8.c — which recipes torchao's float8 training (precision
 * fp8-torchao, fp8_recipe, fp8_all_gather) is modelled for. */
#include "float8.h"

#include <stddef.h>

#include "finetune_method.h"
#include "framework.h"
#include "precision.h"

/* torchao's Float8Linear as modelled (prims.c vp_linear_float8): the
 * modules of a PyTorch model, full training; under DTensor's tensor
 * parallelism (framework = fsdp2) with torchtitan's plan: tensorwise
 * through torchao's float8 styles (op_basic.c float8_tp), rowwise through
 * the plain ones. */
const char *vp_float8_problem(const vp_recipe *recipe) {
    const vp_precision *precision = vp_precision_get(recipe->precision);
    if (!precision) return NULL;
    if (recipe->fp8_all_gather && (!precision->fp8_dynamic || vp_framework_of(recipe) != &vp_framework_fsdp2))
        return "fp8_all_gather: FSDP2's float8 all-gather needs framework = fsdp2 and precision = fp8-torchao";
    /* Float8LinearConfig.__post_init__: "enable_fsdp_float8_all_gather only
     * supports tensorwise scaling granularity" */
    if (recipe->fp8_all_gather && recipe->fp8_recipe != VP_FLOAT8_TENSORWISE)
        return "fp8_all_gather: torchao's float8 all-gather supports tensorwise scaling only (fp8_recipe)";
    if (recipe->fp8_recipe != VP_FLOAT8_TENSORWISE && !precision->fp8_dynamic)
        return "fp8_recipe: torchao's float8 recipes need precision = fp8-torchao";
    if (!precision->fp8_dynamic) return NULL;
    if (!vp_framework_of(recipe)->hf_modeling)
        return "precision: fp8-torchao swaps a PyTorch model's nn.Linear modules; Megatron-LM runs FP8 through "
               "Transformer Engine (precision = fp8)";
    if (vp_finetune_method_of(recipe)->frozen_base)
        return "precision: fp8-torchao is modelled for training every weight (no frozen or adapted base)";
    return NULL;
}
