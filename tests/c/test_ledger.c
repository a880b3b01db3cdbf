/* test_ledger.c — the live-byte meter: current, peak and its breakdown and
 * place, the caching allocator's rounding and pools, and the folding of
 * repeated segments checked against running them out in full. */
#include <string.h>

#include "check.h"
#include "ledger.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static void test_current_and_peak(void) {
    vp_ledger l;
    vp_ledger_init(&l, false);
    l.place.phase = VP_PHASE_FORWARD;
    l.place.layer = 3;
    vp_ledger_alloc(&l, VP_CAT_PARAMS, 1000, "w");
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 513, "act");
    l.place.layer = 4;
    vp_ledger_alloc(&l, VP_CAT_TRANSIENT, 100, "tmp");
    vp_ledger_release(&l, VP_CAT_TRANSIENT, 100, "tmp");
    vp_ledger_release(&l, VP_CAT_ACTIVATIONS, 513, "act");

    /* raw: exact bytes; rounded: each block up to 512 (kMinBlockSize) */
    CHECK_EQ_U64(l.raw.total, 1000);
    CHECK_EQ_U64(l.raw.current[VP_CAT_PARAMS], 1000);
    CHECK_EQ_U64(l.raw.current[VP_CAT_ACTIVATIONS], 0);
    CHECK_EQ_U64(l.raw.peak, 1000 + 513 + 100);
    CHECK_EQ_U64(l.rounded.total, 1024);
    CHECK_EQ_U64(l.rounded.peak, 1024 + 1024 + 512);
    CHECK_EQ_U64(l.rounded.peak_breakdown[VP_CAT_PARAMS], 1024);
    CHECK_EQ_U64(l.rounded.peak_breakdown[VP_CAT_ACTIVATIONS], 1024);
    CHECK_EQ_U64(l.rounded.peak_breakdown[VP_CAT_TRANSIENT], 512);
    CHECK(l.rounded.peak_place.phase == VP_PHASE_FORWARD);
    CHECK(l.rounded.peak_place.layer == 4);
    CHECK(l.rounded.peak_place.op && strcmp(l.rounded.peak_place.op, "tmp") == 0);

    /* a move re-labels bytes: totals and peak do not change */
    vp_ledger_alloc(&l, VP_CAT_TRANSIENT, 512, "grad");
    vp_ledger_move(&l, VP_CAT_TRANSIENT, VP_CAT_GRADS, 512);
    CHECK_EQ_U64(l.rounded.current[VP_CAT_TRANSIENT], 0);
    CHECK_EQ_U64(l.rounded.current[VP_CAT_GRADS], 512);
    CHECK_EQ_U64(l.rounded.total, 1536);
    CHECK_EQ_U64(l.rounded.peak, 2560);

    /* releasing what was never allocated is flagged, not wrapped */
    CHECK(!l.overflow);
    vp_ledger_release(&l, VP_CAT_MASTER, 4, "bogus");
    CHECK(l.overflow);
    vp_ledger_free(&l);
}

/* c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize = 512, round_size. */
static void test_round_block(void) {
    CHECK_EQ_U64(vp_round_block(0), 0);
    CHECK_EQ_U64(vp_round_block(1), 512);
    CHECK_EQ_U64(vp_round_block(512), 512);
    CHECK_EQ_U64(vp_round_block(513), 1024);
    CHECK_EQ_U64(vp_round_block(10 * MIB + 1), 10 * MIB + 512);
}

/* The same file: blocks <= kSmallSize (1 MiB) share kSmallBuffer (2 MiB)
 * segments, blocks < kMinLargeAlloc (10 MiB) kLargeBuffer (20 MiB) ones,
 * larger blocks get their own segment rounded to kRoundLarge (2 MiB). */
