/* optimizer.h — the registered optimizers: state they keep per parameter and
 * the temporaries of their step, per implementation. */
#ifndef VP_OPTIMIZER_H
#define VP_OPTIMIZER_H

#include <stdbool.h>

#include "recipe.h"

typedef struct vp_optimizer_kind {
    const char *name;
    const char *doc;
    unsigned states;                /* parameter-sized state tensors */
    double default_weight_decay;
    bool steps;                     /* false for "none": no optimizer at all */
    /* Parameter-sized temporaries alive together at the step's own peak:
     * per tensor for the for-loop implementation, per dtype group (the whole
     * model) for foreach; fused kernels keep none. */
    unsigned (*temporaries)(const vp_recipe *recipe, double weight_decay);
} vp_optimizer_kind;

const vp_optimizer_kind *vp_optimizer_at(unsigned index);
unsigned vp_optimizer_count(void);
int vp_optimizer_find(const char *name);

/* The recipe's weight decay, or the optimizer's default. */
double vp_optimizer_weight_decay(const vp_optimizer_kind *kind, const vp_recipe *recipe);

#endif
