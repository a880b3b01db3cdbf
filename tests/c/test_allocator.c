/* test_allocator.c — the caching allocator's rules, each with the constant of
 * c10/cuda/CUDACachingAllocator.cpp it checks, and the replay of an event log:
 * pairing by tensor, lazy optimizer states, the steady state. */
#include <stdlib.h>
#include <string.h>

#include "alloc_pool.h"
#include "allocator.h"
#include "check.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static void test_rounding(void) {
    /* round_size: kMinBlockSize = 512 */
    CHECK_EQ_U64(vp_allocator_round(1), 512);
    CHECK_EQ_U64(vp_allocator_round(512), 512);
    CHECK_EQ_U64(vp_allocator_round(513), 1024);
    CHECK_EQ_U64(vp_allocator_round(3 * MIB + 1), 3 * MIB + 512);
}

static void test_segment_sizes(void) {
    /* get_allocation_size: kSmallSize = 1 MiB -> kSmallBuffer = 2 MiB;
     * below kMinLargeAlloc = 10 MiB -> kLargeBuffer = 20 MiB; else kRoundLarge = 2 MiB */
    CHECK_EQ_U64(vp_allocator_segment_size(512), 2 * MIB);
    CHECK_EQ_U64(vp_allocator_segment_size(1 * MIB), 2 * MIB);
    CHECK_EQ_U64(vp_allocator_segment_size(1 * MIB + 512), 20 * MIB);
    CHECK_EQ_U64(vp_allocator_segment_size(10 * MIB - 512), 20 * MIB);
    CHECK_EQ_U64(vp_allocator_segment_size(10 * MIB), 10 * MIB);
    CHECK_EQ_U64(vp_allocator_segment_size(10 * MIB + 512), 12 * MIB);
}

static void test_split_thresholds(void) {
    /* should_split: small pool, remaining >= kMinBlockSize; large, remaining > kSmallSize */
    CHECK(vp_allocator_should_split(2 * MIB, 2 * MIB - 512, true));
    CHECK(!vp_allocator_should_split(1024, 1024, true));
    CHECK(vp_allocator_should_split(20 * MIB, 19 * MIB - 512, false));
    CHECK(!vp_allocator_should_split(20 * MIB, 19 * MIB, false)); /* exactly 1 MiB left: kept whole */
}

static void test_pools_and_best_fit(void) {
    vp_allocator a;
    vp_allocator_init(&a);
    /* a 1 MiB request is small: one 2 MiB segment, split, the second fits beside */
    int32_t s1 = vp_allocator_malloc(&a, 1 * MIB);
    int32_t s2 = vp_allocator_malloc(&a, 1 * MIB);
    CHECK_EQ_U64(a.reserved, 2 * MIB);
    CHECK_EQ_U64(a.segments, 1);
    /* just over: the large pool's 20 MiB segment */
    int32_t l1 = vp_allocator_malloc(&a, 1 * MIB + 1);
    CHECK_EQ_U64(a.reserved, 22 * MIB);
    CHECK_EQ_U64(a.blocks[l1].size, 1 * MIB + 512);
    /* 18 MiB - 1024 remain in that segment: a 17 MiB request takes it, splits (>1 MiB left) */
    int32_t l2 = vp_allocator_malloc(&a, 17 * MIB);
    CHECK_EQ_U64(a.reserved, 22 * MIB);
    CHECK_EQ_U64(a.blocks[l2].segment, a.blocks[l1].segment);
    /* what is left (1 MiB - 512) is not offered to a small request: pools are separate */
    int32_t s3 = vp_allocator_malloc(&a, 4 * KIB);
    CHECK_EQ_U64(a.reserved, 24 * MIB);
    /* a large request of its own segment, rounded to 2 MiB */
    int32_t big = vp_allocator_malloc(&a, 11 * MIB);
    CHECK_EQ_U64(a.reserved, 36 * MIB);
    CHECK_EQ_U64(a.blocks[big].size, 12 * MIB); /* not split: exactly 1 MiB left */
    /* best fit: free the 17 MiB and the 12 MiB blocks; an 11 MiB request takes the 12 MiB one */
    vp_allocator_release(&a, l2);
    vp_allocator_release(&a, big);
    int32_t again = vp_allocator_malloc(&a, 11 * MIB);
    CHECK_EQ_U64(a.blocks[again].segment, a.blocks[big].segment);
    CHECK_EQ_U64(a.reserved, 36 * MIB); /* segments are kept, nothing new */
    CHECK_EQ_U64(a.peak_reserved, 36 * MIB);
    (void)s1, (void)s2, (void)s3;
    CHECK(!a.failed);
    vp_allocator_free(&a);
}

