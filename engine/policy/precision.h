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

/* The dtype ops compute in below autocast's fp32 ones: autocast's lower
 * precision, or the parameters' without autocast (the step's `low`). */
static inline vp_dtype vp_precision_low(const vp_precision *p) { return p->autocast ? p->compute : p->params; }

/* SDPA's kernel for one call: fp32 inputs run the memory-efficient kernel
 * whatever the backend, and so do 16-bit ones on a GPU without the flash
 * kernel (`no_flash`: before Ampere); 16-bit ones flash, or cuDNN's where
 * the stage runs it (vp_stage.sdpa_cudnn: sdpa_backend, by GPU). */
typedef enum { VP_SDPA_KERNEL_EFFICIENT, VP_SDPA_KERNEL_FLASH, VP_SDPA_KERNEL_CUDNN } vp_sdpa_kernel;
static inline vp_sdpa_kernel vp_sdpa_kernel_of(vp_dtype inputs, bool cudnn, bool no_flash) {
    if (inputs == VP_FP32 || no_flash) return VP_SDPA_KERNEL_EFFICIENT;
    return cudnn ? VP_SDPA_KERNEL_CUDNN : VP_SDPA_KERNEL_FLASH;
}

#endif
