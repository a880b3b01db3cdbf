/* ledger.c — the timeline meter. Modelled on SQLite's memory statistics
 * (current and high-water mark per counter), with a place and a breakdown
 * captured at the high-water mark. */
#include "ledger.h"

#include <stdlib.h>
#include <string.h>

const char *const vp_category_names[VP_CAT_COUNT] = {
    "params", "buffers", "grads", "master", "optimizer", "activations", "transient", "comm", "workspace",
};

const char *const vp_phase_names[VP_PHASE_COUNT] = {
    "setup", "forward", "loss", "backward", "recompute", "optimizer",
};

enum { BLOCK_ROUND = 512 };
#define MIB (1024ull * 1024ull)
static const uint64_t small_size = 1 * MIB, small_segment = 2 * MIB, medium_limit = 10 * MIB,
                      medium_segment = 20 * MIB, large_round = 2 * MIB;

static uint64_t round_to(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

static vp_pool pool_of(uint64_t rounded) {
    return rounded <= small_size ? VP_POOL_SMALL : rounded < medium_limit ? VP_POOL_MEDIUM : VP_POOL_LARGE;
}

static uint64_t pool_bytes(uint64_t rounded) {
    return pool_of(rounded) == VP_POOL_LARGE ? round_to(rounded, large_round) : rounded;
}

uint64_t vp_segment_bytes(const uint64_t pools[VP_POOL_COUNT]) {
    return round_to(pools[VP_POOL_SMALL], small_segment) + round_to(pools[VP_POOL_MEDIUM], medium_segment) +
           pools[VP_POOL_LARGE];
}

uint64_t vp_round_block(uint64_t bytes) {
    if (bytes == 0) return 0;
    return (bytes + BLOCK_ROUND - 1) / BLOCK_ROUND * BLOCK_ROUND;
}

void vp_ledger_init(vp_ledger *ledger, bool record_events) {
    memset(ledger, 0, sizeof *ledger);
    ledger->place.layer = -1;
    ledger->raw.peak_place.layer = ledger->rounded.peak_place.layer = -1;
    ledger->record = record_events;
}

unsigned vp_stream_of(const vp_stream_ops *streams, const char *op) {
    if (!streams || !op) return 0;
    for (unsigned s = 0; s < VP_STREAMS - 1; s++)
        for (const char *const *name = streams->ops[s]; name && *name; name++)
            if (strcmp(*name, op) == 0) return s + 1;
    return 0;
}

void vp_ledger_set_streams(vp_ledger *ledger, const vp_stream_ops *streams) {
    ledger->streams = streams;
    for (unsigned s = 0; s < VP_STREAMS; s++) ledger->stream[s].peak_place.layer = -1;
    memset(ledger->stream_cache_op, 0, sizeof ledger->stream_cache_op);
}

/* vp_stream_of through the ledger's cache: the same few labels recur
 * every layer. */
static unsigned ledger_stream_of(vp_ledger *ledger, const char *op) {
    if (!op) return 0;
    uintptr_t a = (uintptr_t)op;
    unsigned slot = (unsigned)((a ^ (a >> 7) ^ (a >> 14)) & (VP_STREAM_CACHE - 1));
    if (ledger->stream_cache_op[slot] != op) {
        ledger->stream_cache_op[slot] = op;
        ledger->stream_cache[slot] = (uint8_t)vp_stream_of(ledger->streams, op);
    }
    return ledger->stream_cache[slot];
}

void vp_ledger_free(vp_ledger *ledger) {
    free(ledger->events);
    ledger->events = NULL;
    ledger->n_events = ledger->cap_events = 0;
}

static void note_peak(vp_meter *m, const vp_place *place) {
    if (m->total > m->peak) {
        m->peak = m->total;
        memcpy(m->peak_breakdown, m->current, sizeof m->current);
        memcpy(m->peak_pools, m->pools, sizeof m->pools);
        m->peak_place = *place;
    }
}

static void pools_change(vp_meter *m, uint64_t rounded, bool add) {
    vp_pool p = pool_of(rounded);
    uint64_t b = pool_bytes(rounded);
    m->pools[p] = add ? m->pools[p] + b : (m->pools[p] >= b ? m->pools[p] - b : 0);
}

static void meter_add(vp_ledger *ledger, vp_meter *m, vp_category c, uint64_t bytes) {
    if (__builtin_add_overflow(m->current[c], bytes, &m->current[c]) ||
        __builtin_add_overflow(m->total, bytes, &m->total) || m->total > (uint64_t)INT64_MAX)
        ledger->overflow = true;
}

static void meter_sub(vp_ledger *ledger, vp_meter *m, vp_category c, uint64_t bytes) {
    if (m->current[c] < bytes) { /* a release the ledger never saw allocated */
        ledger->overflow = true;
        return;
    }
    m->current[c] -= bytes;
    m->total -= bytes;
}

/* delta and raw_delta: the change in rounded and in exact bytes */
static void log_event(vp_ledger *ledger, vp_category c, int64_t delta, int64_t raw_delta, const char *op,
                      unsigned repeat, uint32_t tensor) {
    if (!ledger->record) return;
    if (ledger->n_events == ledger->cap_events) {
        unsigned cap = ledger->cap_events ? ledger->cap_events * 2 : 256;
        vp_event *grown = realloc(ledger->events, cap * sizeof *grown);
        if (!grown) { /* keep the result, lose the log */
            ledger->record = false;
            return;
        }
        ledger->events = grown;
        ledger->cap_events = cap;
    }
    vp_event *e = &ledger->events[ledger->n_events++];
    e->place = ledger->place;
    e->place.op = op;
    e->category = c;
    e->delta = delta;
    e->live = ledger->rounded.total;
    e->raw_delta = raw_delta;
    e->raw_live = ledger->raw.total;
    e->repeat = repeat;
    e->tensor = tensor;
}

/* A segment's own high-water mark: `live`'s total, breakdown and `pools`
 * when above it. Only the segment's peak fields are read (fold_meter), so
 * the live figures are copied at a new peak only, not at every event. */
static void note_segment_peak(vp_meter *seg, const vp_meter *live, const uint64_t *pools, const vp_place *place) {
    if (live->total > seg->peak) {
        seg->peak = live->total;
        memcpy(seg->peak_breakdown, live->current, sizeof live->current);
        memcpy(seg->peak_pools, pools, sizeof seg->peak_pools);
        seg->peak_place = *place;
    }
}

static void track_peaks(vp_ledger *ledger, const char *op) {
    vp_place place = ledger->place;
    place.op = op;
    note_peak(&ledger->raw, &place);
    note_peak(&ledger->rounded, &place);
    if (ledger->in_segment) {
        /* the raw meter's pools as the segment began (pools are counted on
         * the rounded meter only) */
        note_segment_peak(&ledger->seg_raw, &ledger->raw, ledger->seg_raw.pools, &place);
        note_segment_peak(&ledger->seg_rounded, &ledger->rounded, ledger->rounded.pools, &place);
    }
}

/* The op's stream's meter gains or loses `rounded` bytes in `pool` bytes
 * of `pool_kind` (a block's, or a list's counted as large blocks); its
 * peak as the rounded meter's. Without streams, nothing. */
static void stream_change(vp_ledger *ledger, const char *op, uint64_t rounded, vp_pool pool_kind, uint64_t pool,
                          bool add) {
    if (!ledger->streams) return;
    vp_meter *m = &ledger->stream[ledger_stream_of(ledger, op)];
    if (!add) {
        /* frees on a stream are of its own allocations (the labels pair) */
        m->total = m->total >= rounded ? m->total - rounded : 0;
        m->pools[pool_kind] = m->pools[pool_kind] >= pool ? m->pools[pool_kind] - pool : 0;
        return;
    }
    m->total += rounded;
    m->pools[pool_kind] += pool;
    vp_place place = ledger->place;
    place.op = op;
    note_peak(m, &place);
    if (ledger->in_segment) {
        vp_meter *seg = &ledger->seg_stream[m - ledger->stream];
        note_segment_peak(seg, m, m->pools, &place);
    }
}

static void stream_block(vp_ledger *ledger, const char *op, uint64_t rounded, bool add) {
    stream_change(ledger, op, rounded, pool_of(rounded), pool_bytes(rounded), add);
}

void vp_ledger_empty_cache(vp_ledger *ledger, const char *op) {
    log_event(ledger, VP_CAT_TRANSIENT, 0, 0, op, 1, VP_EVENT_EMPTY_CACHE);
}

void vp_ledger_alloc(vp_ledger *ledger, vp_category c, uint64_t bytes, const char *op) {
    vp_ledger_alloc_tensor(ledger, c, bytes, op, 0);
}

void vp_ledger_release(vp_ledger *ledger, vp_category c, uint64_t bytes, const char *op) {
    vp_ledger_release_tensor(ledger, c, bytes, op, 0);
}

void vp_ledger_alloc_tensor(vp_ledger *ledger, vp_category c, uint64_t bytes, const char *op, uint32_t tensor) {
    if (bytes == 0) return;
    meter_add(ledger, &ledger->raw, c, bytes);
    meter_add(ledger, &ledger->rounded, c, vp_round_block(bytes));
    pools_change(&ledger->rounded, vp_round_block(bytes), true);
    stream_block(ledger, op, vp_round_block(bytes), true);
    track_peaks(ledger, op);
    log_event(ledger, c, (int64_t)vp_round_block(bytes), (int64_t)bytes, op, 1, tensor);
}

void vp_ledger_release_tensor(vp_ledger *ledger, vp_category c, uint64_t bytes, const char *op, uint32_t tensor) {
    if (bytes == 0) return;
    meter_sub(ledger, &ledger->raw, c, bytes);
    meter_sub(ledger, &ledger->rounded, c, vp_round_block(bytes));
    pools_change(&ledger->rounded, vp_round_block(bytes), false);
    stream_block(ledger, op, vp_round_block(bytes), false);
    log_event(ledger, c, -(int64_t)vp_round_block(bytes), -(int64_t)bytes, op, 1, tensor);
}

void vp_ledger_alloc_many(vp_ledger *ledger, vp_category c, uint64_t raw, uint64_t rounded, const char *op) {
    if (raw == 0) return;
    meter_add(ledger, &ledger->raw, c, raw);
    meter_add(ledger, &ledger->rounded, c, rounded);
    ledger->rounded.pools[VP_POOL_LARGE] += round_to(rounded, large_round); /* a list: counted as large blocks */
    stream_change(ledger, op, rounded, VP_POOL_LARGE, round_to(rounded, large_round), true);
    track_peaks(ledger, op);
    log_event(ledger, c, (int64_t)rounded, (int64_t)raw, op, 1, 0);
}

void vp_ledger_release_many(vp_ledger *ledger, vp_category c, uint64_t raw, uint64_t rounded, const char *op) {
    if (raw == 0) return;
    meter_sub(ledger, &ledger->raw, c, raw);
    meter_sub(ledger, &ledger->rounded, c, rounded);
    ledger->rounded.pools[VP_POOL_LARGE] -= round_to(rounded, large_round);
    stream_change(ledger, op, rounded, VP_POOL_LARGE, round_to(rounded, large_round), false);
    log_event(ledger, c, -(int64_t)rounded, -(int64_t)raw, op, 1, 0);
}

void vp_ledger_move(vp_ledger *ledger, vp_category from, vp_category to, uint64_t bytes) {
    if (bytes == 0 || from == to) return;
    /* on the timeline as a release and an allocation (each event's live is
     * the total after it), so that the events' categories add up to the
     * breakdown; the dip between them is no peak to track */
    meter_sub(ledger, &ledger->raw, from, bytes);
    meter_sub(ledger, &ledger->rounded, from, vp_round_block(bytes));
    log_event(ledger, from, -(int64_t)vp_round_block(bytes), -(int64_t)bytes, "AccumulateGrad", 1, VP_EVENT_MOVE);
    meter_add(ledger, &ledger->raw, to, bytes);
    meter_add(ledger, &ledger->rounded, to, vp_round_block(bytes));
    log_event(ledger, to, (int64_t)vp_round_block(bytes), (int64_t)bytes, "AccumulateGrad", 1, VP_EVENT_MOVE);
}

void vp_ledger_begin_segment(vp_ledger *ledger) {
    if (ledger->in_segment) ledger->overflow = true; /* segments do not nest: a caller bug */
    ledger->in_segment = true;
    ledger->seg_start_raw = ledger->raw;
    ledger->seg_start_rounded = ledger->rounded;
    /* the segment's own high-water mark starts at the live total */
    ledger->seg_raw = ledger->raw;
    ledger->seg_raw.peak = ledger->raw.total;
    memcpy(ledger->seg_raw.peak_breakdown, ledger->raw.current, sizeof ledger->raw.current);
    ledger->seg_raw.peak_place = ledger->place;
    ledger->seg_rounded = ledger->rounded;
    ledger->seg_rounded.peak = ledger->rounded.total;
    memcpy(ledger->seg_rounded.peak_breakdown, ledger->rounded.current, sizeof ledger->rounded.current);
    memcpy(ledger->seg_rounded.peak_pools, ledger->rounded.pools, sizeof ledger->rounded.pools);
    ledger->seg_rounded.peak_place = ledger->place;
    for (unsigned s = 0; ledger->streams && s < VP_STREAMS; s++) {
        const vp_meter *m = &ledger->stream[s];
        ledger->seg_start_stream[s] = *m;
        ledger->seg_stream[s] = *m;
        ledger->seg_stream[s].peak = m->total;
        memcpy(ledger->seg_stream[s].peak_pools, m->pools, sizeof m->pools);
        ledger->seg_stream[s].peak_place = ledger->place;
    }
}

/* x + k * d for a signed per-repetition delta d; false on overflow (totals
 * are kept below 2^63: no device holds 8 EiB, and the deltas stay signed). */
static bool add_scaled(uint64_t x, int64_t d, uint64_t k, uint64_t *out) {
    int64_t product;
    if (k > (uint64_t)INT64_MAX || __builtin_mul_overflow(d, (int64_t)k, &product)) return false;
    if (product >= 0) return !__builtin_add_overflow(x, (uint64_t)product, out) && *out <= (uint64_t)INT64_MAX;
    uint64_t down = (uint64_t)(-(product + 1)) + 1; /* |product| without overflowing at INT64_MIN */
    if (down > x) return false;
    *out = x - down;
    return true;
}

/* Apply `extra` more repetitions of the segment to one meter. */
static void fold_meter(vp_ledger *ledger, vp_meter *m, const vp_meter *start, const vp_meter *seg,
                       uint64_t extra, int layer_step) {
    int64_t delta[VP_CAT_COUNT], pool_delta[VP_POOL_COUNT];
    int64_t delta_total = (int64_t)(m->total - start->total);
    for (int c = 0; c < VP_CAT_COUNT; c++) delta[c] = (int64_t)(m->current[c] - start->current[c]);
    for (int p = 0; p < VP_POOL_COUNT; p++) pool_delta[p] = (int64_t)(m->pools[p] - start->pools[p]);
    vp_meter next = *m;
    bool ok = true;

    if (delta_total > 0) {
        /* the last repetition peaks highest: extra * delta above the first's */
        uint64_t last_peak;
        ok = add_scaled(seg->peak, delta_total, extra, &last_peak);
        if (ok && last_peak > m->peak) {
            next.peak = last_peak;
            for (int c = 0; c < VP_CAT_COUNT && ok; c++)
                ok = add_scaled(seg->peak_breakdown[c], delta[c], extra, &next.peak_breakdown[c]);
            for (int p = 0; p < VP_POOL_COUNT && ok; p++)
                ok = add_scaled(seg->peak_pools[p], pool_delta[p], extra, &next.peak_pools[p]);
            next.peak_place = seg->peak_place;
            if (next.peak_place.layer >= 0) next.peak_place.layer += layer_step * (int)extra;
        }
    }
    for (int c = 0; c < VP_CAT_COUNT && ok; c++) ok = add_scaled(m->current[c], delta[c], extra, &next.current[c]);
    for (int p = 0; p < VP_POOL_COUNT && ok; p++) ok = add_scaled(m->pools[p], pool_delta[p], extra, &next.pools[p]);
    if (ok) ok = add_scaled(m->total, delta_total, extra, &next.total);
    if (!ok) {
        ledger->overflow = true; /* the result is meaningless; the meter stays as it was */
        return;
    }
    *m = next;
}

void vp_ledger_repeat_segment(vp_ledger *ledger, unsigned times, int layer_step) {
    ledger->in_segment = false;
    if (times <= 1) return;
    uint64_t extra = times - 1;
    int64_t delta = (int64_t)(ledger->rounded.total - ledger->seg_start_rounded.total);
    int64_t raw_delta = (int64_t)(ledger->raw.total - ledger->seg_start_raw.total);
    fold_meter(ledger, &ledger->raw, &ledger->seg_start_raw, &ledger->seg_raw, extra, layer_step);
    fold_meter(ledger, &ledger->rounded, &ledger->seg_start_rounded, &ledger->seg_rounded, extra, layer_step);
    for (unsigned s = 0; ledger->streams && s < VP_STREAMS; s++)
        fold_meter(ledger, &ledger->stream[s], &ledger->seg_start_stream[s], &ledger->seg_stream[s], extra,
                   layer_step);
    if (ledger->place.layer >= 0) ledger->place.layer += layer_step * (int)extra;
    if (ledger->record && ledger->n_events) {
        /* the log keeps one repetition, marked with how often it recurs */
        log_event(ledger, VP_CAT_COUNT, delta * (int64_t)extra, raw_delta * (int64_t)extra, "(repeated)", times - 1, 0);
    }
}