static void test_merge(void) {
    vp_allocator a;
    vp_allocator_init(&a);
    int32_t x = vp_allocator_malloc(&a, 4 * MIB);
    int32_t y = vp_allocator_malloc(&a, 4 * MIB);
    int32_t z = vp_allocator_malloc(&a, 4 * MIB);
    CHECK_EQ_U64(a.segments, 1); /* three 4 MiB blocks in one 20 MiB segment */
    vp_allocator_release(&a, x);
    vp_allocator_release(&a, z); /* merges with the 8 MiB tail */
    CHECK_EQ_U64(a.blocks[z].size, 12 * MIB);
    vp_allocator_release(&a, y); /* merges with both: the segment whole again */
    CHECK_EQ_U64(a.blocks[y].size, 20 * MIB);
    CHECK_EQ_U64(a.blocks[y].offset, 0);
    /* without the merge a 16 MiB request would need a new segment */
    vp_allocator_malloc(&a, 16 * MIB);
    CHECK_EQ_U64(a.reserved, 20 * MIB);
    CHECK_EQ_U64(a.allocated, 16 * MIB);
    vp_allocator_release(&a, y);
    vp_allocator_release(&a, y); /* a double free: flagged, not crashed */
    CHECK(a.failed);
    vp_allocator_free(&a);
}

/* release_cached_blocks (emptyCache): free blocks that are whole segments
 * go back (cudaFree); a segment with a live block stays whole; under
 * expandable_segments the free tail's whole pages are unmapped */
static void test_empty_cache(void) {
    vp_allocator a;
    vp_allocator_init(&a);
    int32_t big = vp_allocator_malloc(&a, 100 * MIB);
    int32_t x = vp_allocator_malloc(&a, 4 * MIB);
    int32_t y = vp_allocator_malloc(&a, 4 * MIB); /* beside x in one 20 MiB segment */
    int32_t small = vp_allocator_malloc(&a, 4 * KIB);
    CHECK_EQ_U64(a.reserved, 122 * MIB);
    vp_allocator_release(&a, big);
    vp_allocator_release(&a, x);
    vp_allocator_release(&a, small);
    vp_allocator_empty_cache(&a);
    CHECK_EQ_U64(a.reserved, 20 * MIB); /* y keeps its segment; the 100 MiB and the small one go */
    CHECK_EQ_U64(a.allocated, 4 * MIB);
    /* the next request of the freed size needs a new segment */
    int32_t again = vp_allocator_malloc(&a, 100 * MIB);
    CHECK_EQ_U64(a.reserved, 120 * MIB);
    CHECK_EQ_U64(a.peak_reserved, 122 * MIB); /* max_memory_reserved keeps the earlier peak */
    vp_allocator_release(&a, again);
    vp_allocator_release(&a, y);
    vp_allocator_empty_cache(&a);
    CHECK_EQ_U64(a.reserved, 0);
    CHECK(!a.failed);
    vp_allocator_free(&a);

    vp_alloc_config c;
    char message[256];
    CHECK(vp_alloc_config_parse("expandable_segments:True", &c, message, sizeof message));
    vp_allocator_init_config(&a, &c);
    x = vp_allocator_malloc(&a, 30 * MIB); /* maps 40 MiB */
    y = vp_allocator_malloc(&a, 30 * MIB); /* 60: the segment maps 60 MiB */
    CHECK_EQ_U64(a.reserved, 60 * MIB);
    vp_allocator_release(&a, y); /* a free tail of 30 MiB from offset 30: one whole page (40-60) */
    vp_allocator_empty_cache(&a);
    CHECK_EQ_U64(a.reserved, 40 * MIB);
    vp_allocator_release(&a, x);
    vp_allocator_empty_cache(&a); /* the segment free from its start: every page goes */
    CHECK_EQ_U64(a.reserved, 0);
    x = vp_allocator_malloc(&a, 30 * MIB); /* a new segment, mapped again */
    CHECK_EQ_U64(a.reserved, 40 * MIB);
    vp_allocator_release(&a, x);
    CHECK(!a.failed);
    vp_allocator_free(&a);
}

