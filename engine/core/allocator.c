/* allocator.c — PyTorch's CUDA caching allocator simulated block by block:
 * its default configuration, streams' separate free blocks, and the options
 * max_split_size_mb, expandable_segments and roundup_power2_divisions
 * (alloc_conf.c reads them). The rules are those of
 * c10/cuda/CUDACachingAllocator.cpp, each cited at the function that follows
 * it; segments are returned only by an empty_cache the log names (a run's
 * prelude, or TRL's hooks in the step), and the simulation never runs out
 * of device memory, so neither the out-of-memory retry nor
 * garbage_collection_threshold acts. */
#include "allocator.h"

#include <stdlib.h>
#include <string.h>

void vp_allocator_init(vp_allocator *a) { memset(a, 0, sizeof *a); }

void vp_allocator_init_config(vp_allocator *a, const vp_alloc_config *config) {
    vp_allocator_init(a);
    if (config) a->config = *config;
}

void vp_allocator_free(vp_allocator *a) {
    free(a->blocks);
    free(a->spare);
    vp_alloc_pool_free(&a->pool[0]);
    vp_alloc_pool_free(&a->pool[1]);
    memset(a, 0, sizeof *a);
}

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

/* round_size: below kMinBlockSize a request takes 512 bytes, else it is
 * rounded up to a multiple of 512. */
uint64_t vp_allocator_round(uint64_t bytes) {
    return bytes < VP_ALLOC_MIN_BLOCK ? VP_ALLOC_MIN_BLOCK : round_up(bytes, VP_ALLOC_MIN_BLOCK);
}

/* roundup_power2_next_division: a power of two stays; otherwise the span
 * from the power of two below to the next is cut into `divisions` equal
 * parts and the size rounded up to the next cut. */
static uint64_t next_division(uint64_t size, unsigned divisions) {
    if ((size & (size - 1)) == 0) return size;
    uint64_t floor = 1;
    while (floor <= size / 2) floor <<= 1;
    uint64_t division = floor / divisions;
    if (division == 0) return floor << 1;
    uint64_t cut = size & ~(division - 1);
    return cut == size ? size : cut + division;
}

/* round_size with roundup_power2_divisions: a request above 512 x
 * divisions bytes is rounded up to the next division
 * (roundup_power2_next_division), the others to 512 bytes. Applied to a
 * size already rounded to 512 bytes it gives the same (every division
 * there is a multiple of 512). */
uint64_t vp_allocator_round_config(const vp_alloc_config *c, uint64_t bytes) {
    unsigned divisions = c ? c->roundup_power2_divisions : 0;
    if (bytes >= VP_ALLOC_MIN_BLOCK && divisions > 1 && bytes > (uint64_t)VP_ALLOC_MIN_BLOCK * divisions)
        return next_division(bytes, divisions);
    return vp_allocator_round(bytes);
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
    return vp_allocator_should_split_config(NULL, block, rounded, small);
}

/* ... and with the options: under expandable_segments a large block splits
 * as a small one does; a request of max_split_size or more never splits
 * its block. */
static uint64_t max_split(const vp_alloc_config *c) {
    return c && c->max_split_size ? c->max_split_size : UINT64_MAX;
}

