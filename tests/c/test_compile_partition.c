/* test_compile_partition.c — the min-cut partitioner (compile_partition.c)
 * on hand-made regions whose cuts are worked out by hand below, from the
 * rules of torch/_functorch/partitioners.py (c28ba8e) that the file cites. */
#include "check.h"
#include "compile_partition.h"

#define V(bytes_, kind_, ...) {.bytes = (bytes_), .kind = (kind_), __VA_ARGS__}

/* x -> a = mm(x, ...) -> b = a.float() -> c = b.sigmoid(), backward reads c
 * (sigmoid's backward: pointwise, fusible). Candidate cuts (weights from
 * get_node_weight; dist_from_bw: c 1, b 2, a 3, x 4):
 *   c: 400 * 1.1^1 = 440, its only reader fusible: not materialized, x2 = 880
 *   b: 400 * 1.1^2 = 484, user c fusible: x2 = 968
 *   a: int(200 * 1.1^3) = 266, its users cannot fuse into a matmul: materialized
 * a is banned (compute intensive), x is banned (a primal), and x's path
 * runs through a: the min cut saves a alone, 266. */
static void test_matmul_then_pointwise(void) {
    vp_cp_value v[] = {
        V(100, VP_CP_INPUT, .n_inputs = 0),
        V(200, VP_CP_COMPUTE, .n_inputs = 1, .inputs = {0}),
        V(400, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {1}),
        V(400, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {2}, .backward_reads = true),
    };
    bool saved[4] = {0};
    CHECK(vp_compile_partition(v, 4, saved) == VP_CP_OK);
    CHECK(!saved[0] && saved[1] && !saved[2] && !saved[3]);
}

/* An RMSNorm in fp32 before a matmul:
 *   0 x (bf16 input, 100) 1 xf = x.float() (200, read by the norm's backward)
 *   2 ms = mean(xf^2) (2)  3 r = rsqrt(ms) (4, read by the norm's backward)
 *   4 y = xf * r (200)     5 yb = y.to(bf16) (100, read by mm's backward: unfusible)
 *   6 w (a parameter, 50, read by mm's backward)  7 o = mm(yb, w) (100)
 * Bans: x and w (primals), ms (a reduction: 2 * 4 < 200), yb (materialized
 * in backward), o (compute). Weights: x int(100 * 1.1^2) = 121 (a
 * placeholder: materialized); xf 220, x2 = 440 (all readers fusible); ms
 * int(2 * 1.21) = 2, x2 = 4; r int(4 * 1.1) = 4, x2 = 8; yb 110; w 0
 * (parameters are free). To block xf, x (121) beats xf (440); to block r,
 * ms (4) beats r (8); yb and w must be cut: saved {x, ms, yb, w}. */
static void test_rms_norm_before_matmul(void) {
    vp_cp_value v[] = {
        V(100, VP_CP_INPUT, .n_inputs = 0),
        V(200, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {0}, .backward_reads = true),
        V(2, VP_CP_REDUCTION, .n_inputs = 1, .inputs = {1}),
        V(4, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {2}, .backward_reads = true),
        V(200, VP_CP_POINTWISE, .n_inputs = 2, .inputs = {1, 3}),
        V(100, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {4}, .backward_reads = true, .backward_unfusible = true),
        V(50, VP_CP_PARAM, .backward_reads = true, .backward_unfusible = true),
        V(100, VP_CP_COMPUTE, .n_inputs = 2, .inputs = {5, 6}),
    };
    bool saved[8] = {0};
    CHECK(vp_compile_partition(v, 8, saved) == VP_CP_OK);
    bool want[8] = {true, false, true, false, false, true, true, false};
    for (int i = 0; i < 8; i++) CHECK(saved[i] == want[i]);

    /* a selective policy's MUST_SAVE on xf bans its recomputation: then xf
     * (440) must be cut, and x is no longer needed */
    v[1].must_save = true;
    CHECK(vp_compile_partition(v, 8, saved) == VP_CP_OK);
    bool want_tagged[8] = {false, true, true, false, false, true, true, false};
    for (int i = 0; i < 8; i++) CHECK(saved[i] == want_tagged[i]);

    /* a selective checkpoint under compile (torchtitan's op-selective): the
     * policy tags the matmul MUST_SAVE and every other op PREFER_RECOMPUTE;
     * each tagged value gets an infinite _in -> sink edge and no weight
     * edge, so only primals can be cut: x (121, to recompute the norm) and
     * w (0). The matmul's output, banned, is not read by backward: not
     * saved either. */
    v[1].must_save = false;
    for (int i = 1; i <= 5; i++) v[i].must_recompute = true;
    v[7].must_save = true;
    CHECK(vp_compile_partition(v, 8, saved) == VP_CP_OK);
    bool want_policy[8] = {true, false, false, false, false, false, true, false};
    for (int i = 0; i < 8; i++) CHECK(saved[i] == want_policy[i]);
}