/* an event log of tagged tensors */
static vp_event ev(vp_phase phase, vp_category c, int64_t delta, uint32_t tensor, const char *op) {
    vp_event e;
    memset(&e, 0, sizeof e);
    e.place.phase = phase;
    e.place.layer = -1;
    e.place.op = op;
    e.category = c;
    e.delta = delta;
    e.raw_delta = delta;
    e.repeat = 1;
    e.tensor = tensor;
    return e;
}

static void test_replay(void) {
    /* a 12 MiB weight; forward makes two 6 MiB activations (one 20 MiB
     * segment), backward frees the first and makes a 12 MiB .grad kept
     * between steps; the optimizer makes a 12 MiB state at the first step */
    vp_event events[] = {
        ev(VP_PHASE_SETUP, VP_CAT_PARAMS, 12 * MIB, 1, "w"),
        ev(VP_PHASE_SETUP, VP_CAT_OPTIMIZER, 12 * MIB, 0, "exp_avg"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 6 * MIB, 2, "a"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 6 * MIB, 3, "b"),
        ev(VP_PHASE_BACKWARD, VP_CAT_ACTIVATIONS, -6 * (int64_t)MIB, 3, "b"),
        ev(VP_PHASE_BACKWARD, VP_CAT_GRADS, 12 * MIB, 4, "w.grad"),
        ev(VP_PHASE_BACKWARD, VP_CAT_ACTIVATIONS, -6 * (int64_t)MIB, 2, "a"),
        ev(VP_PHASE_OPTIMIZER, VP_CAT_TRANSIENT, 2 * MIB, 0, "tmp"),
        ev(VP_PHASE_OPTIMIZER, VP_CAT_TRANSIENT, -2 * (int64_t)MIB, 0, "tmp"),
    };
    vp_allocator_replay r;
    CHECK(vp_allocator_replay_events(events, sizeof events / sizeof *events, 3, &r));
    /* step 1: w its own 12 MiB segment; a and b share a 20 MiB one; b freed,
     * the 12 MiB .grad fits in the 14 MiB left there (split: 2 MiB > 1 MiB
     * remain); a freed; the state finds 6 + 2 MiB free, takes a segment of
     * its own; tmp takes the 2 MiB rest: 12 + 20 + 12 = 44 MiB */
    CHECK_EQ_U64(r.reserved_after[0], 44 * MIB);
    /* step 2: the .grad is kept, not made again; a takes the 6 MiB hole, b
     * finds nothing: a new 20 MiB segment (fragmentation); step 3 grows no more */
    CHECK_EQ_U64(r.reserved_after[1], 64 * MIB);
    CHECK_EQ_U64(r.reserved_after[2], 64 * MIB);
    CHECK_EQ_U64(r.steps, 3);
    CHECK_EQ_U64(r.peak_reserved, 64 * MIB);
    CHECK_EQ_U64(r.peak_allocated, 12 * MIB * 3 + 6 * MIB + 6 * MIB);
    CHECK_EQ_U64(r.paired_by_size, 3); /* the untagged tmp, once a step */
    CHECK_EQ_U64(r.segments, 4);

    /* an unnamed allocation without an op label pairs with its free like any other */
    vp_event unlabelled[] = {ev(VP_PHASE_FORWARD, VP_CAT_TRANSIENT, 4 * MIB, 0, NULL),
                             ev(VP_PHASE_FORWARD, VP_CAT_TRANSIENT, -4 * (int64_t)MIB, 0, NULL)};
    CHECK(vp_allocator_replay_events(unlabelled, 2, 3, &r));
    CHECK_EQ_U64(r.peak_allocated, 4 * MIB);

    /* a free of a tensor never allocated: no figure */
    vp_event bad[] = {ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, -512, 7, "x")};
    CHECK(!vp_allocator_replay_events(bad, 1, 3, &r));
    /* a folded log: no figure */
    vp_event folded[] = {ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 512, 7, "x")};
    folded[0].repeat = 3;
    CHECK(!vp_allocator_replay_events(folded, 1, 3, &r));
}

