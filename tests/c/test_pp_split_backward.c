/* test_pp_split_backward.c — the zero-bubble schedules' orders walked over
 * equal stages, against the published activation figures (in micro-batches
 * of one stage, the weight passes freeing what they wait for):
 *  - the DualPipe README (deepseek-ai/DualPipe; DeepSeek-V3 report, Table
 *    2): ZB1P holds PP, DualPipe PP + 1 per device; DualPipeV's V over pp
 *    ranks runs PP = 2 pp half-rank chunks;
 *  - Qi et al. 2023 ("Zero Bubble Pipeline Parallelism", section 6): ZB-V
 *    holds p M_B on its first rank, as 1F1B. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "pp_split_backward.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-15; }

static vp_recipe pipeline(vp_pp_schedule schedule, unsigned pp, unsigned m) {
    vp_recipe r;
    vp_recipe_defaults(&r);
    r.pp = pp;
    r.microbatches = m;
    r.pp_schedule = schedule;
    return r;
}

/* 4 layers a stage; one micro-batch's activations 1 a layer (the rank's
 * 8), `g` a layer of weight-pass gradients, no head */
static vp_pp_held held(const vp_recipe *r, unsigned rank, uint64_t g) {
    unsigned sizes[64];
    for (unsigned s = 0; s < 64; s++) sizes[s] = 4;
    vp_pp_bytes bytes = {8, 0, 8 * g, 0};
    return vp_pp_split_held(r, sizes, rank, &bytes);
}

static void dualpipev(void) {
    /* PP + 1 = 2 pp + 1 chunks of half a rank: pp + 1/2 micro-batches on
     * every rank, whatever the micro-batches (m >= 2 pp) */
    for (unsigned pp = 2; pp <= 8; pp *= 2)
        for (unsigned m = 2 * pp; m <= 4 * pp; m += pp)
            for (unsigned i = 0; i < pp; i++) {
                vp_recipe r = pipeline(VP_PP_TORCH_DUALPIPEV, pp, m);
                vp_pp_held h = held(&r, i, 0);
                CHECK(close_to(h.in_flight, pp + 0.5));
                CHECK_EQ_U64(h.pending_bytes, 0);
            }
}

static void zbv(void) {
    /* the first rank holds p micro-batches (2 p chunks), as 1F1B */
    for (unsigned pp = 2; pp <= 8; pp *= 2) {
        vp_recipe r = pipeline(VP_PP_TORCH_ZBV, pp, 2 * pp);
        CHECK(close_to(held(&r, 0, 0).in_flight, pp));
        /* with weight-pass gradients: the warm-up's F1 (2 pp chunks), then
         * I1 keeps stage 2 pp - 1's gradients (4 layers x 1 byte); stage
         * 0's I does nothing */
        vp_pp_held h = held(&r, 0, 1);
        CHECK(close_to(h.in_flight, pp));
        CHECK_EQ_U64(h.pending_bytes, 4);
    }
    /* fewer micro-batches than 2 pp - 1: the generator's extra actions are
     * dropped; one micro-batch holds one forward of each chunk at most */
    vp_recipe one = pipeline(VP_PP_TORCH_ZBV, 4, 1);
    CHECK(close_to(held(&one, 0, 0).in_flight, 1));
}

static void interleaved_zero_bubble(void) {
    /* ZB1P: pp micro-batches on the first rank, 2 chunks a rank (torchtitan's
     * default), m a multiple of pp */
    for (unsigned pp = 2; pp <= 8; pp *= 2)
        for (unsigned m = pp; m <= 4 * pp; m *= 2) {
            vp_recipe r = pipeline(VP_PP_TORCH_INTERLEAVED_ZB, pp, m);
            CHECK(close_to(held(&r, 0, 0).in_flight, pp));
        }
    /* the chunks a rank runs: looped i + c pp, a V i and 2 pp - 1 - i */
    vp_recipe loop = pipeline(VP_PP_TORCH_INTERLEAVED_ZB, 4, 8), v = pipeline(VP_PP_TORCH_ZBV, 4, 8);
    CHECK(vp_pp_stage_of(&loop, 1, 1) == 5);
    CHECK(vp_pp_stage_of(&v, 1, 1) == 6);
    CHECK(vp_pp_stage_of(&v, 0, 1) == 7);
}

int main(void) {
    dualpipev();
    zbv();
    interleaved_zero_bubble();
    return check_summary("pp_split_backward");
}
