/* test_dtype.c — tensor byte counts and type promotion against hand sums. */
#include "check.h"
#include "dtype.h"

static uint64_t bytes_of(vp_dtype dtype, uint64_t numel) {
    uint64_t bytes = UINT64_MAX;
    CHECK(vp_tensor_bytes(dtype, numel, &bytes));
    return bytes;
}

/* Plain types: numel x element size (torch.Tensor.element_size(); bool is a
 * byte). Sub-byte int4 packs two per byte, so an odd count rounds up. */
static void test_plain(void) {
    CHECK_EQ_U64(bytes_of(VP_FP32, 3), 12);
    CHECK_EQ_U64(bytes_of(VP_TF32, 3), 12); /* tf32 is stored as fp32 */
    CHECK_EQ_U64(bytes_of(VP_BF16, 7), 14);
    CHECK_EQ_U64(bytes_of(VP_FP16, 7), 14);
    CHECK_EQ_U64(bytes_of(VP_FP8_E4M3, 5), 5);
    CHECK_EQ_U64(bytes_of(VP_FP8_E5M2, 5), 5);
    CHECK_EQ_U64(bytes_of(VP_INT64, 3), 24);
    CHECK_EQ_U64(bytes_of(VP_BOOL, 9), 9);
    CHECK_EQ_U64(bytes_of(VP_INT4, 1), 1);
    CHECK_EQ_U64(bytes_of(VP_INT4, 7), 4); /* 28 bits -> 4 bytes */
    CHECK_EQ_U64(bytes_of(VP_INT4, 8), 4);
    CHECK_EQ_U64(bytes_of(VP_FP32, 0), 0);
    /* a 4096 x 4096 weight: 64 MiB in fp32, 32 MiB in bf16 */
    CHECK_EQ_U64(bytes_of(VP_FP32, 4096u * 4096u), 64u << 20);
    CHECK_EQ_U64(bytes_of(VP_BF16, 4096u * 4096u), 32u << 20);
}

/* QLoRA (Dettmers et al. 2023), section 2 "Double Quantization": NF4 keeps
 * one fp32 absmax per block of 64 (32/64 = 0.5 bits per parameter); double
 * quantization stores those as 8-bit values with one fp32 constant per 256
 * of them: 8/64 + 32/(64*256) = 0.127 bits per parameter. */
static void test_block_quantized(void) {
    const uint64_t n = 4096u * 4096u; /* 16,777,216 weights, 262,144 blocks */
    /* nf4: 8,388,608 packed bytes + 262,144 x 4 absmax bytes */
    CHECK_EQ_U64(bytes_of(VP_NF4, n), 8388608u + 1048576u);
    CHECK_EQ_U64(bytes_of(VP_FP4, n), 8388608u + 1048576u);
    /* 4.5 bits per weight exactly */
    CHECK_EQ_U64(bytes_of(VP_NF4, n) * 8 * 2, n * 9);
    /* nf4-dq: 262,144 one-byte absmax + 262,144/256 = 1024 fp32 constants */
    CHECK_EQ_U64(bytes_of(VP_NF4_DQ, n), 8388608u + 262144u + 1024u * 4u);
    CHECK_EQ_U64(bytes_of(VP_FP4_DQ, n), 8388608u + 262144u + 1024u * 4u);
    /* the paper's 0.127 bits of scales per parameter: (262144+4096)*8/n */
    CHECK((double)((262144u + 4096u) * 8u) / (double)n > 0.1269 &&
          (double)((262144u + 4096u) * 8u) / (double)n < 0.1270);

    /* partial blocks still get a scale: 65 weights = 33 bytes + 2 blocks */
    CHECK_EQ_U64(bytes_of(VP_NF4, 65), 33 + 2 * 4);
    /* ... and a partial super-block its constant: 2 bytes + 1 x 4 */
    CHECK_EQ_U64(bytes_of(VP_NF4_DQ, 65), 33 + 2 * 1 + 1 * 4);
    /* 257 blocks (16,448 weights) need two fp32 constants */
    CHECK_EQ_U64(bytes_of(VP_NF4_DQ, 257u * 64u), 257u * 32u + 257u + 2u * 4u);

    const vp_dtype_info *nf4 = vp_dtype_describe(VP_NF4_DQ);
    CHECK(nf4 && nf4->block == 64 && nf4->super_block == 256);
    CHECK(vp_dtype_describe(VP_DTYPE_COUNT) == NULL);
}

