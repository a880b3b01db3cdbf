/* optimizer.h — the registered optimizers: the state they keep per
 * parameter and the temporaries of their step, per implementation. */
#ifndef VP_OPTIMIZER_H
#define VP_OPTIMIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "recipe.h"

/* What an optimizer sees of a parameter: its elements, and for a matrix
 * its rows (0 for a vector). */
typedef struct {
    uint64_t numel, rows;
} vp_param_shape;

typedef struct vp_optimizer_kind {
    const char *name;
    const char *doc;
    double default_weight_decay;
    bool steps;                     /* false for "none": no optimizer at all */
    /* Bytes of state one parameter keeps; `dtype` is the precision's state
     * dtype, for optimizers whose states follow it. */
    uint64_t (*state_bytes)(const vp_param_shape *p, vp_dtype dtype);
    /* Parameter-sized temporaries alive together at the step's own peak:
     * per tensor for a for-loop implementation, per dtype group (the whole
     * model) for foreach; fused kernels keep none. */
    unsigned (*temporaries)(const vp_recipe *recipe, double weight_decay);
    vp_dtype temp_dtype;            /* VP_DTYPE_NONE: the dtype the step runs in */
    bool per_tensor;                /* a Python loop over parameters whatever optimizer_impl says */
    bool paged;                     /* states in CUDA unified memory (bitsandbytes' paged optimizers) */
    bool bitsandbytes;              /* bitsandbytes' (the training process imports it) */
    /* A loop over parameters: of its temporaries, how many a Python local
     * still holds while the next parameter's are made (Adam's denom,
     * rebound only once the next one is computed). */
    unsigned carried;
    /* Of them, how many a Python local holds only while the next
     * parameter's first temporaries are made, gone before the rest and the
     * bytes beside them (Adafactor's update, rebound by `update = grad**2 +
     * eps`); none when the optional first moment is kept, which the update
     * then is. */
    unsigned carried_early;
    /* fp32 copies a step makes of a 16-bit parameter and its gradient
     * (Adafactor's p.float() and grad.float()), beside `temporaries`; none
     * when it steps on fp32 master weights */
    unsigned upcast_temps;
    /* Bytes alive beside a tensor's temporaries at its peak, given the
     * dtype the step runs in (Adafactor's row and column factors, SM3's
     * reductions); NULL: none. */
    uint64_t (*beside_temps)(const vp_param_shape *p, vp_dtype dtype);
    /* Bytes of a first moment the optimizer keeps only when asked
     * (recipe.first_moment: Adafactor's beta1, SM3's momentum); NULL: it
     * has no optional one. */
    uint64_t (*first_moment)(const vp_param_shape *p, vp_dtype dtype);
    /* With it, how many of the last tensor's replaced first moments a
     * Python local still holds through the next tensor's step (SM3's `m`),
     * beside `carried`. */
    unsigned moment_carried;
} vp_optimizer_kind;

const vp_optimizer_kind *vp_optimizer_at(unsigned index);
unsigned vp_optimizer_count(void);
int vp_optimizer_find(const char *name);

/* Whether the recipe asks for the optional first moment the optimizer has. */
static inline bool vp_optimizer_first_moment(const vp_optimizer_kind *kind, const vp_recipe *recipe) {
    return recipe->first_moment && kind->first_moment;
}

/* Bytes of state one parameter keeps under the recipe (its optional first
 * moment included when asked for). */
uint64_t vp_optimizer_state_bytes(const vp_optimizer_kind *kind, const vp_recipe *recipe, const vp_param_shape *p,
                                  vp_dtype dtype);

/* A recipe's optimizer keys that do not hold together, or NULL. */
const char *vp_optimizer_problem(const vp_recipe *recipe);

/* The recipe's weight decay, or the optimizer's default. */
double vp_optimizer_weight_decay(const vp_optimizer_kind *kind, const vp_recipe *recipe);

#endif
