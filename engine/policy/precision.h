/* precision.h — the named precision policies: which dtype parameters,
 * gradients, master weights, optimizer states and activations use. */
#ifndef VP_PRECISION_H
#define VP_PRECISION_H

#include <stdbool.h>

#include "dtype.h"
#include "recipe.h"

typedef struct {
    const char *name;
    vp_dtype params;     /* the model's parameters */
    vp_dtype grads;      /* their .grad */
    vp_dtype master;     /* fp32 master copy kept by the optimizer; NONE if absent */
    vp_dtype states;     /* optimizer state tensors */
    vp_dtype compute;    /* dtype of matmul outputs */
    bool autocast;       /* torch.autocast casts at op boundaries (CUDA op lists) */
    bool fp8_gemms;      /* Transformer Engine's linear layers run their GEMMs in FP8 */
    const char *doc;
} vp_precision;

const vp_precision *vp_precision_get(vp_precision_id id);

#endif
