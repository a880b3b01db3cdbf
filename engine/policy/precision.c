/* precision.c — the precision policy table. */
#include "precision.h"

#include <stddef.h>

/* In the order a recipe's `precision` key lists them (vp_precision_id);
 * a mixed precision is one with a master dtype (vp_precision_mixed). */
static const vp_precision policies[VP_PREC_COUNT] = {
    [VP_PREC_FP32] = {.name = "fp32", .params = VP_FP32, .grads = VP_FP32, .master = VP_DTYPE_NONE,
                      .states = VP_FP32, .compute = VP_FP32, .doc = "everything in fp32"},
    /* torch.optim creates its state with zeros_like(param): the param's dtype */
    [VP_PREC_BF16] = {.name = "bf16", .params = VP_BF16, .grads = VP_BF16, .master = VP_DTYPE_NONE,
                      .states = VP_BF16, .compute = VP_BF16,
                      .doc = "pure bf16: model, gradients and optimizer states in bf16"},
    [VP_PREC_FP16] = {.name = "fp16", .params = VP_FP16, .grads = VP_FP16, .master = VP_DTYPE_NONE,
                      .states = VP_FP16, .compute = VP_FP16,
                      .doc = "pure fp16: model, gradients and optimizer states in fp16"},
    [VP_PREC_AMP_BF16] = {.name = "amp-bf16", .params = VP_FP32, .grads = VP_FP32, .master = VP_DTYPE_NONE,
                          .states = VP_FP32, .compute = VP_BF16, .autocast = true,
                          .doc = "torch.autocast(bfloat16): fp32 model and states, bf16 matmuls"},
    [VP_PREC_AMP_FP16] = {.name = "amp-fp16", .params = VP_FP32, .grads = VP_FP32, .master = VP_DTYPE_NONE,
                          .states = VP_FP32, .compute = VP_FP16, .autocast = true,
                          .doc = "torch.autocast(float16) with GradScaler: fp32 model and states, fp16 matmuls"},
    /* Megatron-LM's Float16OptimizerWithFloat16Params and DeepSpeed's
     * FP16/BF16 optimizers: a 16-bit model, fp32 master weights and states */
    [VP_PREC_MIXED_BF16] = {.name = "mixed-bf16", .params = VP_BF16, .grads = VP_BF16, .master = VP_FP32,
                            .states = VP_FP32, .compute = VP_BF16,
                            .doc = "bf16 model and gradients, fp32 master weights and optimizer states"},
    [VP_PREC_MIXED_FP16] = {.name = "mixed-fp16", .params = VP_FP16, .grads = VP_FP16, .master = VP_FP32,
                            .states = VP_FP32, .compute = VP_FP16,
                            .doc = "fp16 model and gradients, fp32 master weights and optimizer states"},
    /* Transformer Engine under fp8_autocast (DelayedScaling): mixed-bf16
     * with every linear layer but the output head an FP8 GEMM */
    [VP_PREC_FP8] = {.name = "fp8", .params = VP_BF16, .grads = VP_BF16, .master = VP_FP32, .states = VP_FP32,
                     .compute = VP_BF16, .fp8_gemms = true,
                     .doc = "mixed-bf16 with Transformer Engine's FP8 linear layers (cached FP8 weights, FP8-saved "
                            "inputs)"},
    /* torchao's convert_to_float8_training (torchao 0.19, float8/float8_linear.py
     * Float8Linear; torchtitan's float8 converter, components/quantization/
     * float8.py): mixed-bf16 (FSDP2's bf16 compute over fp32 parameters
     * under torchtitan) with every nn.Linear but the output head an FP8 GEMM
     * under the default recipe, dynamic tensorwise scaling */
    [VP_PREC_FP8_TORCHAO] = {.name = "fp8-torchao", .params = VP_BF16, .grads = VP_BF16, .master = VP_FP32,
                             .states = VP_FP32, .compute = VP_BF16, .fp8_gemms = true, .fp8_dynamic = true,
                             .doc = "mixed-bf16 with torchao's Float8Linear (dynamic tensorwise scaling, eager: "
                                    "casts per GEMM, 16-bit tensors saved)"},
    /* transformers' Trainer with bf16=True / fp16=True over a model loaded
     * in that dtype (torch_dtype): accelerate's Accelerator(mixed_precision=)
     * wraps the forward in torch.autocast whatever the weights' dtype
     * (accelerate/utils/modeling.py get_mixed_precision_context_manager), and
     * nothing upcasts them: the weights, gradients and torch.optim's states
     * stay 16-bit, while autocast still runs its fp32 list (layer_norm,
     * softmax, ...) in fp32 and casts fp32 tensors (PEFT's fp32 adapters,
     * upcast norm outputs) down at each matmul. fp16's GradScaler unscales
     * only fp32 gradients: trainable parameters must be fp32 (adapters). */
    [VP_PREC_BF16_AUTOCAST] = {.name = "bf16-autocast", .params = VP_BF16, .grads = VP_BF16,
                               .master = VP_DTYPE_NONE, .states = VP_BF16, .compute = VP_BF16, .autocast = true,
                               .doc = "torch.autocast(bfloat16) over bf16 weights: bf16 model, gradients and states "
                                      "(the Trainer's bf16=True over a model loaded in bf16)"},
    [VP_PREC_FP16_AUTOCAST] = {.name = "fp16-autocast", .params = VP_FP16, .grads = VP_FP16,
                               .master = VP_DTYPE_NONE, .states = VP_FP16, .compute = VP_FP16, .autocast = true,
                               .doc = "torch.autocast(float16) with GradScaler over fp16 weights, fp32 adapters "
                                      "trained (the Trainer's fp16=True over a model loaded in fp16)"},
};

const vp_precision *vp_precision_get(vp_precision_id id) {
    if (id < 0 || id >= VP_PREC_COUNT) return NULL;
    return &policies[id];
}

bool vp_precision_is_mixed(vp_precision_id id) { return vp_precision_mixed(&policies[id]); }