bool vp_allocator_should_split_config(const vp_alloc_config *c, uint64_t block, uint64_t rounded, bool small) {
    uint64_t remaining = block - rounded;
    if (small || (c && c->expandable_segments)) return remaining >= VP_ALLOC_MIN_BLOCK;
    return rounded < max_split(c) && remaining > VP_ALLOC_SMALL_SIZE;
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

static bool pool_insert(vp_allocator *a, int32_t b) {
    return vp_alloc_pool_insert(&a->pool[a->blocks[b].small], a->blocks, b);
}

static void pool_remove(vp_allocator *a, int32_t b) {
    if (!vp_alloc_pool_remove(&a->pool[a->blocks[b].small], a->blocks, b)) a->failed = true; /* not there: a bug */
}

/* get_free_block: the best fit in the request's pool (kSmallSize and below:
 * the small pool), the first block of the ordered pool not smaller than the
 * request, of the request's stream (BlockComparatorSize compares the
 * stream first: a block freed on one stream never serves another). */
static int32_t best_fit(const vp_allocator *a, uint64_t rounded, bool small, uint8_t stream) {
    int32_t after, b = vp_alloc_pool_lower_bound(&a->pool[small], a->blocks, stream, rounded, &after);
    if (b < 0 || a->blocks[b].stream != stream) return -1;
    /* expandable_segments: the free block at a segment's mapped end counts
     * as large as the segment can grow, so a larger block that fits comes
     * first */
    if (a->config.expandable_segments && a->blocks[b].next < 0 && after >= 0 && a->blocks[after].stream == stream)
        b = after;
    /* max_split_size_mb: an oversized block does not serve a smaller
     * request, nor a larger one it exceeds by kLargeBuffer or more */
    uint64_t limit = max_split(&a->config), size = a->blocks[b].size;
    if (rounded < limit && size >= limit) return -1;
    if (rounded >= limit && size >= rounded + VP_ALLOC_LARGE_BUFFER) return -1;
    return b;
}

/* try_allocate_expandable_block: each pool and stream has one segment
 * (ExpandableSegment) whose address range is mapped page by page, 2 MiB
 * pages for the small pool and 20 MiB for the large (kSmallBuffer,
 * kLargeBuffer); a request no free block serves extends the free block at
 * its mapped end, or maps a new one there, by whole pages. */
static int32_t expand(vp_allocator *a, uint64_t rounded, bool small, uint8_t stream) {
    uint64_t page = small ? VP_ALLOC_SMALL_BUFFER : VP_ALLOC_LARGE_BUFFER;
    uint64_t *segment = &a->expandable[small][stream], *mapped = &a->mapped[small][stream];
    int32_t tail = -1;
    for (uint32_t i = 0; *segment && i < a->n_blocks && tail < 0; i++)
        if (a->blocks[i].used && a->blocks[i].segment == *segment && a->blocks[i].next < 0) tail = (int32_t)i;
    if (tail >= 0 && a->blocks[tail].free) {
        pool_remove(a, tail);
        uint64_t have = a->blocks[tail].size;
        uint64_t grow = rounded > have ? round_up(rounded - have, page) : 0;
        a->blocks[tail].size += grow;
        *mapped += grow;
        a->reserved += grow;
        return tail;
    }
    int32_t b = new_block(a);
    if (b < 0) return -1;
    if (!*segment) *segment = ++a->segments;
    uint64_t size = round_up(rounded, page);
    a->blocks[b] = (vp_alloc_block){size, *segment, *mapped, tail, -1, stream, small, true, true, 0};
    if (tail >= 0) a->blocks[tail].next = b;
    *mapped += size;
    a->reserved += size;
    return b;
}

int32_t vp_allocator_malloc(vp_allocator *a, uint64_t bytes) { return vp_allocator_malloc_on(a, bytes, 0); }

int32_t vp_allocator_malloc_on(vp_allocator *a, uint64_t bytes, uint8_t stream) {
    uint64_t rounded = vp_allocator_round_config(&a->config, bytes);
    bool small = rounded <= VP_ALLOC_SMALL_SIZE;
    if (stream >= VP_ALLOC_STREAMS) stream = VP_ALLOC_STREAMS - 1;
    int32_t b = best_fit(a, rounded, small, stream);
    if (b >= 0) pool_remove(a, b);
    else if (a->config.expandable_segments) {
        b = expand(a, rounded, small, stream);
        if (b < 0) {
            a->failed = true;
            return -1;
        }
        if (a->reserved > a->peak_reserved) a->peak_reserved = a->reserved;
    } else { /* alloc_block: a new segment from cudaMalloc */
        b = new_block(a);
        if (b < 0) {
            a->failed = true;
            return -1;
        }
        uint64_t size = vp_allocator_segment_size(rounded);
        a->blocks[b] = (vp_alloc_block){size, ++a->segments, 0, -1, -1, stream, small, true, true, 0};
        a->reserved += size;
        if (a->reserved > a->peak_reserved) a->peak_reserved = a->reserved;
    }
    if (vp_allocator_should_split_config(&a->config, a->blocks[b].size, rounded, small)) {
        /* the request takes the block's start; the rest stays free after it */
        int32_t rest = new_block(a);
        if (rest < 0) {
            a->failed = true;
            return -1;
        }
        vp_alloc_block *block = &a->blocks[b];
        a->blocks[rest] = (vp_alloc_block){block->size - rounded, block->segment, block->offset + rounded, b,
                                           block->next, stream, small, true, true, 0};
        if (block->next >= 0) a->blocks[block->next].prev = rest;
        block->next = rest;
        block->size = rounded;
        if (!pool_insert(a, rest)) {
            a->failed = true;
            return -1;
        }
    }
    a->blocks[b].free = false;
    a->allocated += a->blocks[b].size;
    if (a->allocated > a->peak_allocated) a->peak_allocated = a->allocated;
    return b;
}

/* try_merge_blocks: a freed block absorbs a free neighbour of its segment. */
static int32_t merge(vp_allocator *a, int32_t into, int32_t gone) {
    pool_remove(a, gone);
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
    if (!pool_insert(a, b)) a->failed = true;
}

/* release_cached_blocks (emptyCache): release_blocks gives back every free
 * block that is a whole segment (no neighbour: cudaFree). Under
 * expandable_segments it unmaps the pages free blocks cover whole
 * (unmap_block); here those of each segment's free tail, whose end is the
 * mapped end: pages inside a segment's other free blocks stay mapped. */
void vp_allocator_empty_cache(vp_allocator *a) {
    for (uint32_t i = 0; i < a->n_blocks; i++) {
        vp_alloc_block *b = &a->blocks[i];
        if (!b->used || !b->free) continue;
        if (!a->config.expandable_segments) {
            if (b->prev >= 0 || b->next >= 0) continue;
            pool_remove(a, (int32_t)i);
            a->reserved -= b->size;
            retire_block(a, (int32_t)i);
            continue;
        }
        if (b->next >= 0) continue;
        uint64_t page = b->small ? VP_ALLOC_SMALL_BUFFER : VP_ALLOC_LARGE_BUFFER;
        uint64_t end = b->offset + b->size, first = round_up(b->offset, page);
        if (end <= first) continue;
        uint64_t unmapped = end - first;
        pool_remove(a, (int32_t)i);
        b->size -= unmapped;
        a->mapped[b->small][b->stream] -= unmapped;
        a->reserved -= unmapped;
        if (b->size) {
            if (!pool_insert(a, (int32_t)i)) a->failed = true;
        } else {
            if (b->prev >= 0) a->blocks[b->prev].next = -1;
            else a->expandable[b->small][b->stream] = 0; /* its whole segment unmapped */
            retire_block(a, (int32_t)i);
        }
    }
}

/* ---- the replay of a step's events ---- */

/* A block the replay holds for a tensor or an unnamed allocation. */
typedef struct {
    uint32_t tensor;  /* 0: unnamed (kept in the `unnamed` list) */
    const char *op;
    uint64_t size;
    int32_t block;    /* -1: not live (an unnamed entry freed, left in the list until it is compacted) */
    uint32_t older;   /* unnamed: index + 1 of the entry before it of the same op and size (0: none) */
    bool from_step;   /* made by a step, not by setup */
    bool carried;     /* made by an earlier step and still live when this one began */
    bool preloaded;   /* a resident tensor the prelude made: setup does not make it again */
} live_block;

/* The unnamed entries of one op and size, latest first: a chain through
 * their `older` links. */
typedef struct {
    const char *op;   /* NULL: an empty slot */
    uint64_t size;
    uint32_t latest;  /* index + 1 of the latest entry (0: none) */
} unnamed_chain;

typedef struct {
    vp_allocator alloc;
    live_block *named;    /* indexed by tensor (the sim's handles are dense), owned */
    uint32_t n_named;
    live_block *unnamed;  /* in allocation order, owned */
    uint32_t n_unnamed, cap_unnamed;
    unnamed_chain *chains; /* by (op, size), open addressing, owned */
    uint32_t n_chains, cap_chains;
    unsigned by_size;
    const vp_stream_ops *streams;
    bool repeat;          /* replaying a step after the first */
    uint32_t n_carried;   /* unnamed blocks still marked carried */
    bool bad;
} replay;

static uint32_t chain_hash(const char *op, uint64_t size, uint32_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)op * 0x9E3779B97F4A7C15ull ^ size * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(h >> 32) & (cap - 1);
}

