/* test_steptime.c — the step-time model's primitives against hand-worked
 * figures: ring collectives (NCCL's bus-bandwidth definitions), the GEMM
 * roofline with tile and wave quantization, the pipeline bubble, and the
 * hardware a GPU's datasheet figures give. */
#include <math.h>

#include "check.h"
#include "steptime.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-15; }

static void collectives(void) {
    /* 8 ranks, 1 GB at 100 GB/s bus bandwidth: all-reduce 2 x 7/8 x 10 ms */
    CHECK(close_to(vp_time_allreduce(1e9, 8, 100e9), 2.0 * 7 / 8 * 0.01));
    /* all-gather and reduce-scatter move half of that */
    CHECK(close_to(vp_time_allgather(1e9, 8, 100e9), 7.0 / 8 * 0.01));
    CHECK(close_to(vp_time_alltoall(1e9, 4, 100e9), 3.0 / 4 * 0.01));
    /* one rank, no bytes, no bandwidth: nothing to move */
    CHECK(vp_time_allreduce(1e9, 1, 100e9) == 0);
    CHECK(vp_time_allreduce(0, 8, 100e9) == 0);
    CHECK(vp_time_allgather(1e9, 8, 0) == 0);
    /* two ranks: a ring all-reduce sends the whole buffer once each way */
    CHECK(close_to(vp_time_allreduce(1e9, 2, 100e9), 0.01));
}

static vp_time_hw hardware(void) {
    vp_time_hw hw = {0};
    hw.matmul_flops = 312e12;
    hw.attention_flops = 312e12;
    hw.matmul_cap = 0.859;
    hw.memory_bw = 2e12;
    hw.sms = 108;
    return hw;
}

static void roofline(void) {
    vp_time_hw hw = hardware();
    /* a 6912 x 16384 output fills 27 x 128 = 3456 tiles of 256x128, 32
     * waves of 108 SMs exactly: no waste */
    CHECK(close_to(vp_time_wave_efficiency(6912, 16384, 1, 108), 1.0));
    /* a 256x128 output on 108 SMs: one wave whichever way round (one
     * 256x128 tile, or two narrowed 128x128 ones: 2 of 108 slots' worth) */
    CHECK(close_to(vp_time_wave_efficiency(256, 128, 1, 108), 2.0 / 108));
    /* 109 of them: 109 big tiles take two waves (109 of 216), 218 narrow
     * ones three (218 of 324 narrow slots): the better is kept */
    CHECK(close_to(vp_time_wave_efficiency(256, 128, 109, 108), 218.0 / 324));
    /* a partial tile costs a whole one: 300 rows in 128-row tiles (the
     * better orientation) use 300 of 384 */
    CHECK(close_to(vp_time_wave_efficiency(300, 128, 108, 108), 300.0 / 384));
    /* an output smaller than a tile gets a tile its size */
    CHECK(close_to(vp_time_wave_efficiency(128, 128, 108, 108), 1.0));
    /* no SM count: no wave model */
    CHECK(vp_time_wave_efficiency(100, 100, 1, 0) == 1.0);
    /* compute-bound: 2mnk / (peak x cap) with a full last wave */
    double m = 6912, n = 16384, k = 2048;
    CHECK(close_to(vp_time_matmul(m, n, k, 1, 2, &hw, hw.matmul_flops), 2 * m * n * k / (312e12 * 0.859)));
    /* memory-bound: a matrix-vector product is its bytes over bandwidth */
    double bytes = 2 * (1.0 * 8192 + 8192.0 * 8192 + 8192);
    CHECK(close_to(vp_time_matmul(1, 8192, 8192, 1, 2, &hw, hw.matmul_flops), bytes / 2e12));
    /* batched GEMMs add up */
    double one = vp_time_matmul(2048, 2048, 128, 1, 2, &hw, hw.matmul_flops);
    CHECK(vp_time_matmul(2048, 2048, 128, 64, 2, &hw, hw.matmul_flops) <= 64 * one);
    CHECK(vp_time_matmul(0, 10, 10, 1, 2, &hw, hw.matmul_flops) == 0);
}

