/* allocator.h — a simulation of PyTorch's CUDA caching allocator in its
 * default configuration, replayed over a step's allocation events. */
#ifndef VP_ALLOCATOR_H
#define VP_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc_pool.h"
#include "ledger.h"

/* The constants of c10/cuda/CUDACachingAllocator.cpp (since PyTorch 2.4
 * declared in c10/core/CachingAllocator.h / AllocatorConfig.h, same values). */
#define VP_ALLOC_MIN_BLOCK 512u                 /* kMinBlockSize: every size rounded up to 512 bytes */
#define VP_ALLOC_SMALL_SIZE (1ull << 20)        /* kSmallSize: the largest small-pool request, 1 MiB */
#define VP_ALLOC_SMALL_BUFFER (2ull << 20)      /* kSmallBuffer: small-pool segments, 2 MiB */
#define VP_ALLOC_LARGE_BUFFER (20ull << 20)     /* kLargeBuffer: large-pool segments for requests < 10 MiB */
#define VP_ALLOC_MIN_LARGE_ALLOC (10ull << 20)  /* kMinLargeAlloc: from here a request gets its own segment */
#define VP_ALLOC_ROUND_LARGE (2ull << 20)       /* kRoundLarge: ... rounded up to 2 MiB */

/* PYTORCH_CUDA_ALLOC_CONF's options the simulation honours (alloc_conf.c
 * parses them; zero: PyTorch's default). */
typedef struct {
    uint64_t max_split_size;           /* max_split_size_mb in bytes; 0: unlimited (SIZE_MAX) */
    bool expandable_segments;
    unsigned roundup_power2_divisions; /* 0 or 1: plain 512-byte rounding */
} vp_alloc_config;

/* Parses "option:value,option:value" as PyTorch's allocator configuration
 * does; false with `message` naming the option when it is not valid or not
 * modelled. An empty text is the default. */
bool vp_alloc_config_parse(const char *text, vp_alloc_config *out, char *message, size_t size);
/* The configuration as that text (empty for the default). */
void vp_alloc_config_format(const vp_alloc_config *config, char *out, size_t size);

#define VP_ALLOC_STREAMS VP_STREAMS /* the default stream, two of the frameworks' own and OffloadActivations' (ledger.h) */

typedef struct vp_alloc_block {
    uint64_t size;
    uint64_t segment;    /* the segment's number (1, 2, ...): the order cudaMalloc made them */
    uint64_t offset;     /* bytes from the segment's start: with `segment`, the block's address */
    int32_t prev, next;  /* neighbours in the segment (-1: none) */
    uint8_t stream;      /* the stream it was allocated on: a free block serves only its own stream */
    bool small;          /* its pool */
    bool free;
    bool used;           /* the slot holds a block (merged-away slots are reused) */
    uint32_t heap_at;    /* free: its place in its pool's bin (alloc_pool.c) */
} vp_alloc_block;

typedef struct {
    vp_alloc_block *blocks;  /* owned */
    uint32_t n_blocks, cap_blocks;
    int32_t *spare;          /* slots of blocks merged away, owned */
    uint32_t n_spare, cap_spare;
    vp_alloc_pool pool[2];   /* free blocks of the large [0] and small [1] pools (alloc_pool.h) */
    uint64_t segments;
    vp_alloc_config config;
    /* expandable_segments: each (pool, stream)'s one segment, grown at its end (0: none yet) */
    uint64_t expandable[2][VP_ALLOC_STREAMS], mapped[2][VP_ALLOC_STREAMS];
    uint64_t reserved, peak_reserved;   /* memory_reserved, max_memory_reserved */
    uint64_t allocated, peak_allocated; /* memory_allocated, max_memory_allocated */
    bool failed;             /* out of host memory, or a free of a block not allocated: figures meaningless */
} vp_allocator;

void vp_allocator_init(vp_allocator *a);
void vp_allocator_init_config(vp_allocator *a, const vp_alloc_config *config);
void vp_allocator_free(vp_allocator *a);

/* round_size: the bytes a request of `bytes` takes (at least 512, a multiple of 512). */
uint64_t vp_allocator_round(uint64_t bytes);
/* ... with roundup_power2_divisions */
uint64_t vp_allocator_round_config(const vp_alloc_config *config, uint64_t bytes);
/* get_allocation_size: the segment cudaMalloc'ed for a request that finds no cached block. */
uint64_t vp_allocator_segment_size(uint64_t rounded);
/* should_split: whether a free block of `block` bytes serving `rounded` is split. */
bool vp_allocator_should_split(uint64_t block, uint64_t rounded, bool small);
bool vp_allocator_should_split_config(const vp_alloc_config *config, uint64_t block, uint64_t rounded, bool small);

/* malloc of `bytes`: the block's handle, or -1 (with `failed` set) when out of host memory. */
int32_t vp_allocator_malloc(vp_allocator *a, uint64_t bytes);
/* The same on a stream (0: the default stream). */
int32_t vp_allocator_malloc_on(vp_allocator *a, uint64_t bytes, uint8_t stream);
/* free of a block malloc returned. */
void vp_allocator_release(vp_allocator *a, int32_t block);
/* torch.cuda.empty_cache(): the cached free segments back to the driver. */
void vp_allocator_empty_cache(vp_allocator *a);

/* Replays a step's event log (vp_ledger with `record`, evaluated without
 * folding): setup's parameters and buffers, the first step with the
 * optimizer's states made at its optimizer phase (PyTorch's optimizers make
 * them lazily), then the step again until the reservation stops growing
 * (at most `max_steps` steps in all). Frees are paired with their
 * allocation by the tensor they release where the log names it (every
 * tensor of the autograd simulation), else with the latest live block of
 * the same op and size. Returns false when the log cannot be replayed (a
 * folded segment, a free never allocated, out of memory). */
typedef struct {
    uint64_t peak_reserved;       /* after the last step replayed */
    uint64_t peak_allocated;
    uint64_t reserved_at_start;   /* when the first step begins: what the prelude and setup left reserved */
    uint64_t reserved_after[4];   /* the peak reservation after step 1, 2, ... */
    unsigned steps;
    uint64_t segments;
    unsigned paired_by_size;      /* frees paired by op and size (no tensor named) */
} vp_allocator_replay;

bool vp_allocator_replay_events(const vp_event *events, unsigned n_events, unsigned max_steps,
                                vp_allocator_replay *out);

/* The same after a prelude (`streams`: which ops allocate on which stream,
 * NULL: all on the default stream): the run before the steady state (loading,
 * quantizing, wrapping: engine/step/run_phases.c), replayed first, every
 * event of it in order and every one naming its tensor. A resident tensor
 * the prelude made (named as the setup event that makes it) is not made
 * again by setup; the prelude's other tensors are freed within it. */
bool vp_allocator_replay_run(const vp_event *prelude, unsigned n_prelude, const vp_event *events, unsigned n_events,
                             unsigned max_steps, const vp_stream_ops *streams, const vp_alloc_config *config,
                             vp_allocator_replay *out);

#endif