static void test_pools(void) {
    uint64_t pools[VP_POOL_COUNT] = {1, 0, 0};
    CHECK_EQ_U64(vp_segment_bytes(pools), 2 * MIB);
    pools[VP_POOL_SMALL] = 2 * MIB + 512;
    CHECK_EQ_U64(vp_segment_bytes(pools), 4 * MIB);
    pools[VP_POOL_SMALL] = 0;
    pools[VP_POOL_MEDIUM] = 1 * MIB + 512;
    CHECK_EQ_U64(vp_segment_bytes(pools), 20 * MIB);
    pools[VP_POOL_MEDIUM] = 21 * MIB;
    CHECK_EQ_U64(vp_segment_bytes(pools), 40 * MIB);
    pools[VP_POOL_MEDIUM] = 0;
    pools[VP_POOL_LARGE] = 12 * MIB; /* already segment-rounded by the ledger */
    CHECK_EQ_U64(vp_segment_bytes(pools), 12 * MIB);

    vp_ledger l;
    vp_ledger_init(&l, false);
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 1 * MIB, "small");        /* exactly kSmallSize */
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 1 * MIB + 1, "medium");   /* 1 MiB + 512 */
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 10 * MIB - 512, "medium"); /* still under 10 MiB */
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 10 * MIB, "large");       /* own segment, 10 MiB */
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 11 * MIB, "large");       /* 12 MiB segment */
    CHECK_EQ_U64(l.rounded.pools[VP_POOL_SMALL], 1 * MIB);
    CHECK_EQ_U64(l.rounded.pools[VP_POOL_MEDIUM], 1 * MIB + 512 + 10 * MIB - 512);
    CHECK_EQ_U64(l.rounded.pools[VP_POOL_LARGE], 10 * MIB + 12 * MIB);
    /* 2 MiB small segment + one 20 MiB medium segment (11 MiB of blocks) + 22 MiB */
    CHECK_EQ_U64(vp_segment_bytes(l.rounded.peak_pools), 2 * MIB + 20 * MIB + 22 * MIB);
    vp_ledger_release(&l, VP_CAT_ACTIVATIONS, 11 * MIB, "large");
    CHECK_EQ_U64(l.rounded.pools[VP_POOL_LARGE], 10 * MIB);
    CHECK_EQ_U64(l.rounded.peak_pools[VP_POOL_LARGE], 22 * MIB);
    CHECK(!l.overflow);
    vp_ledger_free(&l);
}

/* ---- folding ---- */

/* One step of a scripted segment: allocate (+) or release (-) bytes in a
 * category. Releases may free bytes allocated before the segment began (a
 * shrinking segment frees one pre-existing block per repetition). */
typedef struct {
    int sign;
    vp_category category;
    uint64_t bytes;
} seg_op;

typedef struct {
    const char *name;
    const seg_op *ops;
    unsigned n_ops;
    uint64_t preexisting; /* bytes of each activation block made before the segment */
    const char *const *labels; /* each op's label (NULL entries, or NULL: the segment's name) */
} segment;

static void replay_once(vp_ledger *l, const segment *s) {
    for (unsigned i = 0; i < s->n_ops; i++) {
        const char *op = s->labels && s->labels[i] ? s->labels[i] : s->name;
        if (s->ops[i].sign > 0) vp_ledger_alloc(l, s->ops[i].category, s->ops[i].bytes, op);
        else vp_ledger_release(l, s->ops[i].category, s->ops[i].bytes, op);
    }
}

/* A prologue, `times` repetitions at layers first, first+step, ..., and an
 * epilogue; folded or not. */
