/* compile_partition.c — AOTAutograd's min-cut rematerialization
 * partitioner replayed on a compiled region's forward values: which values
 * the forward graph hands to the backward graph (saves), the rest being
 * recomputed inside backward's kernels.
 *
 * Source: pytorch/pytorch torch/_functorch/partitioners.py at c28ba8e
 * (solve_min_cut: should_ban_recomputation, is_materialized,
 * is_materialized_backwards, get_node_weight, ban_recomputation_if_allowed,
 * the graph's edges, the used-far-apart heuristic, nx.minimum_cut) and
 * min_cut_rematerialization_partition (dist_from_bw), with the defaults of
 * torch/_functorch/config.py (ban_recompute_not_in_allowlist,
 * ban_recompute_materialized_backward, ban_recompute_reductions,
 * ban_recompute_used_far_apart, ban_recompute_long_fusible_chains all True,
 * recompute_views False, max_dist_from_bw 1000,
 * treat_parameters_as_free_to_save True, activation_memory_budget 1.0).
 * The cut itself is a max-flow (Edmonds-Karp) over the split graph, as
 * networkx's minimum_cut computes it: the same minimum, though among equal
 * minimum cuts networkx and this may pick different ones. */
#include "compile_partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* get_default_op_list: fusible_ops = recomputable_ops | random_ops; compute
 * intensive ops and placeholders fuse with nothing. */
static bool kind_fusible(uint8_t kind) {
    return kind == VP_CP_POINTWISE || kind == VP_CP_REDUCTION || kind == VP_CP_VIEW || kind == VP_CP_RANDOM;
}

/* solve_min_cut's is_fusible(a, b): both fusible (cat's memory fusion and
 * the functionalized kernels do not occur in the engine's regions). */
static bool fusible(const vp_cp_value *v, uint32_t a, uint32_t b) {
    return kind_fusible(v[a].kind) && kind_fusible(v[b].kind);
}

static bool is_input(const vp_cp_value *x) { return x->kind == VP_CP_INPUT || x->kind == VP_CP_PARAM; }

typedef struct {
    const vp_cp_value *v;
    uint32_t n;
    uint32_t *users, *first_user; /* forward users of value i: users[first_user[i] .. first_user[i + 1]) */
    uint32_t *dist;               /* dist_from_bw */
    bool *banned;
    double *cap;                  /* the flow network's capacities, (2n + 2)^2 */
} graph;

enum { DIST_FAR = 1000000000 }; /* int(1e9): a node backward never reaches */

static uint32_t n_users(const graph *g, uint32_t i) { return g->first_user[i + 1] - g->first_user[i]; }
static uint32_t user(const graph *g, uint32_t i, uint32_t k) { return g->users[g->first_user[i] + k]; }

static bool build_users(graph *g) {
    uint32_t total = 0;
    for (uint32_t i = 0; i < g->n; i++) total += g->v[i].n_inputs;
    g->users = calloc(total + 1, sizeof *g->users);
    if (!g->users) return false;
    for (uint32_t i = 0; i < g->n; i++)
        for (uint32_t k = 0; k < g->v[i].n_inputs; k++) g->first_user[g->v[i].inputs[k] + 1]++;
    for (uint32_t i = 0; i < g->n; i++) g->first_user[i + 1] += g->first_user[i];
    uint32_t *fill = calloc(g->n + 1, sizeof *fill);
    if (!fill) return false;
    for (uint32_t i = 0; i < g->n; i++) /* users in forward order */
        for (uint32_t k = 0; k < g->v[i].n_inputs; k++) {
            uint32_t p = g->v[i].inputs[k];
            g->users[g->first_user[p] + fill[p]++] = i;
        }
    free(fill);
    return true;
}

/* min_cut_rematerialization_partition: walking the joint graph backwards,
 * a backward node is at distance 0, a forward node one more than its
 * nearest user; a value backward reads directly is at 1. */
static void distances(graph *g) {
    for (uint32_t i = g->n; i-- > 0;) {
        uint32_t d = g->v[i].backward_reads ? 1 : DIST_FAR;
        for (uint32_t k = 0; k < n_users(g, i); k++) {
            uint32_t du = g->dist[user(g, i, k)];
            if (du < DIST_FAR && du + 1 < d) d = du + 1;
        }
        g->dist[i] = d;
    }
}

/* is_materialized: a placeholder, or a value one of whose users (forward
 * or backward) cannot fuse with it. */
static bool materialized(const graph *g, uint32_t i) {
    const vp_cp_value *x = &g->v[i];
    if (is_input(x)) return true;
    if (x->backward_reads && (x->backward_unfusible || !kind_fusible(x->kind))) return true;
    for (uint32_t k = 0; k < n_users(g, i); k++)
        if (!fusible(g->v, i, user(g, i, k))) return true;
    return false;
}

/* is_materialized_backwards: some backward op reading it, or a view of it,
 * cannot fuse with it (never for a view). */