/* torch.cuda.empty_cache() inside the step (TRL's OffloadActivations with
 * bitsandbytes imported, at each training_step): a 30 MiB block made and
 * freed leaves its segment cached, so a 40 MiB one after it takes a
 * segment of its own (70 MiB reserved); emptied between them, the peak is
 * the larger alone */
static void test_replay_empty_cache(void) {
    vp_event events[] = {
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 30 * MIB, 1, "x"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, -30 * (int64_t)MIB, 1, "x"),
        ev(VP_PHASE_FORWARD, VP_CAT_TRANSIENT, 0, VP_EVENT_EMPTY_CACHE, "offload.empty_cache"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 40 * MIB, 2, "y"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, -40 * (int64_t)MIB, 2, "y"),
    };
    vp_allocator_replay r;
    CHECK(vp_allocator_replay_events(events, 5, 3, &r));
    CHECK_EQ_U64(r.peak_reserved, 40 * MIB);
    events[2].tensor = 0; /* a plain event of no bytes instead: the cache kept */
    events[2].place.op = "nothing";
    CHECK(vp_allocator_replay_events(events, 5, 3, &r));
    CHECK_EQ_U64(r.peak_reserved, 70 * MIB);
}

static void test_replay_after_prelude(void) {
    /* the run before the steady state: a 100 MiB tensor made and freed
     * while loading (a 16-bit weight before quantizing, a flat buffer)
     * leaves its segment cached; the resident 60 MiB weight, made by the
     * prelude under setup's name, is carved from it (40 MiB > 1 MiB left:
     * split), and the step's 30 MiB activation fits in the rest */
    vp_event prelude[] = {
        ev(VP_PHASE_SETUP, VP_CAT_TRANSIENT, 100 * MIB, 10, "w16"),
        ev(VP_PHASE_SETUP, VP_CAT_TRANSIENT, -100 * (int64_t)MIB, 10, "w16"),
        ev(VP_PHASE_SETUP, VP_CAT_PARAMS, 60 * MIB, 1, "w"),
    };
    vp_event events[] = {
        ev(VP_PHASE_SETUP, VP_CAT_PARAMS, 60 * MIB, 1, "w"),
        ev(VP_PHASE_FORWARD, VP_CAT_ACTIVATIONS, 30 * MIB, 2, "a"),
        ev(VP_PHASE_BACKWARD, VP_CAT_ACTIVATIONS, -30 * (int64_t)MIB, 2, "a"),
    };
    vp_allocator_replay r;
    CHECK(vp_allocator_replay_run(prelude, 3, events, 3, 3, NULL, NULL, &r));
    CHECK_EQ_U64(r.reserved_at_start, 100 * MIB);
    CHECK_EQ_U64(r.peak_reserved, 100 * MIB);
    CHECK_EQ_U64(r.peak_allocated, 100 * MIB); /* the prelude's tensor is counted too */
    /* without it: the weight's own 60 MiB segment and the activation's 30 */
    CHECK(vp_allocator_replay_events(events, 3, 3, &r));
    CHECK_EQ_U64(r.peak_reserved, 90 * MIB);
    CHECK_EQ_U64(r.reserved_at_start, 60 * MIB);
    /* the run's peak is no steady figure: a 110 MiB weight does not fit the
     * cached 100 MiB block, which stays reserved beside it */
    prelude[2] = ev(VP_PHASE_SETUP, VP_CAT_PARAMS, 110 * MIB, 1, "w");
    events[0] = prelude[2];
    CHECK(vp_allocator_replay_run(prelude, 3, events, 3, 3, NULL, NULL, &r));
    CHECK_EQ_U64(r.peak_reserved, 210 * MIB); /* the activation reuses the cached block */
    /* a prelude tensor without a name, or a resident setup never makes: no figure */
    vp_event unnamed[] = {ev(VP_PHASE_SETUP, VP_CAT_TRANSIENT, MIB, 0, "x")};
    CHECK(!vp_allocator_replay_run(unnamed, 1, events, 3, 3, NULL, NULL, &r));
    vp_event stranger[] = {ev(VP_PHASE_SETUP, VP_CAT_PARAMS, MIB, 9, "x")};
    CHECK(!vp_allocator_replay_run(stranger, 1, events, 3, 3, NULL, NULL, &r));
}

