/* pp_split_backward.c — each rank's order of actions under
 * torch.distributed.pipelining's zero-bubble schedules, walked to find what
 * the rank holds at its peak.
 *
 * The orders are torch's generators (torch/distributed/pipelining/
 * schedules.py, main of 2025-2026: _get_1f1b_rank_ops with
 * enable_zero_bubble, ScheduleZBVZeroBubble._calculate_single_rank_operations,
 * ScheduleDualPipeV._calculate_single_rank_operations), written out below.
 * Their actions: F (a chunk's forward), B (its full backward), I (its
 * input half, BACKWARD_INPUT) and W (its weight half, BACKWARD_WEIGHT).
 * What each holds (torch/distributed/pipelining/_backward.py, stage.py):
 *  - F keeps the micro-batch's activations; B frees them.
 *  - I is stage_backward_input: torch.autograd.grad to the stage's inputs
 *    with retain_graph=True, so no saved tensor is freed; the graph stays
 *    alive through the param groups' intermediate nodes (the first node
 *    where each weight meets the inputs' path: a linear's mm, a norm's
 *    weight mul), whose pre-hooks keep the gradient flowing into them.
 *    W (stage_backward_weight) runs those nodes again without retain_graph
 *    and drops them: the activations and those gradients go then.
 *  - Stage 0's inputs (token ids) need no gradient: its I does nothing
 *    ("Skip the backward for the first stage") and its W is the full
 *    backward (_PipelineStageBase.backward_weight_one_chunk).
 *  - An overlapped F&B (DualPipeV's OVERLAP_F_B) runs its forward, then its
 *    backward (_PipelineScheduleRuntime: "for sub_a in action.sub_actions:
 *    _perform_action(sub_a)").
 * A chunk's bytes are its layers' share of the rank's (torchtitan's chunks
 * are uneven), the head and the loss going to the last stage's chunk; the
 * peak is the largest sum of held activations and held weight-pass
 * gradients at a forward's end, an I's end (its own gradients kept), or
 * the start of a B or a W. */
#include "pp_split_backward.h"

#include <stdbool.h>

unsigned vp_pp_stage_of(const vp_recipe *r, unsigned rank, unsigned chunk) {
    unsigned pp = r->pp ? r->pp : 1;
    if (vp_pp_v_shape(r)) return chunk ? 2 * pp - 1 - rank : rank;
    return rank + chunk * pp;
}

/* DualPipeV's FIFO of inputs halves awaiting their weight halves
 * ("weight_queue"): at most 2 pp + 1 wait at once (steps 6-7). */
enum { QUEUE = 4 * VP_MAX_STAGES };

typedef struct {
    const vp_recipe *r;
    unsigned rank;
    double a[VP_MAX_STAGES], g[VP_MAX_STAGES]; /* a micro-batch's bytes per chunk: activations, weight pass */
    double held, pending;     /* bytes held now */
    double best, best_held, best_pending;
    unsigned char queue[QUEUE];
    unsigned head, tail;
} walk;

static void consider(walk *w, double held, double pending) {
    if (held + pending > w->best) {
        w->best = held + pending;
        w->best_held = held;
        w->best_pending = pending;
    }
}

static void forward(walk *w, unsigned c) {
    w->held += w->a[c];
    consider(w, w->held, w->pending);
}

static void full_backward(walk *w, unsigned c) {
    consider(w, w->held, w->pending);
    w->held -= w->a[c];
}

/* (stage 0's does nothing, and its g is 0) */
static void input_half(walk *w, unsigned c) {
    w->pending += w->g[c];
    consider(w, w->held, w->pending);
}

static void weight_half(walk *w, unsigned c) {
    consider(w, w->held, w->pending);
    w->pending -= w->g[c];
    w->held -= w->a[c];
}

/* ScheduleInterleavedZeroBubble (ZB1P over v looped chunks):
 * rounds = max(1, m // pp), per_round = m // rounds; warm-up
 * (v - 1) per_round + (pp - 1 - i) forwards (_get_warmup_ops with
 * multiply_factor 1; at most m v); then a forward and an I a step, the
 * oldest I's W after each from the i-th step on; then the remaining I's,
 * each followed by a W, then the remaining W's. Forward k runs chunk
 * (k // per_round) % v, backward k chunk v - 1 - ((k - warmup) //
 * per_round) % v. */
