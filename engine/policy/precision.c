/* precision.c — the precision policy table. */
#include "precision.h"

#include <stddef.h>

static const vp_precision policies[VP_PREC_COUNT] = {
    [VP_PREC_FP32] = {"fp32", VP_FP32, VP_FP32, VP_DTYPE_NONE, VP_FP32, VP_FP32, false, false,
                      "everything in fp32"},
    /* torch.optim creates its state with zeros_like(param): the param's dtype */
    [VP_PREC_BF16] = {"bf16", VP_BF16, VP_BF16, VP_DTYPE_NONE, VP_BF16, VP_BF16, false, false,
                      "pure bf16: model, gradients and optimizer states in bf16"},
    [VP_PREC_FP16] = {"fp16", VP_FP16, VP_FP16, VP_DTYPE_NONE, VP_FP16, VP_FP16, false, false,
                      "pure fp16: model, gradients and optimizer states in fp16"},
    [VP_PREC_AMP_BF16] = {"amp-bf16", VP_FP32, VP_FP32, VP_DTYPE_NONE, VP_FP32, VP_BF16, true, false,
                          "torch.autocast(bfloat16): fp32 model and states, bf16 matmuls"},
    [VP_PREC_AMP_FP16] = {"amp-fp16", VP_FP32, VP_FP32, VP_DTYPE_NONE, VP_FP32, VP_FP16, true, false,
                          "torch.autocast(float16) with GradScaler: fp32 model and states, fp16 matmuls"},
    /* Megatron-LM's Float16OptimizerWithFloat16Params and DeepSpeed's
     * FP16/BF16 optimizers: a 16-bit model, fp32 master weights and states */
    [VP_PREC_MIXED_BF16] = {"mixed-bf16", VP_BF16, VP_BF16, VP_FP32, VP_FP32, VP_BF16, false, false,
                            "bf16 model and gradients, fp32 master weights and optimizer states"},
    [VP_PREC_MIXED_FP16] = {"mixed-fp16", VP_FP16, VP_FP16, VP_FP32, VP_FP32, VP_FP16, false, false,
                            "fp16 model and gradients, fp32 master weights and optimizer states"},
    /* Transformer Engine under fp8_autocast (DelayedScaling): mixed-bf16
     * with every linear layer but the output head an FP8 GEMM */
    [VP_PREC_FP8] = {"fp8", VP_BF16, VP_BF16, VP_FP32, VP_FP32, VP_BF16, false, true,
                     "mixed-bf16 with Transformer Engine's FP8 linear layers (cached FP8 weights, FP8-saved inputs)"},
};

const vp_precision *vp_precision_get(vp_precision_id id) {
    if (id < 0 || id >= VP_PREC_COUNT) return NULL;
    return &policies[id];
}
