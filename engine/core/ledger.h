/* ledger.h — live bytes over a step's timeline: current, peak with its place
 * and breakdown, per category; and the folding of repeated segments. */
#ifndef VP_LEDGER_H
#define VP_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    VP_CAT_PARAMS,
    VP_CAT_BUFFERS,
    VP_CAT_GRADS,
    VP_CAT_MASTER,
    VP_CAT_OPTIMIZER,
    VP_CAT_ACTIVATIONS,
    VP_CAT_TRANSIENT,
    VP_CAT_COMM,          /* communication buffers: DDP buckets, ZeRO's reduce buckets */
    VP_CAT_WORKSPACE,     /* libraries' workspaces held through the caching allocator: cuBLAS's */
    VP_CAT_COUNT
} vp_category;

extern const char *const vp_category_names[VP_CAT_COUNT];

typedef enum {
    VP_PHASE_SETUP,
    VP_PHASE_FORWARD,
    VP_PHASE_LOSS,
    VP_PHASE_BACKWARD,
    VP_PHASE_RECOMPUTE,
    VP_PHASE_OPTIMIZER,
    VP_PHASE_COUNT
} vp_phase;

extern const char *const vp_phase_names[VP_PHASE_COUNT];

typedef struct {
    vp_phase phase;
    int layer;         /* -1 outside the repeated layers */
    const char *op;    /* static label of the op that allocated */
} vp_place;

/* One view of the live bytes: either as PyTorch asks for them (raw tensor
 * bytes, what a CPU allocator sees) or as the CUDA caching allocator hands
 * them out (every block rounded up to 512 bytes). */
/* The CUDA caching allocator's pools (c10/cuda/CUDACachingAllocator.cpp):
 * blocks up to 1 MiB share 2 MiB segments (kSmallBuffer), blocks under
 * 10 MiB share 20 MiB segments (kLargeBuffer), larger ones get a segment of
 * their own rounded up to 2 MiB (kRoundLarge). */
typedef enum { VP_POOL_SMALL, VP_POOL_MEDIUM, VP_POOL_LARGE, VP_POOL_COUNT } vp_pool;

typedef struct {
    uint64_t current[VP_CAT_COUNT];
    uint64_t total;
    uint64_t peak;
    uint64_t peak_breakdown[VP_CAT_COUNT];
    vp_place peak_place;
    uint64_t pools[VP_POOL_COUNT];      /* live bytes per pool (large: segment-rounded) */
    uint64_t peak_pools[VP_POOL_COUNT]; /* ... at the peak */
} vp_meter;

/* An event, kept only when the caller asks for the timeline. */
typedef struct {
    vp_place place;
    vp_category category;
    int64_t delta;       /* rounded bytes, signed */
    uint64_t live;       /* rounded live total after the event */
    int64_t raw_delta;   /* the same in exact tensor bytes */
    uint64_t raw_live;
    unsigned repeat;     /* >1 when this event stands for a folded segment */
    uint32_t tensor;     /* the tensor allocated or released (the sim's handle), 0: not named;
                            VP_EVENT_MOVE: a move between categories, no allocator call;
                            VP_EVENT_EMPTY_CACHE (a prelude's): the cached blocks released */
} vp_event;

#define VP_EVENT_MOVE UINT32_MAX
/* A run prelude's torch.cuda.empty_cache(): no tensor, no bytes */
#define VP_EVENT_EMPTY_CACHE (UINT32_MAX - 1)

/* The CUDA streams a step allocates on: the default stream, up to two of
 * a framework's own (FSDP's all-gather and reduce-scatter streams) and
 * OffloadActivations' copy stream (sim.h, vp_offload_stream_ops).
 * c10/cuda/CUDACachingAllocator.cpp (pytorch 001074d2, its header comment):
 * "Allocations are associated with a stream. Once freed, blocks can be
 * re-allocated on the same stream, but not on any other stream"; a block
 * used on another stream (record_stream) still goes back to its own
 * stream's pool when freed (free_block: block->pool, after the recorded
 * streams' events). */
#define VP_STREAMS 4u
#define VP_STREAM_CACHE 128u