/* The chunk of backward k, warm-up `warmup` (backward_stage_index). */
static unsigned backward_chunk(unsigned k, unsigned warmup, unsigned per_round, unsigned v) {
    return v - 1 - ((k - warmup) / per_round) % v;
}

static void walk_interleaved(walk *w) {
    const vp_recipe *r = w->r;
    unsigned m = vp_recipe_microbatches(r), pp = r->pp ? r->pp : 1, v = vp_pp_chunks(r), i = w->rank;
    if (!m) m = 1;
    unsigned rounds = m / pp > 1 ? m / pp : 1, per_round = m / rounds, ops = m * v;
    unsigned warmup = (v - 1) * per_round + (pp - 1 - i);
    if (warmup > ops) warmup = ops;
    unsigned weights = 0;
    for (unsigned k = 0; k < ops + warmup; k++) {
        if (k < ops) forward(w, (k / per_round) % v);
        if (k < warmup) continue;
        input_half(w, backward_chunk(k, warmup, per_round, v));
        if (k - warmup >= i) {
            weight_half(w, backward_chunk(warmup + weights, warmup, per_round, v));
            weights++;
        }
    }
    for (; weights < ops; weights++) weight_half(w, backward_chunk(warmup + weights, warmup, per_round, v));
}

/* ScheduleZBVZeroBubble: rank i runs chunk 0 (stage i) and chunk 1
 * (stage 2 pp - 1 - i) over n = max(2 pp - 1, m) micro-batches, actions
 * of micro-batches m and later dropped. Warm-up 2 (pp - i) - 1 F0's, i
 * pairs F1 F0, pp - i of F1 I1 W1; steady F0 (while any are left) I0 W0 F1
 * I1 W1 until every F1 has run; cool-down i pairs I0 I1, pp - i pairs
 * I0 W0, then the W1's left, then the W0's left. */
typedef struct {
    unsigned f[2], b[2], wt[2], m;
} zbv_counts;

static void zbv_f(walk *w, zbv_counts *n, unsigned c) {
    if (n->f[c]++ < n->m) forward(w, c);
}
static void zbv_i(walk *w, zbv_counts *n, unsigned c) {
    if (n->b[c]++ < n->m) input_half(w, c);
}
static void zbv_w(walk *w, zbv_counts *n, unsigned c) {
    if (n->wt[c]++ < n->m) weight_half(w, c);
}

static void walk_zbv(walk *w) {
    unsigned m = vp_recipe_microbatches(w->r), pp = w->r->pp ? w->r->pp : 1, i = w->rank;
    if (!m) m = 1;
    unsigned n = 2 * pp - 1 > m ? 2 * pp - 1 : m;
    zbv_counts c = {.m = m};
    for (unsigned k = 0; k < 2 * (pp - i) - 1; k++) zbv_f(w, &c, 0);
    for (unsigned k = 0; k < i; k++) {
        zbv_f(w, &c, 1);
        zbv_f(w, &c, 0);
    }
    for (unsigned k = 0; k < pp - i; k++) {
        zbv_f(w, &c, 1);
        zbv_i(w, &c, 1);
        zbv_w(w, &c, 1);
    }
    while (c.f[1] < c.f[0] || c.f[0] < n) {
        if (c.f[0] < n) zbv_f(w, &c, 0);
        zbv_i(w, &c, 0);
        zbv_w(w, &c, 0);
        zbv_f(w, &c, 1);
        zbv_i(w, &c, 1);
        zbv_w(w, &c, 1);
    }
    for (unsigned k = 0; k < i; k++) {
        zbv_i(w, &c, 0);
        zbv_i(w, &c, 1);
    }
    for (unsigned k = 0; k < pp - i; k++) {
        zbv_i(w, &c, 0);
        zbv_w(w, &c, 0);
    }
    while (c.wt[1] < c.b[1]) zbv_w(w, &c, 1);
    while (c.wt[0] < c.b[0]) zbv_w(w, &c, 0);
}

/* ScheduleDualPipeV (DeepSeek's DualPipe folded into a V): an I queues
 * its W, a W runs the oldest queued one. */
