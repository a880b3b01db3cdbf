/* allocator.c — PyTorch's CUDA caching allocator, default configuration (one
 * stream, no expandable_segments, no max_split_size_mb, no
 * roundup_power2_divisions), simulated block by block. The rules are those of
 * c10/cuda/CUDACachingAllocator.cpp, each cited at the function that follows
 * it; segments are never returned (empty_cache is not called in a step, and
 * the simulation never runs out of device memory). */
#include "allocator.h"

#include <stdlib.h>
#include <string.h>

void vp_allocator_init(vp_allocator *a) { memset(a, 0, sizeof *a); }

void vp_allocator_free(vp_allocator *a) {
    free(a->blocks);
    free(a->spare);
    memset(a, 0, sizeof *a);
}

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* round_size: below kMinBlockSize a request takes 512 bytes, else it is
 * rounded up to a multiple of 512. */
uint64_t vp_allocator_round(uint64_t bytes) {
    return bytes < VP_ALLOC_MIN_BLOCK ? VP_ALLOC_MIN_BLOCK : round_up(bytes, VP_ALLOC_MIN_BLOCK);
}

/* get_allocation_size: up to kSmallSize a 2 MiB segment (kSmallBuffer), below
 * kMinLargeAlloc a 20 MiB one (kLargeBuffer), else the request rounded up to
 * kRoundLarge. */
uint64_t vp_allocator_segment_size(uint64_t rounded) {
    if (rounded <= VP_ALLOC_SMALL_SIZE) return VP_ALLOC_SMALL_BUFFER;
    if (rounded < VP_ALLOC_MIN_LARGE_ALLOC) return VP_ALLOC_LARGE_BUFFER;
    return round_up(rounded, VP_ALLOC_ROUND_LARGE);
}

/* should_split: a small-pool block is split when at least kMinBlockSize
 * would remain, a large-pool one when more than kSmallSize would. */
bool vp_allocator_should_split(uint64_t block, uint64_t rounded, bool small) {
    uint64_t remaining = block - rounded;
    return small ? remaining >= VP_ALLOC_MIN_BLOCK : remaining > VP_ALLOC_SMALL_SIZE;
}

