/* optimizer.c — the optimizer registry. Temporaries follow torch/optim in
 * PyTorch 2.x (adam.py, adamw.py, sgd.py) and, where recipe.torch_version
 * says so, 1.13. */
#include "optimizer.h"

#include <stddef.h>
#include <string.h>

/* _single_tensor_adam: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 * holds the sqrt and the quotient at once; Adam (not AdamW) with weight
 * decay first makes grad = grad.add(param, alpha=weight_decay).
 * _multi_tensor_adam (2.x): one list from _foreach_sqrt, divided and shifted
 * in place; the weight-decay copy of the gradients is deleted before it.
 * 1.13 also built denom = _foreach_add(exp_avg_sq_sqrt, eps): two lists. */
static unsigned adam_temporaries(const vp_recipe *recipe, double weight_decay, bool decoupled) {
    switch (recipe->optimizer_impl) {
    case VP_IMPL_FUSED: return 0;
    case VP_IMPL_FOREACH: return recipe->torch_version == VP_TORCH_1_13 ? 2 : 1;
    default: return 2 + (weight_decay != 0.0 && !decoupled);
    }
}

static unsigned adam_temps(const vp_recipe *recipe, double weight_decay) {
    return adam_temporaries(recipe, weight_decay, false);
}

static unsigned adamw_temps(const vp_recipe *recipe, double weight_decay) {
    return adam_temporaries(recipe, weight_decay, true);
}

/* _single_tensor_sgd / _multi_tensor_sgd: with weight decay the gradient is
 * first copied (grad.add(param) / _foreach_add); momentum updates its buffer
 * in place. */
static unsigned sgd_temps(const vp_recipe *recipe, double weight_decay) {
    if (recipe->optimizer_impl == VP_IMPL_FUSED) return 0;
    return weight_decay != 0.0;
}

static unsigned no_temps(const vp_recipe *recipe, double weight_decay) {
    (void)recipe;
    (void)weight_decay;
    return 0;
}

static const vp_optimizer_kind registry[] = {
    {"adamw", "AdamW: exp_avg and exp_avg_sq per parameter, decoupled weight decay (default 0.01)", 2, 0.01, true,
     adamw_temps},
    {"adam", "Adam: exp_avg and exp_avg_sq per parameter (weight decay default 0)", 2, 0.0, true, adam_temps},
    {"sgd", "plain SGD: no state", 0, 0.0, true, sgd_temps},
    {"sgd-momentum", "SGD with momentum: one momentum buffer per parameter", 1, 0.0, true, sgd_temps},
    {"none", "no optimizer step: forward and backward only", 0, 0.0, false, no_temps},
};

unsigned vp_optimizer_count(void) { return sizeof registry / sizeof registry[0]; }

const vp_optimizer_kind *vp_optimizer_at(unsigned index) {
    return index < vp_optimizer_count() ? &registry[index] : NULL;
}

int vp_optimizer_find(const char *name) {
    for (unsigned i = 0; i < vp_optimizer_count(); i++)
        if (strcmp(registry[i].name, name) == 0) return (int)i;
    return -1;
}

double vp_optimizer_weight_decay(const vp_optimizer_kind *kind, const vp_recipe *recipe) {
    return recipe->weight_decay >= 0.0 ? recipe->weight_decay : kind->default_weight_decay;
}