static unnamed_chain *chain_slot(unnamed_chain *chains, uint32_t cap, const char *op, uint64_t size) {
    uint32_t i = chain_hash(op, size, cap);
    while (chains[i].op && (chains[i].op != op || chains[i].size != size)) i = (i + 1) & (cap - 1);
    return &chains[i];
}

/* An unnamed event without an op label keys its chain by this instead
 * (a NULL op marks an empty slot). */
static const char unlabelled[] = "";

/* The chain of (op, size): NULL when there is none and `make` is false, or
 * when out of memory. */
static unnamed_chain *chain_of(replay *r, const char *op, uint64_t size, bool make) {
    if (!op) op = unlabelled;
    unnamed_chain *found = r->cap_chains ? chain_slot(r->chains, r->cap_chains, op, size) : NULL;
    if (found && found->op) return found;
    if (!make) return NULL;
    if (2 * (r->n_chains + 1) > r->cap_chains) { /* at most half full */
        uint32_t cap = r->cap_chains ? r->cap_chains * 2 : 256;
        unnamed_chain *grown = calloc(cap, sizeof *grown);
        if (!grown) return NULL;
        for (uint32_t i = 0; i < r->cap_chains; i++)
            if (r->chains[i].op) *chain_slot(grown, cap, r->chains[i].op, r->chains[i].size) = r->chains[i];
        free(r->chains);
        r->chains = grown;
        r->cap_chains = cap;
    }
    unnamed_chain *c = chain_slot(r->chains, r->cap_chains, op, size);
    *c = (unnamed_chain){op, size, 0};
    r->n_chains++;
    return c;
}