/* PYTORCH_CUDA_ALLOC_CONF's options, each against the rule of
 * CUDACachingAllocator.cpp it follows, worked by hand */
static void test_config(void) {
    vp_alloc_config c;
    char message[256];
    /* roundup_power2_divisions:4 — 1 MiB + 1 lies between 1 and 2 MiB,
     * cut into 256 KiB steps: 1.25 MiB; 5000 bytes (above 512 x 4) between
     * 4 and 8 KiB, cut into 1 KiB steps: 5120; a power of two stays; 2000
     * bytes (not above 2048) is rounded to 512 only */
    CHECK(vp_alloc_config_parse("roundup_power2_divisions:4", &c, message, sizeof message));
    CHECK_EQ_U64(vp_allocator_round_config(&c, MIB + 1), MIB + 256 * KIB);
    CHECK_EQ_U64(vp_allocator_round_config(&c, 5000), 5120);
    CHECK_EQ_U64(vp_allocator_round_config(&c, 8 * MIB), 8 * MIB);
    CHECK_EQ_U64(vp_allocator_round_config(&c, 2000), 2048);

    /* max_split_size_mb:128 — a free 200 MiB block serves neither a 50 MiB
     * request (oversized for it) nor a 150 MiB one (200 >= 150 + 20); a 190
     * MiB one takes it whole (no split at or above the limit) */
    CHECK(vp_alloc_config_parse(" max_split_size_mb : 128 ", &c, message, sizeof message));
    CHECK_EQ_U64(c.max_split_size, 128 * MIB);
    vp_allocator a;
    vp_allocator_init_config(&a, &c);
    vp_allocator_release(&a, vp_allocator_malloc(&a, 200 * MIB));
    int32_t x = vp_allocator_malloc(&a, 50 * MIB);
    CHECK_EQ_U64(a.reserved, 250 * MIB);
    int32_t y = vp_allocator_malloc(&a, 150 * MIB);
    CHECK_EQ_U64(a.reserved, 400 * MIB);
    int32_t z = vp_allocator_malloc(&a, 190 * MIB);
    CHECK_EQ_U64(a.reserved, 400 * MIB);
    CHECK_EQ_U64(a.blocks[z].size, 200 * MIB);
    vp_allocator_release(&a, x);
    vp_allocator_release(&a, y);
    vp_allocator_release(&a, z);
    CHECK(!a.failed);
    vp_allocator_free(&a);

    /* expandable_segments:True — one large-pool segment mapped by 20 MiB
     * pages: 30 MiB maps 40; the next 30 MiB finds 10 free at the end and
     * maps 20 more: 60 MiB in one segment (two segments of 30 without) */
    CHECK(vp_alloc_config_parse("expandable_segments:True", &c, message, sizeof message));
    vp_allocator_init_config(&a, &c);
    x = vp_allocator_malloc(&a, 30 * MIB);
    y = vp_allocator_malloc(&a, 30 * MIB);
    CHECK_EQ_U64(a.reserved, 60 * MIB);
    CHECK_EQ_U64(a.segments, 1);
    CHECK_EQ_U64(a.blocks[y].offset, 30 * MIB);
    /* a small request maps a 2 MiB page of the small pool's own segment */
    z = vp_allocator_malloc(&a, 4 * KIB);
    CHECK_EQ_U64(a.reserved, 62 * MIB);
    CHECK_EQ_U64(a.segments, 2);
    vp_allocator_free(&a);

    /* streams: a block freed on the default stream serves no other
     * (BlockComparatorSize compares the stream first) */
    vp_allocator_init(&a);
    vp_allocator_release(&a, vp_allocator_malloc(&a, 40 * MIB));
    x = vp_allocator_malloc_on(&a, 40 * MIB, 1);
    CHECK_EQ_U64(a.reserved, 80 * MIB);
    vp_allocator_release(&a, x);
    y = vp_allocator_malloc_on(&a, 40 * MIB, 1); /* its own stream's block again */
    CHECK_EQ_U64(a.reserved, 80 * MIB);
    CHECK_EQ_U64(a.blocks[y].stream, 1);
    vp_allocator_free(&a);

    /* the text: errors name the option; the echo is canonical */
    CHECK(!vp_alloc_config_parse("max_split_size_mb:10", &c, message, sizeof message));
    CHECK(strstr(message, "max_split_size_mb") != NULL);
    CHECK(!vp_alloc_config_parse("expandable_segments:yes", &c, message, sizeof message));
    CHECK(strstr(message, "expandable_segments") != NULL);
    CHECK(!vp_alloc_config_parse("roundup_power2_divisions:3", &c, message, sizeof message));
    CHECK(!vp_alloc_config_parse("garbage_collection_threshold:0.6", &c, message, sizeof message));
    CHECK(strstr(message, "garbage_collection_threshold") != NULL);
    CHECK(!vp_alloc_config_parse("backend:cudaMallocAsync", &c, message, sizeof message));
    CHECK(!vp_alloc_config_parse("max_splt_size_mb:128", &c, message, sizeof message));
    CHECK(strstr(message, "max_splt_size_mb") != NULL);
    CHECK(vp_alloc_config_parse("pinned_use_cuda_host_register:True,max_split_size_mb:64,expandable_segments:False", &c,
                                message, sizeof message));
    char text[128];
    vp_alloc_config_format(&c, text, sizeof text);
    CHECK(strcmp(text, "max_split_size_mb:64") == 0);
    CHECK(vp_alloc_config_parse("", &c, message, sizeof message));
    vp_alloc_config_format(&c, text, sizeof text);
    CHECK(strcmp(text, "") == 0);
}