/* The ops whose allocations and frees are made on a stream of their own
 * (NULL-terminated labels: stream 1's, 2's and 3's); every other op's on
 * the default stream (0). */
typedef struct {
    const char *const *ops[VP_STREAMS - 1];
} vp_stream_ops;

/* The stream `op` allocates on under `streams` (NULL: 0 always). */
unsigned vp_stream_of(const vp_stream_ops *streams, const char *op);

typedef struct {
    vp_meter raw, rounded;
    /* with streams: the rounded live bytes on each stream (total, pools and
     * peak with its pools; no breakdown), kept only when `streams` is set */
    const vp_stream_ops *streams;
    /* each op's stream by its label's address (labels are static and
     * compared by address elsewhere too: allocator.c), direct-mapped; a step
     * has a few hundred labels, and a miss walks every stream's list */
    const char *stream_cache_op[VP_STREAM_CACHE];
    uint8_t stream_cache[VP_STREAM_CACHE];
    vp_meter stream[VP_STREAMS], seg_start_stream[VP_STREAMS], seg_stream[VP_STREAMS];
    vp_place place;      /* where the timeline is now */
    bool overflow;       /* a total left 64 bits: the result is meaningless */
    /* folding: the state when the current segment began */
    bool in_segment;
    vp_meter seg_start_raw, seg_start_rounded;
    vp_meter seg_raw, seg_rounded; /* peaks reached inside the segment */
    /* optional event log, owned by the ledger */
    vp_event *events;
    unsigned n_events, cap_events;
    bool record;
} vp_ledger;

void vp_ledger_init(vp_ledger *ledger, bool record_events);
void vp_ledger_free(vp_ledger *ledger);
/* Keep each stream's meter as well (before the first allocation). */
void vp_ledger_set_streams(vp_ledger *ledger, const vp_stream_ops *streams);

void vp_ledger_alloc(vp_ledger *ledger, vp_category category, uint64_t bytes, const char *op);
/* A torch.cuda.empty_cache() in the step (op: who calls it), for the
 * allocator's replay: logged where events are kept, no bytes. */
void vp_ledger_empty_cache(vp_ledger *ledger, const char *op);
void vp_ledger_release(vp_ledger *ledger, vp_category category, uint64_t bytes, const char *op);
/* The same naming the tensor (the autograd simulation's handle, not 0), so
 * that a replay of the log pairs each free with its allocation. */
void vp_ledger_alloc_tensor(vp_ledger *ledger, vp_category category, uint64_t bytes, const char *op, uint32_t tensor);
void vp_ledger_release_tensor(vp_ledger *ledger, vp_category category, uint64_t bytes, const char *op,
                              uint32_t tensor);
/* The same for many tensors at once, whose 512-byte rounding the caller has
 * summed tensor by tensor. */
void vp_ledger_alloc_many(vp_ledger *ledger, vp_category category, uint64_t raw, uint64_t rounded, const char *op);
void vp_ledger_release_many(vp_ledger *ledger, vp_category category, uint64_t raw, uint64_t rounded, const char *op);
/* Move live bytes from one category to another (a gradient that becomes a
 * parameter's .grad keeps its storage); the timeline logs it as a release
 * and an allocation under the op "AccumulateGrad". */
void vp_ledger_move(vp_ledger *ledger, vp_category from, vp_category to, uint64_t bytes);

/* Everything between begin and repeat happened `times` times in a row, each
 * time starting where the last ended; the layer index advances by `layer_step`
 * per repetition. The peak of n repetitions is the first repetition's peak if
 * a repetition does not grow the live total, else the last one's. */
void vp_ledger_begin_segment(vp_ledger *ledger);
void vp_ledger_repeat_segment(vp_ledger *ledger, unsigned times, int layer_step);

/* The rounding of the CUDA caching allocator: every block is a multiple of
 * 512 bytes (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize = 512). */
uint64_t vp_round_block(uint64_t bytes);

/* The segment bytes the allocator must hold for the pools captured at a
 * peak: each pool rounded to its segment size. */
uint64_t vp_segment_bytes(const uint64_t pools[VP_POOL_COUNT]);

#endif