static int32_t new_block(vp_allocator *a) {
    if (a->n_spare) return a->spare[--a->n_spare];
    if (a->n_blocks == a->cap_blocks) {
        uint32_t cap = a->cap_blocks ? a->cap_blocks * 2 : 256;
        if (cap > (uint32_t)INT32_MAX) return -1;
        vp_alloc_block *grown = realloc(a->blocks, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        a->blocks = grown;
        a->cap_blocks = cap;
    }
    return (int32_t)a->n_blocks++;
}

static bool retire_block(vp_allocator *a, int32_t b) {
    a->blocks[b].used = false;
    if (a->n_spare == a->cap_spare) {
        uint32_t cap = a->cap_spare ? a->cap_spare * 2 : 64;
        int32_t *grown = realloc(a->spare, (size_t)cap * sizeof *grown);
        if (!grown) return false; /* the slot is lost, not the result */
        a->spare = grown;
        a->cap_spare = cap;
    }
    a->spare[a->n_spare++] = b;
    return true;
}

/* BlockComparatorSize orders a pool by (stream, size, address): the first
 * block not smaller than the request is the smallest that fits, the lowest
 * address among equals. */
static bool before(const vp_alloc_block *x, const vp_alloc_block *y) {
    if (x->size != y->size) return x->size < y->size;
    if (x->segment != y->segment) return x->segment < y->segment;
    return x->offset < y->offset;
}

/* get_free_block: the best fit in the request's pool (kSmallSize and below:
 * the small pool). A linear scan; the pools of a step hold few blocks. */
static int32_t best_fit(const vp_allocator *a, uint64_t rounded, bool small) {
    int32_t best = -1;
    for (uint32_t i = 0; i < a->n_blocks; i++) {
        const vp_alloc_block *b = &a->blocks[i];
        if (!b->used || !b->free || b->small != small || b->size < rounded) continue;
        if (best < 0 || before(b, &a->blocks[best])) best = (int32_t)i;
    }
    return best;
}

int32_t vp_allocator_malloc(vp_allocator *a, uint64_t bytes) {
    uint64_t rounded = vp_allocator_round(bytes);
    bool small = rounded <= VP_ALLOC_SMALL_SIZE;
    int32_t b = best_fit(a, rounded, small);
    if (b < 0) { /* alloc_block: a new segment from cudaMalloc */
        b = new_block(a);
        if (b < 0) {
            a->failed = true;
            return -1;
        }
        uint64_t size = vp_allocator_segment_size(rounded);
        a->blocks[b] = (vp_alloc_block){size, ++a->segments, 0, -1, -1, small, true, true};
        a->reserved += size;
        if (a->reserved > a->peak_reserved) a->peak_reserved = a->reserved;
    }
    if (vp_allocator_should_split(a->blocks[b].size, rounded, small)) {
        /* the request takes the block's start; the rest stays free after it */
        int32_t rest = new_block(a);
        if (rest < 0) {
            a->failed = true;
            return -1;
        }
        vp_alloc_block *block = &a->blocks[b];
        a->blocks[rest] = (vp_alloc_block){block->size - rounded, block->segment, block->offset + rounded, b,
                                           block->next, small, true, true};
        if (block->next >= 0) a->blocks[block->next].prev = rest;
        block->next = rest;
        block->size = rounded;
    }
    a->blocks[b].free = false;
    a->allocated += a->blocks[b].size;
    if (a->allocated > a->peak_allocated) a->peak_allocated = a->allocated;
    return b;
}

/* try_merge_blocks: a freed block absorbs a free neighbour of its segment. */
static int32_t merge(vp_allocator *a, int32_t into, int32_t gone) {
    vp_alloc_block *x = &a->blocks[into], *y = &a->blocks[gone];
    if (y->offset < x->offset) x->offset = y->offset; /* absorbing the one before */
    x->size += y->size;
    if (y->next == into) { /* gone precedes into */
        x->prev = y->prev;
        if (y->prev >= 0) a->blocks[y->prev].next = into;
    } else {
        x->next = y->next;
        if (y->next >= 0) a->blocks[y->next].prev = into;
    }
    retire_block(a, gone);
    return into;
}

/* free_block: the block goes back to its pool, merged with free neighbours. */
void vp_allocator_release(vp_allocator *a, int32_t b) {
    if (b < 0 || (uint32_t)b >= a->n_blocks || !a->blocks[b].used || a->blocks[b].free) {
        a->failed = true;
        return;
    }
    a->blocks[b].free = true;
    a->allocated -= a->blocks[b].size;
    int32_t prev = a->blocks[b].prev, next = a->blocks[b].next;
    if (prev >= 0 && a->blocks[prev].free) merge(a, b, prev);
    if (next >= 0 && a->blocks[next].free) merge(a, b, next);
}

/* ---- the replay of a step's events ---- */

typedef struct {
    uint32_t tensor;
    const char *op;
    uint64_t size;
    int32_t block;
    bool from_step;   /* made by a step, not by setup */
    bool carried;     /* made by an earlier step and still live when this one began */
} live_block;

typedef struct {
    vp_allocator alloc;
    live_block *live; /* owned; in allocation order */
    uint32_t n_live, cap_live;
    unsigned by_size;
    bool repeat;      /* replaying a step after the first */
    bool bad;
} replay;

/* A tensor the earlier step left live (a .grad kept between steps, a
 * bucket) is not made again: the step's allocation of it is skipped. */
static bool carried_over(replay *r, const vp_event *e) {
    for (int64_t i = (int64_t)r->n_live - 1; i >= 0; i--) {
        live_block *l = &r->live[i];
        if (l->carried && l->size == (uint64_t)e->delta && l->tensor == e->tensor &&
            (e->tensor || l->op == e->place.op)) {
            l->carried = false;
            return true;
        }
    }
    return false;
}

static void replay_alloc(replay *r, const vp_event *e) {
    if (r->repeat && carried_over(r, e)) return;
    if (r->n_live == r->cap_live) {
        uint32_t cap = r->cap_live ? r->cap_live * 2 : 256;
        live_block *grown = realloc(r->live, (size_t)cap * sizeof *grown);
        if (!grown) {
            r->bad = true;
            return;
        }
        r->live = grown;
        r->cap_live = cap;
    }
    int32_t b = vp_allocator_malloc(&r->alloc, (uint64_t)e->delta);
    if (b < 0) {
        r->bad = true;
        return;
    }
    bool step = e->place.phase != VP_PHASE_SETUP;
    r->live[r->n_live++] = (live_block){e->tensor, e->place.op, (uint64_t)e->delta, b, step, false};
}

/* The live block a free releases: the tensor's own when the event names it;
 * else the latest of the same op and size, or failing that of the same size
 * (tools/allocator_replay.py's pairing). */
static int64_t find_live(const replay *r, const vp_event *e, uint64_t size) {
    for (int64_t i = (int64_t)r->n_live - 1; e->tensor && i >= 0; i--)
        if (r->live[i].tensor == e->tensor && r->live[i].size == size) return i;
    if (e->tensor) return -1;
    for (int64_t i = (int64_t)r->n_live - 1; i >= 0; i--)
        if (!r->live[i].tensor && r->live[i].size == size && r->live[i].op == e->place.op) return i;
    for (int64_t i = (int64_t)r->n_live - 1; i >= 0; i--)
        if (r->live[i].size == size && (!r->live[i].op || !e->place.op || !strcmp(r->live[i].op, e->place.op)))
            return i;
    for (int64_t i = (int64_t)r->n_live - 1; i >= 0; i--)
        if (r->live[i].size == size) return i;
    return -1;
}

static void replay_release(replay *r, const vp_event *e) {
    uint64_t size = (uint64_t)(-e->delta);
    int64_t i = find_live(r, e, size);
    if (i < 0) {
        r->bad = true;
        return;
    }
    if (!e->tensor) r->by_size++;
    vp_allocator_release(&r->alloc, r->live[i].block);
    memmove(&r->live[i], &r->live[i + 1], (size_t)(r->n_live - 1 - (uint64_t)i) * sizeof *r->live);
    r->n_live--;
}

/* Which events a pass replays. */
typedef enum { PASS_RESIDENT, PASS_STATES, PASS_STEP } pass_kind;

static bool is_state(const vp_event *e) {
    return e->category == VP_CAT_OPTIMIZER || e->category == VP_CAT_MASTER;
}

static void run(replay *r, const vp_event *events, unsigned from, unsigned to, pass_kind kind) {
    for (unsigned i = from; i < to && !r->bad; i++) {
        const vp_event *e = &events[i];
        bool setup = e->place.phase == VP_PHASE_SETUP;
        if (kind == PASS_STEP ? setup : (!setup || is_state(e) != (kind == PASS_STATES))) continue;
        if (e->tensor == VP_EVENT_MOVE || e->delta == 0) continue; /* the storage stays where it is */
        if (e->delta > 0) replay_alloc(r, e);
        else replay_release(r, e);
    }
}

bool vp_allocator_replay_events(const vp_event *events, unsigned n_events, unsigned max_steps,
                                vp_allocator_replay *out) {
    memset(out, 0, sizeof *out);
    if (max_steps == 0) max_steps = 1;
    if (max_steps > 4) max_steps = 4;
    for (unsigned i = 0; i < n_events; i++)
        if (events[i].repeat > 1 || events[i].category >= VP_CAT_COUNT) return false; /* a folded log */
    unsigned first_update = n_events;
    for (unsigned i = 0; i < n_events && first_update == n_events; i++)
        if (events[i].place.phase == VP_PHASE_OPTIMIZER) first_update = i;
    replay r;
    memset(&r, 0, sizeof r);
    vp_allocator_init(&r.alloc);
    run(&r, events, 0, n_events, PASS_RESIDENT);
    run(&r, events, 0, first_update, PASS_STEP);
    run(&r, events, 0, n_events, PASS_STATES);
    run(&r, events, first_update, n_events, PASS_STEP);
    out->reserved_after[0] = r.alloc.peak_reserved;
    out->steps = 1;
    r.repeat = true;
    while (!r.bad && out->steps < max_steps) {
        for (uint32_t i = 0; i < r.n_live; i++) r.live[i].carried = r.live[i].from_step;
        run(&r, events, 0, n_events, PASS_STEP);
        out->reserved_after[out->steps++] = r.alloc.peak_reserved;
        if (out->reserved_after[out->steps - 1] == out->reserved_after[out->steps - 2]) break;
    }
    bool ok = !r.bad && !r.alloc.failed;
    out->peak_reserved = r.alloc.peak_reserved;
    out->peak_allocated = r.alloc.peak_allocated;
    out->segments = r.alloc.segments;
    out->paired_by_size = r.by_size;
    vp_allocator_free(&r.alloc);
    free(r.live);
    return ok;
}
