/* op_sees.c — compiled by `make test-c` as an op file is (it includes
 * ops.h, as engine/ops/ files do): the public step and the tensor table
 * compile; with -DREACH=1 or -DREACH=2 it touches the driver's own state,
 * which must not compile (step_private.h defines it; ops never include it). */
#include "ops.h"

vp_t op_sees(vp_step *step);

vp_t op_sees(vp_step *step) {
#if REACH == 1
    return step->priv->loss;      /* the driver's private struct: incomplete here */
#elif REACH == 2
    return step->causal_mask;     /* a family's tensor: in the table, not a field */
#else
    return vp_step_tensor(step, VP_TENSOR_CAUSAL_MASK) + (vp_t)step->seq;
#endif
}
