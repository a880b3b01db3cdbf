/* dtype.c — the element-type table and tensor byte counts. */
#include "dtype.h"

#include <stddef.h>

/* Block-quantized formats follow bitsandbytes (Dettmers et al. 2023, QLoRA,
 * section 2 and Appendix: NF4/FP4 use blocks of 64 with an fp32 absmax each;
 * double quantization stores those absmax values as 8-bit numbers with one
 * fp32 scale per 256 of them: 0.5 -> 0.127 bits per parameter). */
static const vp_dtype_info dtype_table[VP_DTYPE_COUNT] = {
    [VP_DTYPE_NONE] = {"none", 0, 0, 0, 0, 0},
    [VP_FP32] = {"fp32", 32, 0, 0, 0, 0},
    [VP_TF32] = {"tf32", 32, 0, 0, 0, 0}, /* stored as fp32; only the matmul rounds */
    [VP_FP16] = {"fp16", 16, 0, 0, 0, 0},
    [VP_BF16] = {"bf16", 16, 0, 0, 0, 0},
    [VP_FP8_E4M3] = {"fp8-e4m3", 8, 0, 0, 0, 0},
    [VP_FP8_E5M2] = {"fp8-e5m2", 8, 0, 0, 0, 0},
    [VP_INT64] = {"int64", 64, 0, 0, 0, 0},
    [VP_INT32] = {"int32", 32, 0, 0, 0, 0},
    [VP_INT8] = {"int8", 8, 0, 0, 0, 0},
    [VP_UINT8] = {"uint8", 8, 0, 0, 0, 0},
    [VP_BOOL] = {"bool", 8, 0, 0, 0, 0}, /* torch.bool is one byte per element */
    [VP_INT4] = {"int4", 4, 0, 0, 0, 0},
    [VP_NF4] = {"nf4", 4, 64, 4, 0, 0},
    [VP_NF4_DQ] = {"nf4-dq", 4, 64, 1, 256, 4},
    [VP_FP4] = {"fp4", 4, 64, 4, 0, 0},
    [VP_FP4_DQ] = {"fp4-dq", 4, 64, 1, 256, 4},
};

const char *const vp_dtype_names[VP_DTYPE_COUNT + 1] = {
    "none", "fp32", "tf32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int64", "int32",
    "int8", "uint8", "bool", "int4", "nf4", "nf4-dq", "fp4", "fp4-dq", NULL,
};

const vp_dtype_info *vp_dtype_describe(vp_dtype dtype) {
    if (dtype < 0 || dtype >= VP_DTYPE_COUNT) return NULL;
    return &dtype_table[dtype];
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

bool vp_tensor_bytes(vp_dtype dtype, uint64_t numel, uint64_t *bytes) {
    const vp_dtype_info *info = vp_dtype_describe(dtype);
    uint64_t data, scales = 0;
    if (!info) return false;
    if (info->bits % 8 == 0 && !info->block) /* whole bytes, unblocked: most tensors */
        return !__builtin_mul_overflow(numel, (uint64_t)(info->bits / 8), bytes);
    /* eight elements take `bits` bytes; sub-byte elements of the rest are
     * packed and the last byte rounded up (never numel * bits: that can
     * overflow where the bytes do not) */
    if (__builtin_mul_overflow(numel / 8, (uint64_t)info->bits, &data) ||
        __builtin_add_overflow(data, ceil_div(numel % 8 * info->bits, 8), &data))
        return false;
    if (info->block) {
        uint64_t blocks = ceil_div(numel, info->block), super = 0;
        if (__builtin_mul_overflow(blocks, (uint64_t)info->scale_bytes, &scales)) return false;
        if (info->super_block &&
            (__builtin_mul_overflow(ceil_div(blocks, info->super_block), (uint64_t)info->super_scale_bytes, &super) ||
             __builtin_add_overflow(scales, super, &scales)))
            return false;
    }
    return !__builtin_add_overflow(data, scales, bytes);
}

bool vp_dtype_is_float(vp_dtype dtype) {
    return dtype == VP_FP32 || dtype == VP_TF32 || dtype == VP_FP16 || dtype == VP_BF16 ||
           dtype == VP_FP8_E4M3 || dtype == VP_FP8_E5M2;
}

/* torch.promote_types: a float wins over integers and bool; the wider float
 * wins; fp16 with bf16 (neither holds the other) gives fp32. */
static int rank(vp_dtype d) {
    switch (d) {
    case VP_FP32:
    case VP_TF32: return 4;
    case VP_FP16:
    case VP_BF16: return 3;
    case VP_FP8_E4M3:
    case VP_FP8_E5M2: return 2;
    case VP_BOOL: return 0;
    default: return 1;
    }
}

vp_dtype vp_dtype_promote(vp_dtype a, vp_dtype b) {
    if (a == b) return a;
    if (rank(a) == 3 && rank(b) == 3) return VP_FP32;
    if (rank(a) == 1 && rank(b) == 1) return a == VP_INT64 || b == VP_INT64 ? VP_INT64 : a;
    return rank(b) > rank(a) ? b : a;
}