static bool materialized_backwards(const graph *g, uint32_t i) {
    if (g->v[i].kind == VP_CP_VIEW) return false;
    if (g->v[i].backward_reads && (g->v[i].backward_unfusible || !kind_fusible(g->v[i].kind))) return true;
    for (uint32_t k = 0; k < n_users(g, i); k++) {
        uint32_t u = user(g, i, k);
        /* a view's backward readers count as the viewed value's; one level
         * deep, as the engine's regions have no views of views */
        if (g->v[u].kind == VP_CP_VIEW && g->v[u].backward_reads && g->v[u].backward_unfusible) return true;
    }
    return false;
}

/* should_ban_recomputation for a forward (non-placeholder) value. */
static bool should_ban(const graph *g, uint32_t i) {
    const vp_cp_value *x = &g->v[i];
    if (x->must_save) return true; /* CheckpointPolicy.MUST_SAVE */
    /* ban_if_not_in_allowlist: compute intensive and random ops are not in
     * the recomputable list */
    if (x->kind == VP_CP_COMPUTE || x->kind == VP_CP_RANDOM) return true;
    if (materialized_backwards(g, i)) return true; /* ban_if_materialized_backward */
    /* dist_from_bw < 1000 and > max_dist_from_bw (1000): never */
    /* ban_if_reduction: the output over 4x smaller than its inputs */
    uint64_t in = 0;
    for (uint32_t k = 0; k < x->n_inputs; k++) in += g->v[x->inputs[k]].bytes;
    return x->bytes * 4 < in;
}

/* The split graph: value i is the edge 2i -> 2i+1 (its _in and _out),
 * then the source and the sink. */
static uint32_t node_in(uint32_t i) { return 2 * i; }
static uint32_t node_out(uint32_t i) { return 2 * i + 1; }

static void edge(graph *g, uint32_t from, uint32_t to, double c) {
    uint32_t m = 2 * g->n + 2;
    g->cap[(size_t)from * m + to] += c;
}

/* ban_recomputation_if_allowed: an infinite edge from the source to its
 * _in; never for a view or a value the policy must recompute. */
static void ban(graph *g, uint32_t i) {
    if (g->v[i].kind == VP_CP_VIEW || g->v[i].must_recompute || g->banned[i]) return;
    g->banned[i] = true;
    edge(g, 2 * g->n, node_in(i), INFINITY);
}

/* get_node_weight: parameters are free to save; otherwise the size, times
 * 1.1 per step of distance from the backward (at least 1, at most 100),
 * doubled when the value is not materialized anyway. */
static double weight(const graph *g, uint32_t i) {
    if (g->v[i].kind == VP_CP_PARAM) return 0;
    uint32_t d = g->dist[i] > 100 ? 100 : g->dist[i] < 1 ? 1 : g->dist[i];
    double w = floor((double)g->v[i].bytes * pow(1.1, d)); /* int(mem_sz * 1.1 ** ...) */
    return materialized(g, i) ? w : 2 * w;
}

/* find_first_unfusible: from the users `start` (in forward order), along
 * fusible edges up to `max_order`, the first user that is not fusible with
 * the value before it (the start nodes count as fusible). */
static uint32_t first_unfusible(const graph *g, uint32_t from, uint32_t max_order, bool *seen) {
    memset(seen, 0, g->n * sizeof *seen);
    bool *reach_fusible = seen; /* seen[i]: reached, all fusible so far */
    for (uint32_t k = 0; k < n_users(g, from); k++) reach_fusible[user(g, from, k)] = true;
    /* forward order is topological: one sweep visits values in heap order */
    for (uint32_t i = 0; i <= max_order && i < g->n; i++) {
        if (!reach_fusible[i]) continue;
        for (uint32_t k = 0; k < n_users(g, i); k++) {
            uint32_t u = user(g, i, k);
            if (u > max_order) continue;
            if (!fusible(g->v, i, u)) {
                /* an unfusible edge into u: u is the first unfusible node if
                 * nothing earlier is; keep sweeping in order */
                if (u < max_order) max_order = u;
                continue;
            }
            reach_fusible[u] = true;
        }
    }
    return max_order;
}

/* ban_if_used_far_apart: a value with a fusible user beyond the first
 * unfusible node downstream of its users bans that user's recomputation. */
static bool ban_used_far_apart(graph *g) {
    bool *seen = calloc(g->n ? g->n : 1, sizeof *seen);
    if (!seen) return false;
    for (uint32_t i = 0; i < g->n; i++) {
        uint32_t nu = n_users(g, i);
        if (!nu) continue;
        uint32_t last = user(g, i, nu - 1);
        uint32_t first = first_unfusible(g, i, last, seen);
        for (uint32_t k = 0; k < nu; k++) {
            uint32_t u = user(g, i, k);
            if (u > first && fusible(g->v, i, u)) ban(g, u);
        }
    }
    free(seen);
    return true;
}

/* ban_if_long_fusible_chains: from each value (in forward order), a walk
 * along fusible edges to unbanned users, always taking the earliest value
 * waiting (a heap that may hold a value twice, as Python's does); a value
 * reached over 100 positions after the start when nothing else waits is
 * banned, and the walk ends. Values visited stay visited for every later
 * start. Positions are the region's values in order, its inputs where
 * first read (fw_order puts the placeholders first: a chain's length
 * differs by the inputs read along it). */