static void bubble(void) {
    /* Narayanan et al. 2021: (p - 1) micro-batch times for GPipe and 1F1B,
     * (p - 1) / v interleaved */
    CHECK(vp_time_bubble_microbatches(VP_PP_1F1B, 8, 1) == 7);
    CHECK(vp_time_bubble_microbatches(VP_PP_GPIPE, 4, 1) == 3);
    CHECK(close_to(vp_time_bubble_microbatches(VP_PP_INTERLEAVED, 8, 3), 7.0 / 3));
    /* virtual stages mean nothing without the interleaved schedule */
    CHECK(vp_time_bubble_microbatches(VP_PP_1F1B, 8, 3) == 7);
    CHECK(vp_time_bubble_microbatches(VP_PP_1F1B, 1, 1) == 0);
    /* the DualPipe README's table (deepseek-ai/DualPipe), a micro-batch
     * through a stage F + B = 3 equal passes (B the full backward = 2):
     * ZB1P (PP - 1)(F + B - 2W) = 7 x 1 pass for 8 stages: 7 / 3 of a
     * micro-batch; over 2 chunks a pass is half a stage's: 7 / 6 */
    CHECK(close_to(vp_time_bubble_microbatches(VP_PP_TORCH_INTERLEAVED_ZB, 8, 1), 7.0 / 3));
    CHECK(close_to(vp_time_bubble_microbatches(VP_PP_TORCH_INTERLEAVED_ZB, 8, 2), 7.0 / 6));
    /* DualPipe (PP/2 - 1)(F&B + B - 3W) over PP = 16 chunks of half a
     * stage (F 1/6, B 2/6, W 1/6, F&B 3/6 of a micro-batch): 7 x 2/6 */
    CHECK(close_to(vp_time_bubble_microbatches(VP_PP_TORCH_DUALPIPEV, 8, 2), 7.0 / 3));
    /* ZB-V at equal pass times: none (schedules.py's docstring) */
    CHECK(vp_time_bubble_microbatches(VP_PP_TORCH_ZBV, 8, 2) == 0);
}

static void gpu_figures(void) {
    vp_recipe r;
    vp_recipe_defaults(&r);
    r.precision = VP_PREC_MIXED_BF16;
    vp_gpu a100 = {.memory_bytes = 80ull << 30, .compute_major = 8, .fp32_tflops = 19.5, .fp16_tflops = 312,
                   .bf16_tflops = 312, .memory_gbps = 2039, .interconnect_gbps = 600, .network_gbps = 25};
    vp_time_hw hw;
    CHECK(vp_time_hw_from_gpu(&a100, &r, &hw));
    CHECK(close_to(hw.matmul_flops, 312e12));
    CHECK(close_to(hw.matmul_cap, 0.859));
    CHECK(hw.sms == 108);
    /* the GPU file's own SM count wins over the generation's */
    vp_gpu l4_like = a100;
    l4_like.sms = 58;
    CHECK(vp_time_hw_from_gpu(&l4_like, &r, &hw) && hw.sms == 58);
    /* NVLink: 300 GB/s a direction at NCCL's ~70 % */
    CHECK(close_to(hw.link_busbw, 300e9 * 0.70));
    CHECK(close_to(hw.network_bw, 25e9 * 0.80));
    /* fp32 matmuls run at the fp32 peak (no TF32 by default) */
    r.precision = VP_PREC_FP32;
    CHECK(vp_time_hw_from_gpu(&a100, &r, &hw));
    CHECK(close_to(hw.matmul_flops, 19.5e12));
    /* FP8 needs an FP8 peak; without one the 16-bit peak */
    r.precision = VP_PREC_FP8;
    CHECK(vp_time_hw_from_gpu(&a100, &r, &hw));
    CHECK(close_to(hw.matmul_flops, 312e12));
    vp_gpu h100 = {.memory_bytes = 80ull << 30, .compute_major = 9, .bf16_tflops = 989.5, .fp16_tflops = 989.5,
                   .fp8_tflops = 1979, .memory_gbps = 3350, .interconnect_gbps = 900};
    CHECK(vp_time_hw_from_gpu(&h100, &r, &hw));
    CHECK(close_to(hw.matmul_flops * hw.matmul_cap, 1979e12 * 0.60));
    CHECK(close_to(hw.attention_flops, 989.5e12));
    /* no network figure: DGX H100's 400 Gb/s a GPU */
    CHECK(close_to(hw.network_bw, 50e9 * 0.80));
    /* no GPU, or no peak: no time */
    CHECK(!vp_time_hw_from_gpu(NULL, &r, &hw));
    vp_gpu bare = {.memory_bytes = 1ull << 30};
    CHECK(!vp_time_hw_from_gpu(&bare, &r, &hw));
}

int main(void) {
    collectives();
    roofline();
    bubble();
    gpu_figures();
    return check_summary("steptime");
}
