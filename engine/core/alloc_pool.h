/* alloc_pool.h — one pool of the caching allocator's free blocks in
 * BlockComparatorSize order (stream, size, then address), kept as bins of
 * one (stream, size) each: a step's thousands of free blocks come in a few
 * dozen sizes, so a search looks through the bins' keys, held side by side;
 * within a bin the blocks are a heap by address. */
#ifndef VP_ALLOC_POOL_H
#define VP_ALLOC_POOL_H

#include <stdbool.h>
#include <stdint.h>

/* A block as the pool reads it: the allocator's (allocator.h). */
struct vp_alloc_block;

typedef struct {
    uint64_t size;
    uint8_t stream;
    int32_t *blocks;     /* its free blocks, a min-heap by address (segment, offset), owned */
    uint32_t n, cap;
} vp_alloc_bin;

typedef struct {
    int32_t *blocks;
    uint32_t cap;
} vp_alloc_bin_buffer;

typedef struct {
    vp_alloc_bin *bins;          /* by (stream, size), none empty, owned */
    uint32_t n_bins, cap_bins;
    vp_alloc_bin_buffer *spare;  /* the arrays of bins emptied, for the next bins, owned */
    uint32_t n_spare, cap_spare;
} vp_alloc_pool;

void vp_alloc_pool_free(vp_alloc_pool *pool);

/* Block `b` of `blocks` joins the pool (its `heap_at` set); false when out
 * of host memory. */
bool vp_alloc_pool_insert(vp_alloc_pool *pool, struct vp_alloc_block *blocks, int32_t b);
/* Block `b` leaves it; false when it is not there. */
bool vp_alloc_pool_remove(vp_alloc_pool *pool, struct vp_alloc_block *blocks, int32_t b);
/* The first free block of the pool's order not before (stream, size, the
 * lowest address): -1 when none; `after` gets the block that follows it in
 * that order, whatever its stream (-1: none). */
int32_t vp_alloc_pool_lower_bound(const vp_alloc_pool *pool, const struct vp_alloc_block *blocks, uint8_t stream,
                                  uint64_t size, int32_t *after);

#endif