/* A total past 2^64 is refused, never wrapped. */
static void test_overflow(void) {
    uint64_t bytes = 7;
    CHECK(!vp_tensor_bytes(VP_BF16, UINT64_C(1) << 63, &bytes)); /* 2^64 bytes */
    CHECK(!vp_tensor_bytes(VP_FP32, UINT64_MAX / 2, &bytes));
    CHECK(!vp_tensor_bytes(VP_INT64, UINT64_MAX, &bytes));
    /* NF4 of 2^64 - 1 elements: 2^63 bytes of data and 2^60 of absmax fit */
    CHECK(vp_tensor_bytes(VP_NF4, UINT64_MAX, &bytes));
    CHECK_EQ_U64(bytes, (UINT64_MAX / 2 + 1) + ((UINT64_MAX / 64 + 1) * 4));
    CHECK(!vp_tensor_bytes(VP_INT8, UINT64_MAX, &bytes) || bytes == UINT64_MAX);
    CHECK(!vp_tensor_bytes(VP_DTYPE_COUNT, 1, &bytes)); /* not a dtype */
    /* large but representable: 2^40 fp32 elements are 4 TiB */
    CHECK(vp_tensor_bytes(VP_FP32, UINT64_C(1) << 40, &bytes));
    CHECK_EQ_U64(bytes, UINT64_C(1) << 42);
}

/* torch.promote_types for the float pairs the engine meets: fp32 wins over
 * a 16-bit type in either order; equal types stay; an integer operand takes
 * the float type (torch.result_type(int64 tensor, bf16 tensor) = bf16). */
static void test_promote(void) {
    CHECK(vp_dtype_promote(VP_FP32, VP_BF16) == VP_FP32);
    CHECK(vp_dtype_promote(VP_BF16, VP_FP32) == VP_FP32);
    CHECK(vp_dtype_promote(VP_FP16, VP_FP32) == VP_FP32);
    CHECK(vp_dtype_promote(VP_BF16, VP_BF16) == VP_BF16);
    CHECK(vp_dtype_promote(VP_FP32, VP_FP32) == VP_FP32);
    CHECK(vp_dtype_promote(VP_INT64, VP_BF16) == VP_BF16);
    CHECK(vp_dtype_promote(VP_BF16, VP_INT64) == VP_BF16);
    CHECK(vp_dtype_promote(VP_BOOL, VP_FP32) == VP_FP32);
    CHECK(vp_dtype_is_float(VP_BF16) && vp_dtype_is_float(VP_FP8_E4M3));
    CHECK(!vp_dtype_is_float(VP_INT64) && !vp_dtype_is_float(VP_NF4));
}

/* Sizes whose bytes fit in 64 bits though numel x bits does not (2^60 fp32
 * elements are 2^62 bytes); torch.promote_types(bfloat16, float16) is
 * float32, in either order. */
static void test_edges(void) {
    uint64_t bytes = 0;
    CHECK(vp_tensor_bytes(VP_FP32, UINT64_C(1) << 60, &bytes));
    CHECK_EQ_U64(bytes, UINT64_C(1) << 62);
    CHECK(vp_tensor_bytes(VP_INT4, UINT64_C(1) << 63, &bytes));
    CHECK_EQ_U64(bytes, UINT64_C(1) << 62);
    CHECK(vp_dtype_promote(VP_BF16, VP_FP16) == VP_FP32);
    CHECK(vp_dtype_promote(VP_FP16, VP_BF16) == VP_FP32);
}

int main(void) {
    test_plain();
    test_block_quantized();
    test_overflow();
    test_promote();
    test_edges();
    return check_summary("test_dtype");
}