static void run_segment(vp_ledger *l, const segment *s, unsigned times, int first, int step, bool fold,
                        const vp_stream_ops *streams) {
    vp_ledger_init(l, false);
    if (streams) vp_ledger_set_streams(l, streams);
    l->place.phase = VP_PHASE_FORWARD;
    vp_ledger_alloc(l, VP_CAT_PARAMS, 3 * MIB + 100, "params");
    for (unsigned i = 0; i < times; i++) vp_ledger_alloc(l, VP_CAT_ACTIVATIONS, s->preexisting, "before");
    vp_ledger_alloc(l, VP_CAT_TRANSIENT, 5000, "prologue");
    vp_ledger_release(l, VP_CAT_TRANSIENT, 5000, "prologue");
    l->place.layer = first;
    if (fold) {
        vp_ledger_begin_segment(l);
        replay_once(l, s);
        vp_ledger_repeat_segment(l, times, step);
    } else {
        for (unsigned i = 0; i < times; i++) {
            l->place.layer = first + (int)i * step;
            replay_once(l, s);
        }
    }
    l->place.layer = -1;
    vp_ledger_alloc(l, VP_CAT_TRANSIENT, 777, "epilogue");
    vp_ledger_release(l, VP_CAT_TRANSIENT, 777, "epilogue");
}

static void same_meter(const vp_meter *a, const vp_meter *b) {
    CHECK_EQ_U64(a->total, b->total);
    CHECK_EQ_U64(a->peak, b->peak);
    for (int c = 0; c < VP_CAT_COUNT; c++) {
        CHECK_EQ_U64(a->current[c], b->current[c]);
        CHECK_EQ_U64(a->peak_breakdown[c], b->peak_breakdown[c]);
    }
    CHECK(a->peak_place.layer == b->peak_place.layer);
    CHECK(a->peak_place.phase == b->peak_place.phase);
    CHECK(a->peak_place.op == b->peak_place.op);
}

static void same_pools(const vp_meter *a, const vp_meter *b) {
    for (int p = 0; p < VP_POOL_COUNT; p++) {
        CHECK_EQ_U64(a->pools[p], b->pools[p]);
        CHECK_EQ_U64(a->peak_pools[p], b->peak_pools[p]);
    }
}

/* The segments a layer's forward and backward look like. */
static const seg_op growing[] = { /* forward: keeps activations, frees temporaries */
    {+1, VP_CAT_ACTIVATIONS, 3 * MIB}, {+1, VP_CAT_TRANSIENT, 700 * KIB},  {+1, VP_CAT_ACTIVATIONS, 1001},
    {-1, VP_CAT_TRANSIENT, 700 * KIB}, {+1, VP_CAT_TRANSIENT, 12 * MIB + 3}, {-1, VP_CAT_TRANSIENT, 12 * MIB + 3},
};
static const seg_op shrinking[] = { /* backward: frees one saved block, gains a smaller grad */
    {+1, VP_CAT_TRANSIENT, 2 * MIB}, {+1, VP_CAT_TRANSIENT, 300},        {-1, VP_CAT_ACTIVATIONS, 4 * MIB + 7},
    {-1, VP_CAT_TRANSIENT, 2 * MIB}, {+1, VP_CAT_GRADS, 1 * MIB},         {-1, VP_CAT_TRANSIENT, 300},
};
static const seg_op flat[] = { /* recompute-like: everything it makes it frees */
    {+1, VP_CAT_TRANSIENT, 9 * MIB}, {+1, VP_CAT_ACTIVATIONS, 513}, {-1, VP_CAT_TRANSIENT, 9 * MIB},
    {+1, VP_CAT_TRANSIENT, 20 * MIB}, {-1, VP_CAT_TRANSIENT, 20 * MIB}, {-1, VP_CAT_ACTIVATIONS, 513},
};
static const seg_op gathered[] = { /* an FSDP unit: gathered on one stream, its grad shard kept on another */
    {+1, VP_CAT_PARAMS, 30 * MIB},     {+1, VP_CAT_ACTIVATIONS, 2 * MIB + 5}, {+1, VP_CAT_TRANSIENT, 600 * KIB},
    {-1, VP_CAT_TRANSIENT, 600 * KIB}, {-1, VP_CAT_PARAMS, 30 * MIB},         {+1, VP_CAT_GRADS, 5 * MIB + 3},
    {+1, VP_CAT_TRANSIENT, 40 * MIB},  {-1, VP_CAT_TRANSIENT, 40 * MIB},
};
static const char *const gathered_labels[] = {"gather", NULL, "gather", "gather", "release", "shard", NULL, NULL};
static const seg_op early_peak_growing[] = { /* grows, but its big temporary comes first */
    {+1, VP_CAT_TRANSIENT, 40 * MIB}, {-1, VP_CAT_TRANSIENT, 40 * MIB}, {+1, VP_CAT_ACTIVATIONS, 100 * KIB},
};