/* ban_if_used_far_apart: x = in.neg() (order 1) feeds a pointwise p
 * (2), then a matmul m (3: the first unfusible node downstream of x's
 * users) and, beyond it, a fusible add s = x + m (4) that backward reads
 * through a fusible op. dist_from_bw: s 1, m 1, p 2, x 2, in 3. Without
 * the heuristic, blocking s costs the least at in: int(100 * 1.1^3) = 133
 * (a placeholder: materialized), against x 121 x2 = 242 and s 110 x2 = 220;
 * saved {in, m}. The heuristic bans s (a fusible user of x beyond the
 * first unfusible node), so s itself is cut: saved {m, s}. */
static void test_used_far_apart(void) {
    vp_cp_value v[] = {
        V(100, VP_CP_INPUT, .n_inputs = 0),
        V(100, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {0}),
        V(100, VP_CP_POINTWISE, .n_inputs = 1, .inputs = {1}),
        V(100, VP_CP_COMPUTE, .n_inputs = 1, .inputs = {2}, .backward_reads = true, .backward_unfusible = true),
        V(100, VP_CP_POINTWISE, .n_inputs = 2, .inputs = {1, 3}, .backward_reads = true),
    };
    bool saved[5] = {0};
    CHECK(vp_compile_partition(v, 5, saved) == VP_CP_OK);
    CHECK(!saved[0] && !saved[1] && !saved[2] && saved[3] && saved[4]);
}

/* A chain of n - 1 pointwise values from an input, backward reading the
 * last; sizes 1000 bytes, then 250, 63, 16, 4, 1 (each at least a quarter
 * of the one before: no reduction ban, which would end the walk), then
 * 1e6 and 1e6. */
static void chain(vp_cp_value *v, uint32_t n) {
    static const uint64_t tail[] = {250, 63, 16, 4, 1, 1000000, 1000000};
    v[0] = (vp_cp_value){.bytes = 1000, .kind = VP_CP_INPUT};
    for (uint32_t i = 1; i < n; i++) {
        uint64_t bytes = i + 7 < n ? 1000 : tail[i + 7 - n];
        v[i] = (vp_cp_value){.bytes = bytes, .kind = VP_CP_POINTWISE, .n_inputs = 1, .inputs = {i - 1}};
    }
    v[n - 1].backward_reads = true;
}

/* ban_if_long_fusible_chains. The cheapest cut is the 1-byte value:
 * int(1 x 1.1^3) = 1, x2 = 2 (the last value would cost int(1e6 x 1.1)
 * x 2). With 103 values the walk from value 1 reaches the last, 102,
 * more than 100 positions on with nothing else waiting and bans it: the
 * last value is saved, and nothing else. With 102 values it reaches no
 * further than 101 = 1 + 100: the cheap cut. */
static void test_long_fusible_chain(void) {
    vp_cp_value v[103];
    bool saved[103];
    for (uint32_t n = 102; n <= 103; n++) {
        chain(v, n);
        CHECK(vp_compile_partition(v, n, saved) == VP_CP_OK);
        unsigned count = 0;
        for (uint32_t i = 0; i < n; i++) count += saved[i];
        CHECK(count == 1);
        CHECK(n == 103 ? saved[n - 1] : saved[n - 3]);
    }
}

int main(void) {
    test_matmul_then_pointwise();
    test_rms_norm_before_matmul();
    test_used_far_apart();
    test_long_fusible_chain();
    return check_summary("compile_partition");
}