/* The latest live entry of a chain, carried if asked (NULL: none); freed
 * entries at its head are dropped from it on the way. */
static live_block *latest_in_chain(replay *r, unnamed_chain *c, bool carried) {
    if (!c) return NULL;
    while (c->latest && r->unnamed[c->latest - 1].block < 0) c->latest = r->unnamed[c->latest - 1].older;
    for (uint32_t i = c->latest; i; i = r->unnamed[i - 1].older) {
        live_block *l = &r->unnamed[i - 1];
        if (l->block >= 0 && (!carried || l->carried)) return l;
    }
    return NULL;
}

/* Drops the freed unnamed entries, keeping the order, and links the
 * chains again. */
static void compact_unnamed(replay *r) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < r->n_unnamed; i++)
        if (r->unnamed[i].block >= 0) r->unnamed[kept++] = r->unnamed[i];
    r->n_unnamed = kept;
    for (uint32_t i = 0; i < r->cap_chains; i++) r->chains[i].latest = 0;
    for (uint32_t i = 0; i < kept; i++) {
        unnamed_chain *c = chain_of(r, r->unnamed[i].op, r->unnamed[i].size, false);
        if (!c) { /* every live entry's chain was made when it was */
            r->bad = true;
            return;
        }
        r->unnamed[i].older = c->latest;
        c->latest = i + 1;
    }
}

/* A tensor the earlier step left live (a .grad kept between steps, a
 * bucket) is not made again: the step's allocation of it is skipped. */
static bool carried_over(replay *r, const vp_event *e) {
    if (e->tensor) {
        live_block *l = &r->named[e->tensor];
        if (l->block < 0 || !l->carried) return false;
        l->carried = false;
        return true;
    }
    if (!r->n_carried) return false;
    live_block *l = latest_in_chain(r, chain_of(r, e->place.op, (uint64_t)e->delta, false), true);
    if (!l) return false;
    l->carried = false;
    r->n_carried--;
    return true;
}