/* The streams `gathered` allocates on: "gather" and its "release" on 1,
 * "shard" on 2, the rest on the default stream. */
static const char *const gather_ops[] = {"gather", "release", NULL};
static const char *const shard_ops[] = {"shard", NULL};
static const vp_stream_ops test_streams = {{gather_ops, shard_ops}};

static void same_stream_meters(const vp_ledger *a, const vp_ledger *b) {
    for (unsigned s = 0; s < VP_STREAMS; s++) {
        CHECK_EQ_U64(a->stream[s].total, b->stream[s].total);
        CHECK_EQ_U64(a->stream[s].peak, b->stream[s].peak);
        CHECK(a->stream[s].peak_place.layer == b->stream[s].peak_place.layer);
        same_pools(&a->stream[s], &b->stream[s]);
    }
}

static void test_fold_matches_explicit(void) {
    const segment segments[] = {
        {"gathered", gathered, sizeof gathered / sizeof gathered[0], 0, gathered_labels},
        {"growing", growing, sizeof growing / sizeof growing[0], 0, NULL},
        {"shrinking", shrinking, sizeof shrinking / sizeof shrinking[0], 4 * MIB + 7, NULL},
        {"flat", flat, sizeof flat / sizeof flat[0], 0, NULL},
        {"early_peak_growing", early_peak_growing, sizeof early_peak_growing / sizeof early_peak_growing[0], 0, NULL},
    };
    const unsigned times[] = {1, 2, 7, 32};
    const int steps[][2] = {{0, 1}, {31, -1}, {0, 3}}; /* forward, backward, chunks of 3 */
    for (unsigned s = 0; s < sizeof segments / sizeof segments[0]; s++)
        for (unsigned t = 0; t < sizeof times / sizeof times[0]; t++)
            for (unsigned k = 0; k < sizeof steps / sizeof steps[0]; k++) {
                for (int with_streams = 0; with_streams < 2; with_streams++) {
                    const vp_stream_ops *streams = with_streams ? &test_streams : NULL;
                    vp_ledger folded, explicit_;
                    run_segment(&folded, &segments[s], times[t], steps[k][0], steps[k][1], true, streams);
                    run_segment(&explicit_, &segments[s], times[t], steps[k][0], steps[k][1], false, streams);
                    same_meter(&folded.raw, &explicit_.raw);
                    same_meter(&folded.rounded, &explicit_.rounded);
                    same_pools(&folded.rounded, &explicit_.rounded);
                    same_stream_meters(&folded, &explicit_);
                    CHECK(!folded.overflow && !explicit_.overflow);
                    vp_ledger_free(&folded);
                    vp_ledger_free(&explicit_);
                }
            }
}

/* A hand-computed fold: 32 layers of +3 MiB each after 1 MiB of params,
 * with a 1 MiB temporary on top inside each layer. The peak is in the last
 * layer: 1 + 32*3 + 1 MiB, at layer 31. */
