/* alloc_pool.c — a pool of free blocks binned by (stream, size); within a
 * bin, a heap by address. The order is BlockComparatorSize's
 * (c10/cuda/CUDACachingAllocator.cpp): stream, size, then address. */
#include "alloc_pool.h"

#include <stdlib.h>
#include <string.h>

#include "allocator.h"

void vp_alloc_pool_free(vp_alloc_pool *pool) {
    for (uint32_t i = 0; i < pool->n_bins; i++) free(pool->bins[i].blocks);
    for (uint32_t i = 0; i < pool->n_spare; i++) free(pool->spare[i].blocks);
    free(pool->bins);
    free(pool->spare);
    memset(pool, 0, sizeof *pool);
}

static bool bin_before(const vp_alloc_bin *bin, uint8_t stream, uint64_t size) {
    return bin->stream != stream ? bin->stream < stream : bin->size < size;
}

/* The first bin not before (stream, size). */
static uint32_t bin_lower_bound(const vp_alloc_pool *pool, uint8_t stream, uint64_t size) {
    uint32_t lo = 0, hi = pool->n_bins;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (bin_before(&pool->bins[mid], stream, size)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool address_before(const vp_alloc_block *x, const vp_alloc_block *y) {
    return x->segment != y->segment ? x->segment < y->segment : x->offset < y->offset;
}

/* A bin's blocks are a binary min-heap by address (each block knows its
 * place, `heap_at`): the lowest address, which a best fit takes, is at the
 * root, and a block joins or leaves in log2(n) steps, however many blocks
 * of one size a step leaves free (tens of thousands for a mixture's
 * experts). */
static void heap_place(vp_alloc_bin *bin, vp_alloc_block *blocks, uint32_t at, int32_t b) {
    bin->blocks[at] = b;
    blocks[b].heap_at = at;
}

static void sift_up(vp_alloc_bin *bin, vp_alloc_block *blocks, uint32_t at) {
    int32_t b = bin->blocks[at];
    while (at > 0) {
        uint32_t parent = (at - 1) / 2;
        if (!address_before(&blocks[b], &blocks[bin->blocks[parent]])) break;
        heap_place(bin, blocks, at, bin->blocks[parent]);
        at = parent;
    }
    heap_place(bin, blocks, at, b);
}

static void sift_down(vp_alloc_bin *bin, vp_alloc_block *blocks, uint32_t at) {
    int32_t b = bin->blocks[at];
    for (;;) {
        uint32_t child = 2 * at + 1;
        if (child >= bin->n) break;
        if (child + 1 < bin->n && address_before(&blocks[bin->blocks[child + 1]], &blocks[bin->blocks[child]])) child++;
        if (!address_before(&blocks[bin->blocks[child]], &blocks[b])) break;
        heap_place(bin, blocks, at, bin->blocks[child]);
        at = child;
    }
    heap_place(bin, blocks, at, b);
}

/* A new empty bin at position `at`, its array an emptied bin's if one is kept. */
static vp_alloc_bin *open_bin(vp_alloc_pool *pool, uint32_t at, uint8_t stream, uint64_t size) {
    if (pool->n_bins == pool->cap_bins) {
        uint32_t cap = pool->cap_bins ? pool->cap_bins * 2 : 16;
        vp_alloc_bin *grown = realloc(pool->bins, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        pool->bins = grown;
        pool->cap_bins = cap;
    }
    memmove(&pool->bins[at + 1], &pool->bins[at], (size_t)(pool->n_bins - at) * sizeof *pool->bins);
    pool->n_bins++;
    vp_alloc_bin_buffer buffer = pool->n_spare ? pool->spare[--pool->n_spare] : (vp_alloc_bin_buffer){NULL, 0};
    pool->bins[at] = (vp_alloc_bin){size, stream, buffer.blocks, 0, buffer.cap};
    return &pool->bins[at];
}

/* Bin `at` is empty: it goes, its array kept for the next bin (freed when
 * there is no room to keep it). */
static void close_bin(vp_alloc_pool *pool, uint32_t at) {
    vp_alloc_bin_buffer buffer = {pool->bins[at].blocks, pool->bins[at].cap};
    memmove(&pool->bins[at], &pool->bins[at + 1], (size_t)(pool->n_bins - at - 1) * sizeof *pool->bins);
    pool->n_bins--;
    if (pool->n_spare == pool->cap_spare) {
        uint32_t cap = pool->cap_spare ? pool->cap_spare * 2 : 16;
        vp_alloc_bin_buffer *grown = realloc(pool->spare, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(buffer.blocks);
            return;
        }
        pool->spare = grown;
        pool->cap_spare = cap;
    }
    pool->spare[pool->n_spare++] = buffer;
}

bool vp_alloc_pool_insert(vp_alloc_pool *pool, vp_alloc_block *blocks, int32_t b) {
    const vp_alloc_block *block = &blocks[b];
    uint32_t at = bin_lower_bound(pool, block->stream, block->size);
    vp_alloc_bin *bin = at < pool->n_bins ? &pool->bins[at] : NULL;
    if (!bin || bin->stream != block->stream || bin->size != block->size) {
        bin = open_bin(pool, at, block->stream, block->size);
        if (!bin) return false;
    }
    if (bin->n == bin->cap) {
        uint32_t cap = bin->cap ? bin->cap * 2 : 8;
        int32_t *grown = realloc(bin->blocks, (size_t)cap * sizeof *grown);
        if (!grown) {
            if (bin->n == 0) close_bin(pool, at);
            return false;
        }
        bin->blocks = grown;
        bin->cap = cap;
    }
    bin->blocks[bin->n++] = b;
    sift_up(bin, blocks, bin->n - 1);
    return true;
}

bool vp_alloc_pool_remove(vp_alloc_pool *pool, vp_alloc_block *blocks, int32_t b) {
    const vp_alloc_block *block = &blocks[b];
    uint32_t at = bin_lower_bound(pool, block->stream, block->size);
    if (at >= pool->n_bins) return false;
    vp_alloc_bin *bin = &pool->bins[at];
    if (bin->stream != block->stream || bin->size != block->size) return false;
    uint32_t at_heap = block->heap_at;
    if (at_heap >= bin->n || bin->blocks[at_heap] != b) return false;
    int32_t last = bin->blocks[--bin->n];
    if (at_heap < bin->n) { /* the last block takes its place, then moves up or down */
        heap_place(bin, blocks, at_heap, last);
        sift_down(bin, blocks, at_heap);
        sift_up(bin, blocks, blocks[last].heap_at);
    }
    if (bin->n == 0) close_bin(pool, at);
    return true;
}

int32_t vp_alloc_pool_lower_bound(const vp_alloc_pool *pool, const vp_alloc_block *blocks, uint8_t stream,
                                  uint64_t size, int32_t *after) {
    uint32_t at = bin_lower_bound(pool, stream, size);
    *after = -1;
    if (at >= pool->n_bins) return -1;
    const vp_alloc_bin *bin = &pool->bins[at];
    /* the next address of the bin is one of the root's children */
    if (bin->n > 2)
        *after = address_before(&blocks[bin->blocks[2]], &blocks[bin->blocks[1]]) ? bin->blocks[2] : bin->blocks[1];
    else if (bin->n == 2) *after = bin->blocks[1];
    else if (at + 1 < pool->n_bins) *after = pool->bins[at + 1].blocks[0];
    return bin->blocks[0];
}