static void replay_alloc(replay *r, const vp_event *e) {
    if (r->repeat && carried_over(r, e)) return;
    if (e->tensor && r->named[e->tensor].preloaded) { /* the prelude made it */
        r->named[e->tensor].preloaded = false;
        return;
    }
    if (!e->tensor && r->n_unnamed == r->cap_unnamed) {
        uint32_t cap = r->cap_unnamed ? r->cap_unnamed * 2 : 256;
        live_block *grown = realloc(r->unnamed, (size_t)cap * sizeof *grown);
        if (!grown) {
            r->bad = true;
            return;
        }
        r->unnamed = grown;
        r->cap_unnamed = cap;
    }
    if (e->tensor && r->named[e->tensor].block >= 0) { /* made twice without a free: not a log to replay */
        r->bad = true;
        return;
    }
    unnamed_chain *chain = e->tensor ? NULL : chain_of(r, e->place.op, (uint64_t)e->delta, true);
    if (!e->tensor && !chain) {
        r->bad = true;
        return;
    }
    int32_t b = vp_allocator_malloc_on(&r->alloc, (uint64_t)e->delta, (uint8_t)vp_stream_of(r->streams, e->place.op));
    if (b < 0) {
        r->bad = true;
        return;
    }
    live_block l = {e->tensor, e->place.op, (uint64_t)e->delta, b, 0, e->place.phase != VP_PHASE_SETUP, false, false};
    if (e->tensor) {
        r->named[e->tensor] = l;
        return;
    }
    l.older = chain->latest;
    r->unnamed[r->n_unnamed++] = l;
    chain->latest = r->n_unnamed;
}

/* The live block an unnamed free releases: the latest unnamed one of the
 * same op and size, else of the same size (tools/allocator_replay.py's
 * pairing); failing that a named one of the same size (a tensor freed
 * outside the autograd simulation, as the KV cache's). */
static live_block *find_unnamed(replay *r, const vp_event *e, uint64_t size) {
    live_block *l = latest_in_chain(r, chain_of(r, e->place.op, size, false), false);
    if (l) return l;
    for (int64_t i = (int64_t)r->n_unnamed - 1; i >= 0; i--)
        if (r->unnamed[i].block >= 0 && r->unnamed[i].size == size) return &r->unnamed[i];
    for (int64_t t = (int64_t)r->n_named - 1; t > 0; t--)
        if (r->named[t].block >= 0 && r->named[t].size == size) return &r->named[t];
    return NULL;
}

static void replay_release(replay *r, const vp_event *e) {
    uint64_t size = (uint64_t)(-e->delta);
    live_block *l = e->tensor ? &r->named[e->tensor] : find_unnamed(r, e, size);
    if (!l || l->block < 0 || l->size != size) {
        r->bad = true;
        return;
    }
    if (!e->tensor) r->by_size++;
    vp_allocator_release(&r->alloc, l->block);
    l->block = -1;
    if (l->carried && !l->tensor) r->n_carried--;
    l->carried = false;
}

/* Which events a pass replays: the prelude's (all, each naming its
 * tensor), setup's resident state or optimizer states, or the step's. */
typedef enum { PASS_PRELUDE, PASS_RESIDENT, PASS_STATES, PASS_STEP } pass_kind;

static bool is_state(const vp_event *e) {
    return e->category == VP_CAT_OPTIMIZER || e->category == VP_CAT_MASTER;
}

