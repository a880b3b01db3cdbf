/* dtype.h — element types, including block-quantized formats, and tensor bytes. */
#ifndef VP_DTYPE_H
#define VP_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    VP_DTYPE_NONE = 0,
    VP_FP32,
    VP_TF32,
    VP_FP16,
    VP_BF16,
    VP_FP8_E4M3,
    VP_FP8_E5M2,
    VP_INT64,
    VP_INT32,
    VP_INT8,
    VP_UINT8,
    VP_BOOL,
    VP_INT4,
    VP_NF4,
    VP_NF4_DQ,
    VP_FP4,
    VP_FP4_DQ,
    VP_DTYPE_COUNT
} vp_dtype;

/* How one element type is stored. Block-quantized formats keep a scale per
 * block of elements, and with double quantization the scales themselves are
 * quantized in super-blocks that share one higher-precision scale. */
typedef struct {
    const char *name;
    unsigned bits;              /* storage bits per element */
    unsigned block;             /* elements per scale block; 0 = unscaled */
    unsigned scale_bytes;       /* bytes of one block scale */
    unsigned super_block;       /* blocks per second-level scale; 0 = none */
    unsigned super_scale_bytes; /* bytes of one second-level scale */
} vp_dtype_info;

const vp_dtype_info *vp_dtype_describe(vp_dtype dtype);

/* Names in vp_dtype order, NULL-terminated (slot 0 is "none"): the list that
 * luaL_checkoption takes. */
extern const char *const vp_dtype_names[];

/* Bytes of a tensor of `numel` elements, scales included. Returns false when
 * the result would not fit in 64 bits. */
bool vp_tensor_bytes(vp_dtype dtype, uint64_t numel, uint64_t *bytes);

/* The same for element counts already checked (vp_numel and friends record
 * an overflow in the simulator's status): 0 where it would not fit. */
static inline uint64_t vp_bytes_of(vp_dtype dtype, uint64_t numel) {
    uint64_t bytes;
    return vp_tensor_bytes(dtype, numel, &bytes) ? bytes : 0;
}

/* True for fp32/tf32/fp16/bf16/fp8: the types autograd computes in. */
bool vp_dtype_is_float(vp_dtype dtype);

/* fp16 or bf16: the 16-bit floating dtypes. */
static inline bool vp_dtype_is_half(vp_dtype dtype) { return dtype == VP_FP16 || dtype == VP_BF16; }

/* The wider of two floating types, as PyTorch's type promotion picks it for
 * a binary elementwise op (fp32 wins over 16-bit; equal types stay). */
vp_dtype vp_dtype_promote(vp_dtype a, vp_dtype b);

#endif
