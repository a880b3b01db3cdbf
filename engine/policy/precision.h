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
    bool fp8_gemms;      /* linear layers run their GEMMs in FP8 (Transformer Engine's, or torchao's below) */
    bool fp8_dynamic;    /* torchao's Float8Linear: casts made per GEMM from the 16-bit tensors, which it saves
                            for backward; no cached FP8 weight, no scaling history */
    const char *doc;
} vp_precision;

const vp_precision *vp_precision_get(vp_precision_id id);

/* Framework mixed precision: a 16-bit model with fp32 master weights and
 * states (Megatron-LM, DeepSpeed), FP8 GEMMs on top of it included: the
 * precisions with a master dtype. */
static inline bool vp_precision_mixed(const vp_precision *p) { return p->master != VP_DTYPE_NONE; }
bool vp_precision_is_mixed(vp_precision_id id);

/* What a framework's own mixed precision takes (DeepSpeed, Megatron-LM): a
 * mixed precision, or plain fp32 (no autocast, no pure 16-bit model). */
static inline bool vp_precision_own_mixed(const vp_precision *p) {
    return vp_precision_mixed(p) || p->compute == VP_FP32;
}

#endif