static void dual_i(walk *w, unsigned c) {
    input_half(w, c);
    w->queue[w->tail++ % QUEUE] = (unsigned char)c;
}
static void dual_w(walk *w) {
    if (w->head != w->tail) weight_half(w, w->queue[w->head++ % QUEUE]);
}
static void dual_b(walk *w, unsigned c, bool split) {
    if (split) dual_i(w, c);
    else full_backward(w, c);
}

/* Steps: 1. 2 (pp - i - 1) F0's; 2. i + 1 pairs F0 F1; 3. pp - i - 1 of
 * I1 W F1; 4. m - 2 pp + i + 1 of F0&B1 F1&B0 (the last rank's first F0
 * and B1 apart); 5. pp - i - 1 of B1 F1&B0; 6. i + 1 pairs B1 B0, split
 * into I's from the middle pair on (from its B1 on odd ranks, its B0 on
 * even ones); 7. pp - i - 1 of W B0 (split as step 6 left it); 8. i + 1
 * W's. m >= 2 pp (vp_pipeline_problem). */
static void walk_dualpipev(walk *w) {
    unsigned m = vp_recipe_microbatches(w->r), pp = w->r->pp ? w->r->pp : 1, i = w->rank;
    for (unsigned k = 0; k < 2 * (pp - i - 1); k++) forward(w, 0);
    for (unsigned k = 0; k < i + 1; k++) {
        forward(w, 0);
        forward(w, 1);
    }
    for (unsigned k = 0; k < pp - i - 1; k++) {
        dual_i(w, 1);
        dual_w(w);
        forward(w, 1);
    }
    for (unsigned k = 0; k + 2 * pp < m + i + 1; k++) {
        forward(w, 0);
        full_backward(w, 1);
        forward(w, 1);
        full_backward(w, 0);
    }
    for (unsigned k = 0; k < pp - i - 1; k++) {
        full_backward(w, 1);
        forward(w, 1);
        full_backward(w, 0);
    }
    bool split = false;
    for (unsigned k = 0; k < i + 1; k++) {
        if (k == (i + 1) / 2 && i % 2 == 1) split = true;
        dual_b(w, 1, split);
        if (k == (i + 1) / 2 && i % 2 == 0) split = true;
        dual_b(w, 0, split);
    }
    for (unsigned k = 0; k < pp - i - 1; k++) {
        dual_w(w);
        dual_b(w, 0, split);
    }
    for (unsigned k = 0; k < i + 1; k++) dual_w(w);
}

/* Each chunk's share of the rank's micro-batch: its layers' of the
 * layers' bytes, and the head and the loss to the chunk of the last stage;
 * no weight pass for stage 0's chunk. */
static bool shares(walk *w, const unsigned *sizes, const vp_pp_bytes *b) {
    const vp_recipe *r = w->r;
    unsigned chunks = vp_pp_chunks(r), last = (r->pp ? r->pp : 1) * chunks - 1;
    double layers = 0;
    for (unsigned c = 0; c < chunks; c++) layers += sizes[vp_pp_stage_of(r, w->rank, c)];
    if (layers <= 0 || b->activations == 0) return false;
    double head_a = b->head_activations < b->activations ? (double)b->head_activations : 0;
    double head_g = b->head_weight_pass < b->weight_pass ? (double)b->head_weight_pass : 0;
    double per_a = ((double)b->activations - head_a) / layers, per_g = ((double)b->weight_pass - head_g) / layers;
    for (unsigned c = 0; c < chunks; c++) {
        unsigned stage = vp_pp_stage_of(r, w->rank, c);
        w->a[c] = per_a * sizes[stage] + (stage == last ? head_a : 0);
        w->g[c] = stage == 0 ? 0 : per_g * sizes[stage] + (stage == last ? head_g : 0);
    }
    return true;
}

vp_pp_held vp_pp_split_held(const vp_recipe *r, const unsigned *sizes, unsigned rank, const vp_pp_bytes *bytes) {
    vp_pp_held out = {1, 0};
    walk w = {.r = r, .rank = rank, .best = -1};
    if (!shares(&w, sizes, bytes)) return out;
    switch (r->pp_schedule) {
    case VP_PP_TORCH_ZBV: walk_zbv(&w); break;
    case VP_PP_TORCH_DUALPIPEV: walk_dualpipev(&w); break;
    default: walk_interleaved(&w); break;
    }
    out.in_flight = w.best_held / (double)bytes->activations;
    out.pending_bytes = (uint64_t)(w.best_pending + 0.5);
    return out;
}