static void test_fold_by_hand(void) {
    vp_ledger l;
    vp_ledger_init(&l, false);
    vp_ledger_alloc(&l, VP_CAT_PARAMS, 1 * MIB, "params");
    l.place.layer = 0;
    vp_ledger_begin_segment(&l);
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, 3 * MIB, "act");
    vp_ledger_alloc(&l, VP_CAT_TRANSIENT, 1 * MIB, "tmp");
    vp_ledger_release(&l, VP_CAT_TRANSIENT, 1 * MIB, "tmp");
    vp_ledger_repeat_segment(&l, 32, 1);
    CHECK_EQ_U64(l.rounded.total, 97 * MIB);
    CHECK_EQ_U64(l.rounded.current[VP_CAT_ACTIVATIONS], 96 * MIB);
    CHECK_EQ_U64(l.rounded.peak, 98 * MIB);
    CHECK_EQ_U64(l.rounded.peak_breakdown[VP_CAT_ACTIVATIONS], 96 * MIB);
    CHECK_EQ_U64(l.rounded.peak_breakdown[VP_CAT_TRANSIENT], 1 * MIB);
    CHECK(l.rounded.peak_place.layer == 31);
    CHECK(l.place.layer == 31);
    vp_ledger_free(&l);
}

/* Folding scales each per-repetition delta by the repeat count: seven
 * repetitions of +2^61 bytes must not overflow silently (6 x 2^61 does not
 * fit in int64). Either the exact total or an overflow flag is right. */
static void test_fold_huge_delta(void) {
    vp_ledger l;
    vp_ledger_init(&l, false);
    l.place.layer = 0;
    vp_ledger_begin_segment(&l);
    vp_ledger_alloc(&l, VP_CAT_ACTIVATIONS, UINT64_C(1) << 61, "huge");
    vp_ledger_repeat_segment(&l, 7, 1);
    CHECK(l.overflow || l.raw.total == 7 * (UINT64_C(1) << 61));
    CHECK(l.overflow || l.rounded.peak_breakdown[VP_CAT_ACTIVATIONS] == 7 * (UINT64_C(1) << 61));
    vp_ledger_free(&l);
}

/* The gathered unit by hand, 4 times after 3 MiB + 100 B of params and
 * one 1 MiB "before" block: stream 1 peaks at one 30 MiB block plus the
 * 600 KiB scratch (the large and the small pool); stream 2 ends with four
 * shards of 5 MiB + 3 B (each 5 MiB + 512 B, medium pool); the default
 * stream never sees either. */
static void test_streams_by_hand(void) {
    const segment unit = {"gathered", gathered, sizeof gathered / sizeof gathered[0], 0, gathered_labels};
    vp_ledger l;
    run_segment(&l, &unit, 4, 0, 1, true, &test_streams);
    CHECK_EQ_U64(l.stream[1].peak, 30 * MIB + 600 * KIB);
    CHECK_EQ_U64(l.stream[1].peak_pools[VP_POOL_LARGE], 30 * MIB);
    CHECK_EQ_U64(l.stream[1].peak_pools[VP_POOL_SMALL], 600 * KIB);
    CHECK_EQ_U64(l.stream[1].total, 0);
    CHECK_EQ_U64(l.stream[2].total, 4 * (5 * MIB + 512));
    CHECK_EQ_U64(l.stream[2].peak_pools[VP_POOL_MEDIUM], 4 * (5 * MIB + 512));
    CHECK(l.stream[2].peak_place.layer == 3);
    /* the default stream: params, the prologue's blocks, 4 x (2 MiB + 512) kept, the 40 MiB temporary on top */
    CHECK_EQ_U64(l.stream[0].total, 3 * MIB + 512 + 4 * (2 * MIB + 512));
    CHECK_EQ_U64(l.stream[0].peak, 3 * MIB + 512 + 4 * (2 * MIB + 512) + 40 * MIB);
    CHECK_EQ_U64(l.stream[0].total + l.stream[1].total + l.stream[2].total, l.rounded.total);
    vp_ledger_free(&l);
}

int main(void) {
    test_current_and_peak();
    test_round_block();
    test_pools();
    test_fold_matches_explicit();
    test_fold_by_hand();
    test_streams_by_hand();
    test_fold_huge_delta();
    return check_summary("test_ledger");
}