/* The pool's bins and heaps against the order they stand for, a brute
 * force over every block: BlockComparatorSize's (stream, size, address).
 * Random insertions and removals, few sizes (as a step's), many blocks of
 * each; after each change every lower bound and its successor agree. */
static bool in_order(const vp_alloc_block *x, const vp_alloc_block *y) {
    if (x->stream != y->stream) return x->stream < y->stream;
    if (x->size != y->size) return x->size < y->size;
    if (x->segment != y->segment) return x->segment < y->segment;
    return x->offset < y->offset;
}

static void test_pool_order(void) {
    enum { N = 600, SIZES = 5 };
    static vp_alloc_block blocks[N];
    bool in_pool[N] = {false};
    vp_alloc_pool pool;
    memset(&pool, 0, sizeof pool);
    unsigned seed = 12345, mismatches = 0, inserted = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        blocks[i] = (vp_alloc_block){.size = 512ull * (1 + (seed >> 16) % SIZES), .segment = 1 + (seed >> 8) % 40,
                                     .offset = 512ull * (unsigned)i, .stream = (uint8_t)((seed >> 20) % 2)};
    }
    for (int step = 0; step < 20000; step++) {
        seed = seed * 1103515245u + 12345u;
        int b = (int)((seed >> 16) % N);
        if (in_pool[b]) {
            CHECK(vp_alloc_pool_remove(&pool, blocks, b));
            in_pool[b] = false;
        } else {
            refused += !vp_alloc_pool_remove(&pool, blocks, b); /* not there: refused */
            inserted++;
            CHECK(vp_alloc_pool_insert(&pool, blocks, b));
            in_pool[b] = true;
        }
        uint8_t stream = (uint8_t)((seed >> 24) % 2);
        uint64_t size = 512ull * ((seed >> 4) % (SIZES + 2));
        int32_t first = -1, second = -1;
        for (int i = 0; i < N; i++) { /* the brute force: the two least blocks not before (stream, size) */
            if (!in_pool[i] || in_order(&blocks[i], &(vp_alloc_block){.size = size, .stream = stream})) continue;
            if (first < 0 || in_order(&blocks[i], &blocks[first])) second = first, first = i;
            else if (second < 0 || in_order(&blocks[i], &blocks[second])) second = i;
        }
        int32_t after, found = vp_alloc_pool_lower_bound(&pool, blocks, stream, size, &after);
        mismatches += found != first || after != second;
    }
    CHECK_EQ_U64(mismatches, 0);
    CHECK_EQ_U64(refused, inserted);
    vp_alloc_pool_free(&pool);
}

int main(void) {
    test_rounding();
    test_segment_sizes();
    test_split_thresholds();
    test_pools_and_best_fit();
    test_merge();
    test_empty_cache();
    test_pool_order();
    test_replay();
    test_replay_after_prelude();
    test_replay_empty_cache();
    test_config();
    return check_summary("allocator");
}