static bool ban_long_fusible_chains(graph *g) {
    bool *visited = calloc(g->n ? g->n : 1, sizeof *visited);
    uint32_t *waiting = calloc(g->n ? g->n : 1, sizeof *waiting); /* heap multiplicities */
    if (!visited || !waiting) {
        free(visited);
        free(waiting);
        return false;
    }
    for (uint32_t start = 0; start < g->n; start++) {
        if (is_input(&g->v[start])) continue; /* required forward nodes only */
        memset(waiting, 0, g->n * sizeof *waiting);
        waiting[start] = 1;
        uint32_t total = 1, from = start;
        while (total) {
            while (!waiting[from]) from++; /* users come later: the minimum never moves back */
            uint32_t cur = from;
            waiting[cur]--;
            total--;
            if (visited[cur]) continue;
            visited[cur] = true;
            if (cur > start + 100 && total == 0) {
                ban(g, cur);
                break;
            }
            for (uint32_t k = 0; k < n_users(g, cur); k++) {
                uint32_t u = user(g, cur, k);
                if (fusible(g->v, cur, u) && !g->banned[u]) {
                    waiting[u]++;
                    total++;
                }
            }
        }
    }
    free(visited);
    free(waiting);
    return true;
}

/* Edmonds-Karp on the dense residual network: the max flow's value is the
 * min cut's; `reach` ends as the source's side of it. */
static bool max_flow(graph *g, bool *reach, uint32_t *parent, uint32_t *queue) {
    uint32_t m = 2 * g->n + 2, s = 2 * g->n, t = s + 1;
    for (;;) {
        memset(reach, 0, m * sizeof *reach);
        uint32_t head = 0, tail = 0;
        queue[tail++] = s;
        reach[s] = true;
        while (head < tail && !reach[t]) {
            uint32_t a = queue[head++];
            for (uint32_t b = 0; b < m; b++)
                if (!reach[b] && g->cap[(size_t)a * m + b] > 0) {
                    reach[b] = true;
                    parent[b] = a;
                    queue[tail++] = b;
                }
        }
        if (!reach[t]) return true;
        double f = INFINITY;
        for (uint32_t b = t; b != s; b = parent[b]) {
            double c = g->cap[(size_t)parent[b] * m + b];
            if (c < f) f = c;
        }
        if (isinf(f)) return false; /* a banned value backward needs recomputed */
        for (uint32_t b = t; b != s; b = parent[b]) {
            g->cap[(size_t)parent[b] * m + b] -= f;
            g->cap[(size_t)b * m + parent[b]] += f;
        }
    }
}

static void build_network(graph *g) {
    uint32_t sink = 2 * g->n + 1;
    for (uint32_t i = 0; i < g->n; i++) {
        const vp_cp_value *x = &g->v[i];
        /* a value backward reads: its _out feeds a backward node's _in,
         * which is joined to the sink */
        if (x->backward_reads) edge(g, node_out(i), sink, INFINITY);
        if (x->must_recompute) { /* honoured by an infinite _in -> sink edge */
            edge(g, node_in(i), sink, INFINITY);
            continue;
        }
        if (is_input(x) || should_ban(g, i)) ban(g, i);
        edge(g, node_in(i), node_out(i), weight(g, i));
        for (uint32_t k = 0; k < n_users(g, i); k++) edge(g, node_out(i), node_in(user(g, i, k)), INFINITY);
    }
}

vp_cp_status vp_compile_partition(const vp_cp_value *values, uint32_t n, bool *saved) {
    uint32_t m = 2 * n + 2;
    graph g = {.v = values, .n = n};
    g.first_user = calloc(n + 2, sizeof *g.first_user);
    g.dist = calloc(n + 1, sizeof *g.dist);
    g.banned = calloc(n + 1, sizeof *g.banned);
    g.cap = calloc((size_t)m * m, sizeof *g.cap);
    bool *reach = calloc(m, sizeof *reach);
    uint32_t *parent = calloc(m, sizeof *parent), *queue = calloc(m, sizeof *queue);
    vp_cp_status status = VP_CP_NOMEM;
    if (g.first_user && g.dist && g.banned && g.cap && reach && parent && queue && build_users(&g)) {
        distances(&g);
        build_network(&g);
        if (ban_used_far_apart(&g) && ban_long_fusible_chains(&g)) {
            status = VP_CP_UNSAVABLE;
            if (max_flow(&g, reach, parent, queue)) {
                /* the cut's edges: _in on the source's side, _out not */
                for (uint32_t i = 0; i < n; i++) saved[i] = reach[node_in(i)] && !reach[node_out(i)];
                status = VP_CP_OK;
            }
        }
    }
    free(g.users);
    free(g.first_user);
    free(g.dist);
    free(g.banned);
    free(g.cap);
    free(reach);
    free(parent);
    free(queue);
    return status;
}