static void run(replay *r, const vp_event *events, unsigned from, unsigned to, pass_kind kind) {
    for (unsigned i = from; i < to && !r->bad; i++) {
        const vp_event *e = &events[i];
        bool setup = e->place.phase == VP_PHASE_SETUP;
        if (kind == PASS_PRELUDE) {
            if (e->tensor == VP_EVENT_EMPTY_CACHE) {
                vp_allocator_empty_cache(&r->alloc);
                continue;
            }
            if (!e->tensor || e->tensor == VP_EVENT_MOVE) { /* a prelude names every tensor */
                r->bad = true;
                return;
            }
        } else if (kind == PASS_STEP ? setup : (!setup || is_state(e) != (kind == PASS_STATES))) {
            continue;
        } else if (e->tensor == VP_EVENT_EMPTY_CACHE) { /* one the step calls (TRL's hooks with bitsandbytes) */
            vp_allocator_empty_cache(&r->alloc);
            continue;
        }
        if (e->tensor == VP_EVENT_MOVE || e->delta == 0) continue; /* the storage stays where it is */
        if (e->delta > 0) replay_alloc(r, e);
        else replay_release(r, e);
    }
}

bool vp_allocator_replay_events(const vp_event *events, unsigned n_events, unsigned max_steps,
                                vp_allocator_replay *out) {
    return vp_allocator_replay_run(NULL, 0, events, n_events, max_steps, NULL, NULL, out);
}

static uint32_t largest_tensor(const vp_event *events, unsigned n, uint32_t max_tensor) {
    for (unsigned i = 0; i < n; i++) {
        uint32_t t = events[i].tensor;
        if (t != VP_EVENT_MOVE && t != VP_EVENT_EMPTY_CACHE && t > max_tensor) max_tensor = t;
    }
    return max_tensor;
}

bool vp_allocator_replay_run(const vp_event *prelude, unsigned n_prelude, const vp_event *events, unsigned n_events,
                             unsigned max_steps, const vp_stream_ops *streams, const vp_alloc_config *config,
                             vp_allocator_replay *out) {
    memset(out, 0, sizeof *out);
    if (max_steps == 0) max_steps = 1;
    if (max_steps > 4) max_steps = 4;
    for (unsigned i = 0; i < n_events; i++)
        if (events[i].repeat > 1 || events[i].category >= VP_CAT_COUNT) return false; /* a folded log */
    unsigned first_update = n_events;
    for (unsigned i = 0; i < n_events && first_update == n_events; i++)
        if (events[i].place.phase == VP_PHASE_OPTIMIZER) first_update = i;
    for (unsigned i = 0; i < n_prelude; i++)
        if (prelude[i].repeat > 1) return false;
    uint32_t max_tensor = largest_tensor(prelude, n_prelude, largest_tensor(events, n_events, 0));
    replay r;
    memset(&r, 0, sizeof r);
    r.n_named = max_tensor + 1;
    r.streams = streams;
    r.named = malloc((size_t)r.n_named * sizeof *r.named);
    if (!r.named) return false;
    for (uint32_t t = 0; t < r.n_named; t++) r.named[t] = (live_block){.tensor = t, .block = -1};
    vp_allocator_init_config(&r.alloc, config);
    run(&r, prelude, 0, n_prelude, PASS_PRELUDE);
    /* what the prelude left live is the resident state setup would make */
    for (uint32_t t = 1; t < r.n_named; t++) r.named[t].preloaded = r.named[t].block >= 0;
    run(&r, events, 0, n_events, PASS_RESIDENT);
    for (uint32_t t = 1; t < r.n_named; t++)
        if (r.named[t].preloaded) r.bad = true; /* the prelude made a tensor setup never makes */
    out->reserved_at_start = r.alloc.reserved;
    run(&r, events, 0, first_update, PASS_STEP);
    run(&r, events, 0, n_events, PASS_STATES);
    run(&r, events, first_update, n_events, PASS_STEP);
    out->reserved_after[0] = r.alloc.peak_reserved;
    out->steps = 1;
    r.repeat = true;
    while (!r.bad && out->steps < max_steps) {
        r.n_carried = 0;
        compact_unnamed(&r);
        for (uint32_t i = 0; i < r.n_unnamed; i++) {
            r.unnamed[i].carried = r.unnamed[i].from_step;
            r.n_carried += r.unnamed[i].carried;
        }
        for (uint32_t t = 1; t < r.n_named; t++) r.named[t].carried = r.named[t].block >= 0 && r.named[t].from_step;
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
    free(r.named);
    free(r.unnamed);
    free(r.chains);
    return ok;
}
