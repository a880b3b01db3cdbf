/* test_prims.c — tiny graphs on the simulator, their bytes checked against
 * what PyTorch's autograd saves and allocates. Formulas are those of
 * tools/autograd/derivatives.yaml (PyTorch 2.x); the engine's behaviour
 * around them is torch/csrc/autograd/engine.cpp, input_buffer.cpp and
 * functions/accumulate_grad.h. All sizes use the raw (exact-byte) meter. */
#include <string.h>

#include "check.h"
#include "compile_region.h"
#include "prims.h"

typedef struct {
    vp_ledger ledger;
    vp_sim sim;
} graph;

static void graph_init(graph *g, bool record) {
    vp_ledger_init(&g->ledger, record);
    vp_sim_init(&g->sim, &g->ledger);
}

static void graph_free(graph *g) {
    CHECK(g->sim.status == VP_SIM_OK);
    CHECK(!g->ledger.overflow);
    vp_sim_free(&g->sim);
    vp_ledger_free(&g->ledger);
}

static uint64_t live(const graph *g, vp_category c) { return g->ledger.raw.current[c]; }

/* loss.backward() on y: a seed gradient of y's size, then the walk. */
static void backward_from(graph *g, vp_t y) {
    const vp_tensor *t = vp_at(&g->sim, y);
    vp_t seed = vp_new_in(&g->sim, t->numel, (vp_dtype)t->dtype, VP_CAT_TRANSIENT, "seed");
    vp_at(&g->sim, y)->grad = seed;
    g->ledger.place.phase = VP_PHASE_BACKWARD;
    vp_backward(&g->sim, 0, g->sim.n_nodes);
}

/* A tensor that requires grad without being a parameter (an input made with
 * requires_grad=True): its gradient lands in .grad, charged as grads. */
static vp_t grad_input(graph *g, uint64_t numel, vp_dtype dtype) {
    return vp_leaf(&g->sim, numel, dtype, VP_CAT_ACTIVATIONS, true, "input");
}

/* addmm (F.linear): mat1: mm_mat1_backward(grad, mat2, ...), mat2:
 * mm_mat2_backward(grad, mat1, ...); the generated node saves mat1 only if
 * mat2 needs a gradient and mat2 only if mat1 does. x[4,8] fp32 = 128 B,
 * w[16,8] = 512 B, y[4,16] = 256 B. */
static void test_linear_saves(void) {
    graph g;
    graph_init(&g, false);
    vp_t w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, true, "w");
    vp_t x = vp_new(&g.sim, 4 * 8, VP_FP32, "x");
    vp_t y = vp_linear(&g.sim, x, w, 0, 4, 16, false, "linear");
    vp_drop(&g.sim, x); /* the node keeps it: the weight needs its gradient */
    CHECK_EQ_U64(g.sim.n_nodes, 1);
    CHECK(g.sim.nodes[0].saved[0] == x && g.sim.nodes[0].saved[1] == 0);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 128 + 256);
    CHECK_EQ_U64(live(&g, VP_CAT_PARAMS), 512);
    vp_drop(&g.sim, y);
    graph_free(&g);

    /* a frozen weight (LoRA's base layer): the input is not kept, only the
     * weight, which is resident anyway */
    graph_init(&g, false);
    w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, false, "w");
    x = grad_input(&g, 4 * 8, VP_FP32);
    y = vp_linear(&g.sim, x, w, 0, 4, 16, false, "linear");
    vp_drop(&g.sim, x);
    CHECK(g.sim.nodes[0].saved[0] == w && g.sim.nodes[0].saved[1] == 0);
    CHECK(!vp_at(&g.sim, x)->live);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 256);
    vp_drop(&g.sim, y);
    graph_free(&g);

    /* nothing requires grad: no node at all, the output needs no gradient */
    graph_init(&g, false);
    w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, false, "w");
    x = vp_new(&g.sim, 4 * 8, VP_FP32, "x");
    y = vp_linear(&g.sim, x, w, 0, 4, 16, false, "linear");
    vp_drop(&g.sim, x);
    CHECK_EQ_U64(g.sim.n_nodes, 0);
    CHECK(!vp_at(&g.sim, y)->requires_grad);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 256);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* Backward of addmm allocates grad_x (x-sized) and grad_w (w-sized) while
 * the seed is alive; AccumulateGrad then steals both into .grad (no copy:
 * accumulate_grad.h, "if (!variable_grad.defined()) ... update_grad(new_grad
 * .detach())" when the engine holds the only reference). */
static void test_linear_backward(void) {
    graph g;
    graph_init(&g, false);
    vp_t w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, true, "w");
    vp_t x = grad_input(&g, 4 * 8, VP_FP32);
    vp_t y = vp_linear(&g.sim, x, w, 0, 4, 16, false, "linear");
    CHECK(g.sim.nodes[0].saved[0] == x && g.sim.nodes[0].saved[1] == w);
    uint32_t tensors_before = g.sim.n_tensors;
    backward_from(&g, y);
    /* seed 256 + grad_x 128 + grad_w 512 alive together */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 256 + 128 + 512);
    CHECK_EQ_U64(g.ledger.raw.peak, 512 + 128 + 256 + 256 + 128 + 512);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 128 + 512);
    CHECK(vp_at(&g.sim, w)->param_grad && vp_at(&g.sim, vp_at(&g.sim, w)->param_grad)->bytes == 512);
    CHECK_EQ_U64(g.sim.n_tensors - tensors_before, 3); /* seed, grad_x, grad_w: no clone */
    vp_drop(&g.sim, vp_at(&g.sim, w)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, x);
    vp_drop(&g.sim, y);
    CHECK_EQ_U64(g.ledger.raw.total, 512);
    graph_free(&g);
}

/* Tied weights: w used by two linears. w's AccumulateGrad has two
 * dependencies (engine.cpp compute_dependencies): the first gradient to
 * arrive (from the later use, which backward runs first) waits in its input
 * buffer, still transient; the second is added to it in place
 * (input_buffer.cpp: the buffer holds the last reference) and freed; then
 * AccumulateGrad steals the sum into .grad, which moves it to grads. */
static void test_accumulate_grad_tied(void) {
    graph g;
    graph_init(&g, false);
    vp_t w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, true, "w");
    vp_t x1 = vp_new(&g.sim, 4 * 8, VP_FP32, "x1"), x2 = vp_new(&g.sim, 4 * 8, VP_FP32, "x2");
    vp_t y1 = vp_linear(&g.sim, x1, w, 0, 4, 16, false, "use1");
    vp_t y2 = vp_linear(&g.sim, x2, w, 0, 4, 16, false, "use2");
    vp_t s = vp_add(&g.sim, y1, y2, 4 * 16, "sum"); /* add saves nothing */
    vp_drop(&g.sim, x1);
    vp_drop(&g.sim, x2);
    vp_drop(&g.sim, y1);
    vp_drop(&g.sim, y2);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 128 + 128 + 256);
    uint32_t tensors_before = g.sim.n_tensors;
    backward_from(&g, s);
    /* The peak: during use1's backward, with use2's grad_w buffered:
     * params 512 + x1 128 + s 256 + buffered 512 + seed 256 + grad_w 512
     * (x2 was released after use2's node ran); nothing is in .grad yet. */
    CHECK_EQ_U64(g.ledger.raw.peak, 512 + 128 + 256 + 512 + 256 + 512);
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_GRADS], 0);
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 512 + 256 + 512);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 512); /* one .grad */
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 256); /* s, still ours */
    CHECK_EQ_U64(g.sim.n_tensors - tensors_before, 3); /* seed and two grad_w */
    vp_drop(&g.sim, vp_at(&g.sim, w)->param_grad);
    vp_drop(&g.sim, s);
    graph_free(&g);
}

/* native_dropout: input: native_dropout_backward(grad, result1, scale) —
 * only the mask (result1, torch.bool: one byte per element) is saved, not
 * the input. p = 0 returns the input itself (F.dropout's short-circuit). */
/* A leaf used twice, through a residual add and a linear (a checkpointed
 * layer's detached input): the add hands x the incoming gradient itself,
 * which the caller also holds (CheckpointFunction.backward's argument). x's
 * input buffer keeps it until the linear's gradient arrives; that one, held
 * by nobody else, takes the sum in place (new.add_(old)), and AccumulateGrad
 * steals it: no clone of the shared gradient at any time. */
static void test_accumulate_grad_waits_for_every_edge(void) {
    graph g;
    graph_init(&g, false);
    vp_t w = vp_leaf(&g.sim, 8 * 8, VP_FP32, VP_CAT_PARAMS, false, "w");
    vp_t x = grad_input(&g, 4 * 8, VP_FP32);
    vp_t y = vp_linear(&g.sim, x, w, 0, 4, 8, false, "linear");
    vp_t s = vp_add(&g.sim, x, y, 4 * 8, "residual");
    vp_drop(&g.sim, y);
    uint32_t tensors_before = g.sim.n_tensors;
    vp_t seed = vp_new_in(&g.sim, 4 * 8, VP_FP32, VP_CAT_TRANSIENT, "seed");
    vp_hold(&g.sim, seed); /* the caller's reference */
    vp_at(&g.sim, s)->grad = seed;
    g.ledger.place.phase = VP_PHASE_BACKWARD;
    vp_backward(&g.sim, 0, g.sim.n_nodes);
    CHECK_EQ_U64(g.sim.n_tensors - tensors_before, 2); /* seed and the linear's grad_x */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 128 + 128);
    vp_t grad = vp_at(&g.sim, x)->param_grad;
    CHECK(grad && grad != seed && vp_at(&g.sim, x)->pending == 0);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 128);
    vp_drop(&g.sim, seed);
    vp_drop(&g.sim, grad);
    vp_drop(&g.sim, x);
    vp_drop(&g.sim, s);
    CHECK_EQ_U64(g.ledger.raw.total, 256);
    graph_free(&g);
}

/* The same tied weight with loss.backward() run range by range (the step's
 * head, then its layers, then its embedding): vp_backward_task counts both
 * edges first, so the head's gradient still waits in the input buffer when
 * its range is done, and 1.13's out-of-place sum makes a third weight-sized
 * tensor when the embedding's arrives. */
static void test_accumulate_grad_across_ranges(void) {
    graph g;
    graph_init(&g, false);
    g.sim.accumulate = VP_ACCUMULATE_OUT_OF_PLACE;
    vp_t w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, true, "w");
    vp_t x1 = vp_new(&g.sim, 4 * 8, VP_FP32, "x1"), x2 = vp_new(&g.sim, 4 * 8, VP_FP32, "x2");
    vp_t y1 = vp_linear(&g.sim, x1, w, 0, 4, 16, false, "embedding"); /* node 0 */
    uint32_t embed_end = g.sim.n_nodes;
    vp_t y2 = vp_linear(&g.sim, x2, w, 0, 4, 16, false, "head"); /* node 1 */
    vp_t s = vp_add(&g.sim, y1, y2, 4 * 16, "sum");
    vp_drop(&g.sim, x1);
    vp_drop(&g.sim, x2);
    vp_drop(&g.sim, y1);
    vp_drop(&g.sim, y2);
    vp_at(&g.sim, s)->grad = vp_new_in(&g.sim, 4 * 16, VP_FP32, VP_CAT_TRANSIENT, "seed");
    g.ledger.place.phase = VP_PHASE_BACKWARD;
    vp_backward_task(&g.sim, 0, g.sim.n_nodes);
    vp_backward(&g.sim, embed_end, g.sim.n_nodes);
    CHECK(!vp_at(&g.sim, w)->param_grad && vp_at(&g.sim, w)->grad); /* waiting, not in .grad */
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 0);
    vp_backward(&g.sim, 0, embed_end);
    vp_backward_task_end(&g.sim);
    /* at the sum: the head's and the embedding's gradients and their sum
     * (y1's gradient went when its node was done) */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 3 * 512);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 512);
    CHECK_EQ_U64(vp_at(&g.sim, w)->pending, 0);
    vp_drop(&g.sim, vp_at(&g.sim, w)->param_grad);
    vp_drop(&g.sim, s);
    graph_free(&g);
}

static void test_dropout(void) {
    graph g;
    graph_init(&g, false);
    vp_t x = grad_input(&g, 1000, VP_BF16);
    vp_t y = vp_dropout(&g.sim, x, 0.1, "dropout");
    vp_drop(&g.sim, x);
    CHECK(!vp_at(&g.sim, x)->live);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 2000 + 1000);
    vp_t mask = g.sim.nodes[0].saved[0];
    CHECK(mask && vp_at(&g.sim, mask)->dtype == VP_BOOL && vp_at(&g.sim, mask)->bytes == 1000);
    backward_from(&g, y);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 2000); /* the mask went with the node */
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 2000);
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, y);
    graph_free(&g);

    graph_init(&g, false);
    x = grad_input(&g, 1000, VP_BF16);
    uint64_t before = g.ledger.raw.total;
    y = vp_dropout(&g.sim, x, 0.0, "dropout");
    CHECK(y == x);
    CHECK_EQ_U64(vp_at(&g.sim, x)->refs, 2);
    CHECK_EQ_U64(g.ledger.raw.total, before);
    CHECK_EQ_U64(g.sim.n_nodes, 0);
    vp_drop(&g.sim, y);
    vp_drop(&g.sim, x);
    graph_free(&g);
}

/* native_layer_norm: input, weight, bias: native_layer_norm_backward(grad,
 * input, normalized_shape, result1, result2, weight, bias, ...): saves the
 * input and the per-row mean and rstd, which layer_norm_cuda allocates in
 * at::opmath_type (fp32 for bf16); the CPU kernel in the input's dtype.
 * x[8,64] bf16 = 1024 B; mean and rstd: 8 x 4 B each on CUDA. */
static void test_layer_norm(void) {
    for (int device = VP_DEVICE_CUDA; device <= VP_DEVICE_CPU; device++) {
        graph g;
        graph_init(&g, false);
        vp_t w = vp_leaf(&g.sim, 64, VP_BF16, VP_CAT_PARAMS, true, "ln.w");
        vp_t b = vp_leaf(&g.sim, 64, VP_BF16, VP_CAT_PARAMS, true, "ln.b");
        vp_t x = grad_input(&g, 8 * 64, VP_BF16);
        vp_t y = vp_layer_norm(&g.sim, x, w, b, 8, (vp_device)device, "ln");
        vp_drop(&g.sim, x);
        uint64_t stats = device == VP_DEVICE_CUDA ? 2 * 8 * 4 : 2 * 8 * 2;
        CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 1024 + 1024 + stats);
        backward_from(&g, y);
        CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 1024); /* y only */
        CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 1024 + 128 + 128);
        vp_t leaves[3] = {w, b, x};
        for (int i = 0; i < 3; i++) vp_drop(&g.sim, vp_at(&g.sim, leaves[i])->param_grad);
        vp_drop(&g.sim, y);
        CHECK_EQ_U64(g.ledger.raw.total, 256);
        graph_free(&g);
    }
}

/* Tensor.to(dtype) returns self when nothing changes: no bytes, no node.
 * A real cast is a new tensor; _to_copy: self: _to_copy_backward(grad,
 * self.options()) saves nothing, so the fp32 source can be freed. */
static void test_to(void) {
    graph g;
    graph_init(&g, false);
    vp_t x = grad_input(&g, 100, VP_FP32);
    uint64_t before = g.ledger.raw.total;
    uint32_t tensors = g.sim.n_tensors;
    vp_t same = vp_to(&g.sim, x, VP_FP32, "to");
    CHECK(same == x);
    CHECK_EQ_U64(g.ledger.raw.total, before);
    CHECK_EQ_U64(g.sim.n_tensors, tensors);
    CHECK_EQ_U64(g.sim.n_nodes, 0);
    vp_drop(&g.sim, same);
    vp_t half = vp_to(&g.sim, x, VP_BF16, "to");
    vp_drop(&g.sim, x);
    CHECK(!vp_at(&g.sim, x)->live);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 200);
    backward_from(&g, half);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 400); /* x's .grad in fp32 */
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, half);
    graph_free(&g);
}

/* mul.Tensor: self: mul_tensor_backward(grad, other, ...), other:
 * mul_tensor_backward(grad, self, ...): both products are output-sized;
 * validate_outputs then sum_to()s the broadcast operand's to its shape.
 * a[4,256] fp32 = 4096 B requires grad, b[256] = 1024 B a parameter. */
static void test_mul_broadcast(void) {
    graph g;
    graph_init(&g, false);
    vp_t b = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "scale");
    vp_t a = grad_input(&g, 4 * 256, VP_FP32);
    vp_t y = vp_mul(&g.sim, a, b, 4 * 256, "mul");
    /* saved self, then other: the order PyTorch 1.13's saved-tensor hooks
     * see them (checked: a * b packs a's shape first) */
    CHECK(g.sim.nodes[0].saved[0] == a && g.sim.nodes[0].saved[1] == b);
    backward_from(&g, y);
    /* seed + two full products + b's reduced gradient, all at once */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 4096 + 4096 + 4096 + 1024);
    CHECK_EQ_U64(g.ledger.raw.peak, 1024 + 4096 + 4096 + 4096 + 4096 + 4096 + 1024);
    vp_t gb = vp_at(&g.sim, b)->param_grad;
    CHECK(gb && vp_at(&g.sim, gb)->numel == 256 && vp_at(&g.sim, gb)->bytes == 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 4096 + 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, gb);
    vp_drop(&g.sim, vp_at(&g.sim, a)->param_grad);
    vp_drop(&g.sim, a);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

static void count_packed(void *ctx, uint64_t bytes) { *(uint64_t *)ctx += bytes; }

/* A graph whose saved tensors are packed (save_on_cpu), counting into *host. */
static void graph_init_packing(graph *g, uint64_t *host) {
    graph_init(g, false);
    *host = 0;
    g->sim.pack = count_packed;
    g->sim.pack_ctx = host;
}

/* The hooks off, then y and x go, then the graph. */
static void end_packing(graph *g, vp_t y, vp_t x) {
    g->sim.pack = NULL;
    vp_drop(&g->sim, y);
    vp_drop(&g->sim, x);
    graph_free(g);
}

/* The same under torch.autograd.graph.save_on_cpu: the node's apply unpacks
 * each saved tensor as a GPU copy (a local of the generated apply, the only
 * reference), so the copies go when apply returns, before validate_outputs
 * reduces b's gradient (torch/csrc/autograd/engine.cpp call_function); a
 * SavedVariable without hooks would keep them until release_variables. */
static void test_mul_broadcast_offloaded(void) {
    graph g;
    uint64_t host;
    graph_init_packing(&g, &host);
    vp_t b = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "scale");
    vp_t a = grad_input(&g, 4 * 256, VP_FP32);
    vp_t y = vp_mul(&g.sim, a, b, 4 * 256, "mul");
    g.sim.pack = NULL;
    CHECK_EQ_U64(host, 1024 + 4096);
    backward_from(&g, y);
    /* seed + the two copies + two full products; then the copies go and
     * b's reduced gradient (1024) comes */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 4096 + 1024 + 4096 + 4096 + 4096);
    CHECK_EQ_U64(g.ledger.raw.peak, 1024 + 4096 + 4096 + (4096 + 1024 + 4096 + 4096 + 4096));
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 4096 + 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, vp_at(&g.sim, b)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, a)->param_grad);
    vp_drop(&g.sim, a);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* torchtune's OffloadActivations with use_streams, asked by one node for
 * what another node packed (a non-reentrant checkpoint's rerun takes its
 * keeper's arguments so; _activation_offloading.py's unpack_tensor_with_
 * streams): a tensor the forward's stash still holds comes back as it is;
 * one packed `window` packs ago or more comes back as a copy, which the
 * backward's stash keeps after the caller lets go of it, until the end of
 * backward. a[4,256] fp32 = 4096 B, saved (slot 0, self) by a mul with a
 * trainable scale; two more muls pack four tensors more. */
static void test_unpack_for_streams(void) {
    graph g;
    uint64_t host;
    graph_init_packing(&g, &host);
    g.sim.stash.window = VP_OFFLOAD_WINDOW;
    vp_t b = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "scale");
    vp_t a = grad_input(&g, 4 * 256, VP_FP32);
    vp_t y = vp_mul(&g.sim, a, b, 4 * 256, "mul");
    CHECK(g.sim.nodes[0].saved[0] == a && (g.sim.nodes[0].packed & 1u));
    uint64_t before = g.ledger.raw.total;
    vp_t t = vp_unpack_for(&g.sim, 0, 0, 0);
    CHECK(t == a); /* still in the forward's stash: handed as it is */
    CHECK_EQ_U64(g.ledger.raw.total, before);
    vp_drop(&g.sim, t);
    vp_t y2 = vp_mul(&g.sim, y, b, 4 * 256, "mul");
    vp_t y3 = vp_mul(&g.sim, y2, b, 4 * 256, "mul");
    before = g.ledger.raw.total;
    t = vp_unpack_for(&g.sim, 2, 0, 0);
    CHECK(t != a);
    CHECK_EQ_U64(g.ledger.raw.total, before + 4096);
    vp_drop(&g.sim, t); /* the stash keeps it */
    CHECK_EQ_U64(g.ledger.raw.total, before + 4096);
    vp_offload_stash_flush(&g.sim);
    CHECK_EQ_U64(g.ledger.raw.total, before);
    g.sim.pack = NULL;
    vp_drop(&g.sim, y3);
    vp_drop(&g.sim, y2);
    vp_drop(&g.sim, y);
    vp_drop(&g.sim, a);
    graph_free(&g);
}

/* TRL's OffloadActivations (trl/models/activation_offloading.py, 1.8): a
 * storage key lives while the forward's stash keeps its tensor, and a save
 * of a tracked storage stays on the GPU and keeps the key, until backward.
 * a[4,256] fp32 = 4096 B needs grad; each a * scale saves a (self), then
 * the parameter (other), which stays. */
static void graph_init_trl(graph *g, uint64_t *host, unsigned window) {
    graph_init_packing(g, host);
    g->sim.stash.window = window;
    g->sim.pack_skips_params = g->sim.pack_keeps_strides = true;
    g->sim.pack_min_bytes = 1024;
    g->sim.pack_dedups = window != 0;
    g->sim.pack_skips_param_views = g->sim.pack_copies_views = true;
}

static void test_trl_storage_keys(void) {
    for (unsigned window = 0; window <= VP_OFFLOAD_WINDOW; window += VP_OFFLOAD_WINDOW) {
        graph g;
        uint64_t host;
        graph_init_trl(&g, &host, window);
        vp_t scale = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "scale");
        vp_t a = grad_input(&g, 4 * 256, VP_FP32), c = grad_input(&g, 4 * 256, VP_FP32);
        vp_t y[6];
        y[0] = vp_mul(&g.sim, a, scale, 4 * 256, "mul"); /* packs 1-2: a offloaded */
        y[1] = vp_mul(&g.sim, a, scale, 4 * 256, "mul"); /* 3-4: a's key tracked (streams) */
        CHECK_EQ_U64(host, window ? 4096 : 8192);
        CHECK(window ? !(g.sim.nodes[1].packed & 1u) : (g.sim.nodes[1].packed & 1u));
        /* the first a leaves the stash (pack 1 + 5 <= pack 7); its key was
         * the second save's since pack 3, so a stays tracked */
        for (unsigned i = 2; i < 5; i++) y[i] = vp_mul(&g.sim, y[i - 2], scale, 4 * 256, "mul");
        y[5] = vp_mul(&g.sim, a, scale, 4 * 256, "mul");
        CHECK(window ? !(g.sim.nodes[5].packed & 1u) : (g.sim.nodes[5].packed & 1u));
        /* c, once offloaded and pruned, is offloaded again */
        vp_t z = vp_mul(&g.sim, c, scale, 4 * 256, "mul");
        vp_t z2[5];
        for (unsigned i = 0; i < 5; i++) z2[i] = vp_mul(&g.sim, i ? z2[i - 1] : z, scale, 4 * 256, "mul");
        uint64_t before = host;
        vp_t z3 = vp_mul(&g.sim, c, scale, 4 * 256, "mul");
        CHECK_EQ_U64(host, before + 4096);
        vp_offload_stash_flush(&g.sim);
        CHECK_EQ_U64(g.sim.stash.n_keys, 0);
        g.sim.pack = NULL;
        vp_drop(&g.sim, z3);
        for (unsigned i = 0; i < 5; i++) vp_drop(&g.sim, z2[i]);
        vp_drop(&g.sim, z);
        for (unsigned i = 0; i < 6; i++) vp_drop(&g.sim, y[i]);
        vp_drop(&g.sim, c);
        vp_drop(&g.sim, a);
        graph_free(&g);
    }
}

/* A part of a split of the last dimension has gaps between its elements:
 * torchtune's empty_like cannot keep its strides (it keeps a transposed
 * view's), so CUDA copies it to the host through a contiguous GPU copy,
 * made before the op's output and gone once copied; TRL's stash keeps its
 * copy. The split's second part starts further in (its own storage key).
 * x[4, 512] fp32 needs grad, split into two [4, 256] halves of 4096 B;
 * half @ w[256, 2] (w trainable) saves the half; the product is 32 B. */
static void test_gaps_pack(void) {
    for (unsigned trl = 0; trl < 2; trl++) {
        graph g;
        uint64_t host;
        graph_init_packing(&g, &host);
        g.sim.pack_skips_params = g.sim.pack_keeps_strides = true;
        g.sim.pack_copies_views = trl;
        g.sim.stash.window = trl ? VP_OFFLOAD_WINDOW : 0;
        vp_t w = vp_leaf(&g.sim, 256 * 2, VP_FP32, VP_CAT_PARAMS, true, "w");
        vp_t x = grad_input(&g, 4 * 512, VP_FP32);
        vp_t halves[2];
        vp_split_columns(&g.sim, x, 2, halves, "chunk");
        CHECK(vp_at(&g.sim, halves[0])->gaps && vp_at(&g.sim, halves[1])->gaps);
        CHECK(vp_at(&g.sim, halves[0])->offset != vp_at(&g.sim, halves[1])->offset);
        uint64_t before = g.ledger.raw.total;
        g.ledger.raw.peak = before;
        vp_t y = vp_matmul(&g.sim, halves[1], w, 4 * 2, false, "matmul");
        CHECK_EQ_U64(host, 4096);
        CHECK_EQ_U64(g.ledger.raw.peak, before + 4096 + (trl ? 32 : 0));
        CHECK_EQ_U64(g.ledger.raw.total, before + 32 + (trl ? 4096 : 0));
        vp_offload_stash_flush(&g.sim);
        g.sim.pack = NULL;
        vp_drop(&g.sim, y);
        vp_drop(&g.sim, halves[0]);
        vp_drop(&g.sim, halves[1]);
        vp_drop(&g.sim, x);
        graph_free(&g);
    }
}

/* A permuted tensor (the heads' transposed view) and what element-wise ops
 * make of it keep the layout (TensorIterator: like the first full-size
 * input); a reduction's output does not. Saved by a matmul whose output is
 * smaller, it goes to the host through a contiguous GPU copy under
 * save_on_cpu (the peak rises by the copy beyond the output), keeps its
 * strides under torchtune's hooks (no copy), and under TRL's its
 * contiguous copy stays in the stash until flushed. a[16,64] fp32 = 4096 B,
 * w[64,4] = 1024 B (needs grad), y[16,4] = 256 B. */
static void test_permuted_pack(void) {
    enum { SAVE_ON_CPU, TORCHTUNE, TRL };
    for (unsigned mode = SAVE_ON_CPU; mode <= TRL; mode++) {
        for (unsigned permuted = 0; permuted < 2; permuted++) {
            graph g;
            uint64_t host;
            if (mode == TRL) graph_init_trl(&g, &host, VP_OFFLOAD_WINDOW);
            else graph_init_packing(&g, &host);
            g.sim.pack_keeps_strides = mode != SAVE_ON_CPU;
            vp_t w = vp_leaf(&g.sim, 64 * 4, VP_FP32, VP_CAT_PARAMS, true, "w");
            vp_t x = vp_new(&g.sim, 16 * 64, VP_BF16, "x");
            vp_at(&g.sim, x)->permuted = permuted;
            vp_t a = vp_to(&g.sim, x, VP_FP32, "a");
            vp_t scale = vp_new(&g.sim, 64, VP_FP32, "scale");
            vp_t scaled = vp_mul(&g.sim, scale, a, 16 * 64, "scaled"); /* the first full-size input: a */
            vp_t mean = vp_reduce(&g.sim, a, 16, "mean");
            CHECK(vp_at(&g.sim, a)->permuted == (bool)permuted && vp_at(&g.sim, scaled)->permuted == (bool)permuted);
            CHECK(!vp_at(&g.sim, mean)->permuted);
            uint64_t before = g.ledger.raw.total;
            g.ledger.raw.peak = before;
            vp_t y = vp_matmul(&g.sim, a, w, 16 * 4, false, "matmul");
            CHECK_EQ_U64(host, 4096);
            bool copied = permuted && mode != TORCHTUNE;
            uint64_t stashed = copied && mode == TRL ? 4096 : 0;
            CHECK_EQ_U64(g.ledger.raw.peak, before + 256 + (copied ? 4096 - (mode == TRL ? 0 : 256) : 0));
            CHECK_EQ_U64(g.ledger.raw.total, before + 256 + stashed);
            vp_offload_stash_flush(&g.sim);
            g.sim.pack = NULL;
            vp_drop(&g.sim, y);
            vp_drop(&g.sim, mean);
            vp_drop(&g.sim, scaled);
            vp_drop(&g.sim, scale);
            vp_drop(&g.sim, a);
            vp_drop(&g.sim, x);
            graph_free(&g);
        }
    }
}

/* ... a frozen weight's weight.t() shares the parameter's storage: kept,
 * no copy. Where the weights are gathered (pack_skips_param_views off),
 * the transposed view goes through a contiguous GPU copy that the stash
 * keeps (with streams) until five packs later. A broadcast view's storage
 * goes as it is and comes back at its size. x[4,8] fp32 = 128 B (needs
 * grad), w[64,8] = 2048 B, y[4,64] = 1024 B. */
static void test_trl_views(void) {
    for (unsigned gathered = 0; gathered < 2; gathered++) {
        graph g;
        uint64_t host;
        graph_init_trl(&g, &host, VP_OFFLOAD_WINDOW);
        g.sim.pack_skips_param_views = !gathered;
        vp_t w = vp_leaf(&g.sim, 8 * 64, VP_FP32, VP_CAT_PARAMS, false, "w");
        vp_t x = grad_input(&g, 4 * 8, VP_FP32);
        uint64_t resident = g.ledger.raw.total;
        vp_t y = vp_linear(&g.sim, x, w, 0, 4, 64, false, "linear");
        CHECK_EQ_U64(host, gathered ? 2048 : 0);
        CHECK_EQ_U64(g.ledger.raw.total, resident + 1024 + (gathered ? 2048 : 0));
        vp_offload_stash_flush(&g.sim);
        CHECK_EQ_U64(g.ledger.raw.total, resident + 1024);
        end_packing(&g, y, x);
    }
    graph g;
    uint64_t host;
    graph_init_trl(&g, &host, 0);
    vp_t scale = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "scale");
    vp_t small = grad_input(&g, 512, VP_FP32);
    vp_t wide = vp_expand(&g.sim, small, 8 * 512, "expand"); /* 16 KiB seen, 2 KiB stored */
    vp_t y = vp_mul(&g.sim, wide, scale, 8 * 512, "mul");
    uint32_t node = g.sim.n_nodes - 1;
    CHECK(g.sim.nodes[node].saved[0] == wide && (g.sim.nodes[node].packed & 1u));
    CHECK_EQ_U64(host, 2048);
    uint64_t before = g.ledger.raw.total;
    vp_t back = vp_unpack_for(&g.sim, node, node, 0);
    CHECK_EQ_U64(g.ledger.raw.total, before + 2048);
    vp_drop(&g.sim, back);
    g.sim.pack = NULL;
    vp_drop(&g.sim, y);
    vp_drop(&g.sim, wide);
    vp_drop(&g.sim, small);
    graph_free(&g);
}

/* Under save_on_cpu a Linear's saved weight.t() is not contiguous: CUDA
 * copies it to the host through a contiguous GPU copy, made before the op's
 * output, so the step's peak is the larger of the two on top of what lives.
 * A Conv1D keeps its weight as it is: no copy. x[4,8] fp32 = 128 B (needs
 * grad), frozen w[16,8] = 512 B, y[4,16] = 256 B; with w[64,8] = 2048 B
 * and y[4,64] = 1024 B the copy outgrows the output by 1024 B. An
 * expanded view (a stride-0 dimension) takes the same road. */
static void test_pack_through_contiguous(void) {
    const struct {
        uint64_t out;
        bool conv1d;
        uint64_t beyond; /* the peak above resident, input and output */
    } cases[] = {{16, false, 512 - 256}, {64, false, 2048 - 1024}, {64, true, 0}, {4, false, 128 - 64}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        graph g;
        uint64_t host;
        graph_init_packing(&g, &host);
        uint64_t w_bytes = 4 * 8 * cases[i].out, y_bytes = 4 * 4 * cases[i].out;
        vp_t w = vp_leaf(&g.sim, 8 * cases[i].out, VP_FP32, VP_CAT_PARAMS, false, "w");
        vp_t x = grad_input(&g, 4 * 8, VP_FP32);
        vp_t y = vp_linear(&g.sim, x, w, 0, 4, cases[i].out, cases[i].conv1d, "linear");
        CHECK_EQ_U64(host, w_bytes);
        CHECK_EQ_U64(g.ledger.raw.peak, w_bytes + 128 + y_bytes + cases[i].beyond);
        CHECK_EQ_U64(g.ledger.raw.total, w_bytes + 128 + y_bytes);
        end_packing(&g, y, x);
    }
    /* a [64, 4] fp32 matrix expanded to [3, 64, 4] and saved by a batched
     * product with a [3, 4, 64] input into [3, 4, 4] = 192 B: 3072 B
     * copied through the GPU */
    graph g;
    uint64_t host;
    graph_init_packing(&g, &host);
    vp_t b = vp_new(&g.sim, 64 * 4, VP_FP32, "b");
    vp_t expanded = vp_view(&g.sim, b, 3 * 64 * 4, "b.expand");
    vp_t a = grad_input(&g, 3 * 4 * 64, VP_FP32);
    uint64_t before = g.ledger.raw.total;
    vp_t y = vp_matmul(&g.sim, a, expanded, 3 * 4 * 4, false, "bmm");
    CHECK_EQ_U64(host, 3072);
    CHECK_EQ_U64(g.ledger.raw.peak, before + 3072);
    CHECK_EQ_U64(g.ledger.raw.total, before + 192);
    /* the same product with keys saved as key.transpose(2, 3), a view of
     * contiguous keys [3, 4, 64] = 3072 B: copied through the GPU too; as a
     * contiguous operand, not */
    vp_t keys = vp_new(&g.sim, 3 * 4 * 64, VP_FP32, "keys");
    for (unsigned transposed = 0; transposed < 2; transposed++) {
        g.ledger.raw.peak = g.ledger.raw.total;
        uint64_t at = g.ledger.raw.total;
        vp_t scores = vp_matmul(&g.sim, a, keys, 3 * 4 * 4, transposed, "scores");
        CHECK_EQ_U64(g.ledger.raw.peak, at + (transposed ? 3072 : 192));
        vp_drop(&g.sim, scores);
    }
    g.sim.pack = NULL;
    vp_drop(&g.sim, keys);
    vp_drop(&g.sim, y);
    vp_drop(&g.sim, expanded);
    vp_drop(&g.sim, b);
    vp_drop(&g.sim, a);
    graph_free(&g);
}

/* scores.gather(1, index) saves scores and index (GatherBackward0);
 * weights[top_x, idx] saves both index tensors though they are columns of
 * one torch.where result: save_on_cpu packs every saved variable apart.
 * scores fp32 [64, 8] = 2048 B, index int64 [64, 2] = 1024 B, the two
 * columns [16] int64 = 128 B each (views of a [16, 2] one). */
static void test_gather_and_index_pair_pack_each_save(void) {
    graph g;
    uint64_t host;
    graph_init_packing(&g, &host);
    vp_t scores = grad_input(&g, 64 * 8, VP_FP32);
    vp_t index = vp_new(&g.sim, 64 * 2, VP_INT64, "topk");
    vp_t weights = vp_gather(&g.sim, scores, index, 64 * 2, "gather");
    CHECK_EQ_U64(host, 2048 + 1024);
    vp_t hits = vp_new(&g.sim, 16 * 2, VP_INT64, "where");
    vp_t idx = vp_view(&g.sim, hits, 16, "idx"), top_x = vp_view(&g.sim, hits, 16, "top_x");
    vp_drop(&g.sim, hits);
    vp_t picked = vp_index_pair(&g.sim, weights, top_x, idx, 16, "weights[top_x, idx]");
    g.sim.pack = NULL;
    CHECK_EQ_U64(host, 2048 + 1024 + 128 + 128);
    vp_drop(&g.sim, idx);
    vp_drop(&g.sim, top_x);
    vp_drop(&g.sim, index);
    vp_drop(&g.sim, weights);
    backward_from(&g, picked);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 2048);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, vp_at(&g.sim, scores)->param_grad);
    vp_drop(&g.sim, scores);
    vp_drop(&g.sim, picked);
    graph_free(&g);
}

/* Bytes allocated (positive rounded deltas) since event `from`; a gradient
 * moved into .grad (logged as a release and an allocation) is none. */
static uint64_t allocated_since(const vp_ledger *l, unsigned from) {
    uint64_t sum = 0;
    for (unsigned i = from; i < l->n_events; i++)
        if (l->events[i].delta > 0 && strcmp(l->events[i].place.op, "AccumulateGrad") != 0)
            sum += (uint64_t)l->events[i].delta;
    return sum;
}

/* h = 2*x; y = h * h: h receives two fresh gradients. input_buffer.cpp in
 * 2.x adds the second into the first in place when the buffer holds the
 * only reference (old_var.add_(var)); 1.13 computed old_var + var, a third
 * h-sized tensor. x, h fp32 [256] = 1024 B (a multiple of 512: raw equals
 * rounded). Backward allocates: two products of mul, (the sum), grad_x. */
static void test_accumulate_modes(void) {
    for (int mode = VP_ACCUMULATE_INPLACE; mode <= VP_ACCUMULATE_OUT_OF_PLACE; mode++) {
        graph g;
        graph_init(&g, true);
        g.sim.accumulate = (vp_accumulate)mode;
        vp_t x = grad_input(&g, 256, VP_FP32);
        vp_t h = vp_scale(&g.sim, x, "scale");
        vp_t y = vp_mul(&g.sim, h, h, 256, "square");
        vp_drop(&g.sim, h);
        unsigned from = g.ledger.n_events;
        backward_from(&g, y);
        uint64_t expected = mode == VP_ACCUMULATE_INPLACE ? 1024 * 4 : 1024 * 5; /* seed included */
        CHECK_EQ_U64(allocated_since(&g.ledger, from), expected);
        bool has_sum = false;
        for (unsigned i = from; i < g.ledger.n_events; i++)
            if (strcmp(g.ledger.events[i].place.op, "accumulate") == 0) has_sum = true;
        CHECK(has_sum == (mode == VP_ACCUMULATE_OUT_OF_PLACE));
        CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
        CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 1024);
        vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
        vp_drop(&g.sim, x);
        vp_drop(&g.sim, y);
        CHECK_EQ_U64(g.ledger.raw.total, 0);
        graph_free(&g);
    }
}

/* T5's `scores += position_bias` (add_ with a wider, grad-requiring
 * other): no new storage in forward, the result keeps the scores' dtype;
 * AddBackward passes the gradient to the scores as it is and casts a copy
 * to the bias's dtype (validate_outputs). h = 2x bf16 [256] = 512 B, bias
 * fp32 [256] = 1024 B. Backward allocates: the seed, the bias's fp32
 * gradient, x's gradient (scale's grad * 2). */
static void test_add_inplace(void) {
    graph g;
    graph_init(&g, true);
    vp_t bias = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "bias");
    vp_t x = grad_input(&g, 256, VP_BF16);
    vp_t h = vp_scale(&g.sim, x, "scale");
    uint64_t before = g.ledger.raw.total;
    vp_t y = vp_add_(&g.sim, h, bias, "add_");
    vp_drop(&g.sim, h);
    CHECK_EQ_U64(g.ledger.raw.total, before); /* in place: a view of h's storage */
    CHECK(vp_at(&g.sim, y)->dtype == VP_BF16 && vp_at(&g.sim, y)->numel == 256);
    unsigned from = g.ledger.n_events;
    backward_from(&g, y);
    CHECK_EQ_U64(allocated_since(&g.ledger, from), 512 + 1024 + 512);
    vp_t gb = vp_at(&g.sim, bias)->param_grad;
    CHECK(gb && vp_at(&g.sim, gb)->bytes == 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, gb);
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, x);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* sub.Tensor: self: grad, other: -grad (derivatives.yaml, alpha 1): a
 * saves nothing; backward passes the seed on to a and allocates one
 * output-sized -grad for b, then reduces it to b's size (b broadcast:
 * [4, 256] - [256], fp32). */
static void test_sub(void) {
    graph g;
    graph_init(&g, true);
    vp_t b = vp_leaf(&g.sim, 256, VP_FP32, VP_CAT_PARAMS, true, "b");
    vp_t a = grad_input(&g, 4 * 256, VP_FP32);
    uint64_t before = g.ledger.raw.total;
    vp_t y = vp_sub(&g.sim, a, b, 4 * 256, "sub");
    CHECK_EQ_U64(g.ledger.raw.total - before, 4096);
    CHECK(g.sim.nodes[0].saved[0] == 0);
    unsigned from = g.ledger.n_events;
    backward_from(&g, y);
    /* the seed (a's gradient as it is), -grad, b's reduced gradient */
    CHECK_EQ_U64(allocated_since(&g.ledger, from), 4096 + 4096 + 1024);
    vp_t gb = vp_at(&g.sim, b)->param_grad;
    CHECK(gb && vp_at(&g.sim, gb)->bytes == 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, gb);
    vp_drop(&g.sim, vp_at(&g.sim, a)->param_grad);
    vp_drop(&g.sim, a);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* embedding: weight: embedding_backward(grad, indices, ...): saves the
 * indices; the dense gradient is vocab x dim. On CUDA with more than 3072
 * indices the sort-based kernel adds an fp32 row per index and six int64
 * words per index (the engine's reading of EmbeddingBackwardKernel.cu).
 * w[100,8] fp32 = 3200 B. */
static void test_embedding(void) {
    const uint64_t rows[2] = {10, 4096};
    for (int i = 0; i < 2; i++) {
        graph g;
        graph_init(&g, false);
        vp_t w = vp_leaf(&g.sim, 100 * 8, VP_FP32, VP_CAT_PARAMS, true, "embed");
        vp_t ids = vp_new(&g.sim, rows[i], VP_INT64, "ids");
        vp_t y = vp_embedding(&g.sim, ids, w, rows[i], 8, VP_DEVICE_CUDA, "embed");
        vp_drop(&g.sim, ids); /* kept by the node */
        CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), rows[i] * 8 + rows[i] * 8 * 4);
        backward_from(&g, y);
        uint64_t workspace = i == 0 ? 0 : (4096 * 8 + 4096 * 6 * 2) * 4;
        CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], rows[i] * 8 * 4 + workspace + 3200);
        CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 3200);
        vp_drop(&g.sim, vp_at(&g.sim, w)->param_grad);
        vp_drop(&g.sim, y);
        CHECK_EQ_U64(g.ledger.raw.total, 3200);
        graph_free(&g);
    }
}

/* A two-layer MLP: after backward only parameters and their .grad remain;
 * after zero_grad(set_to_none=True) only parameters. */
static void test_backward_frees_activations(void) {
    graph g;
    graph_init(&g, false);
    vp_t w1 = vp_leaf(&g.sim, 64 * 32, VP_BF16, VP_CAT_PARAMS, true, "w1");
    vp_t w2 = vp_leaf(&g.sim, 32 * 64, VP_BF16, VP_CAT_PARAMS, true, "w2");
    const uint64_t params = 2 * (64 * 32 * 2);
    vp_t x = vp_new(&g.sim, 4 * 32, VP_BF16, "x");
    vp_t h = vp_linear(&g.sim, x, w1, 0, 4, 64, false, "fc1");
    vp_drop(&g.sim, x);
    vp_t a = vp_unary(&g.sim, h, VP_SAVES_INPUT, 0, VP_BF16, "silu");
    vp_drop(&g.sim, h);
    vp_t o = vp_linear(&g.sim, a, w2, 0, 4, 32, false, "fc2");
    vp_drop(&g.sim, a);
    vp_t loss = vp_reduce(&g.sim, o, 1, "mean");
    vp_drop(&g.sim, o);
    /* kept for backward: x (fc1), h (silu), a (fc2); o is freed; loss 2 B */
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 4 * 32 * 2 + 4 * 64 * 2 + 4 * 64 * 2 + 2);
    backward_from(&g, loss);
    vp_drop(&g.sim, loss);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 0);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), params);
    vp_drop(&g.sim, vp_at(&g.sim, w1)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, w2)->param_grad);
    CHECK_EQ_U64(g.ledger.raw.total, params);
    CHECK_EQ_U64(g.ledger.raw.current[VP_CAT_PARAMS], params);
    graph_free(&g);
}

/* base[..., slice] = src twice (DeepSeek-V2's query states): CopySlices
 * (functions/tensor.cpp) allocates nothing forward; backward of the second
 * (its base needs a gradient) makes the base-sized result, the slice's
 * clone and CopyBackwards' zeros_like of it beside the incoming gradient,
 * then sums the clone to the broadcast source's size; the first (its base a
 * new_empty without grad) makes the result and the clone, and drops the
 * result. base 64 fp32 = 256 B, a 32 = 128 B, b 8 = 32 B broadcast to 32. */
static void test_copy_slice(void) {
    graph g;
    graph_init(&g, false);
    vp_t a = grad_input(&g, 32, VP_FP32), b = grad_input(&g, 8, VP_FP32);
    vp_t base = vp_new(&g.sim, 64, VP_FP32, "new_empty");
    vp_t first = vp_copy_slice(&g.sim, base, a, 32, "states[..., :nope]");
    vp_drop(&g.sim, base);
    vp_t states = vp_copy_slice(&g.sim, first, b, 32, "states[..., nope:]");
    vp_drop(&g.sim, first);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 128 + 32 + 256); /* in place: no copy */
    backward_from(&g, states);
    /* seed 256, result 256, clone 128, zeros 128 */
    CHECK_EQ_U64(g.ledger.raw.peak_breakdown[VP_CAT_TRANSIENT], 256 + 256 + 128 + 128);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 128 + 32); /* a's clone, b's sum */
    vp_drop(&g.sim, vp_at(&g.sim, a)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, b)->param_grad);
    vp_drop(&g.sim, a);
    vp_drop(&g.sim, b);
    vp_drop(&g.sim, states);
    CHECK_EQ_U64(g.ledger.raw.total, 0);
    graph_free(&g);
}

/* F.conv1d depthwise of a transposed x [2, 160, 32] fp32 (40960 B) with
 * w [160, 1, 4] (2560 B), b [160] (640 B), padding 3: out [2, 160, 35]
 * (44800 B). CUDA's _conv_depthwise2d(input.contiguous(), ...) copies the
 * strided x while it runs; ConvolutionBackward0 keeps x and w; backward
 * copies x again, makes x's and w's gradients, then b's. */
static void test_conv1d_depthwise(void) {
    graph g;
    graph_init(&g, true);
    vp_t w = vp_leaf(&g.sim, 640, VP_FP32, VP_CAT_PARAMS, true, "w");
    vp_t b = vp_leaf(&g.sim, 160, VP_FP32, VP_CAT_PARAMS, true, "b");
    vp_t x = grad_input(&g, 2 * 160 * 32, VP_FP32);
    uint64_t before = g.ledger.raw.total;
    vp_t y = vp_conv1d_depthwise(&g.sim, x, w, b, 2 * 160 * 35, true, "conv1d");
    CHECK_EQ_U64(g.ledger.raw.total - before, 44800); /* the copy came and went */
    CHECK(g.sim.nodes[0].saved[0] == x && g.sim.nodes[0].saved[1] == w);
    unsigned from = g.ledger.n_events;
    backward_from(&g, y);
    /* the seed, the copy, x's, w's and b's gradients (each rounded up to
     * 512 bytes: 44800 -> 45056, 640 -> 1024) */
    CHECK_EQ_U64(allocated_since(&g.ledger, from), 45056 + 40960 + 40960 + 2560 + 1024);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, vp_at(&g.sim, w)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, b)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, x);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* cumsum keeps nothing; cumsum_backward is grad.flip(d).cumsum(d).flip(d):
 * two temporaries beside the result. masked_fill keeps its mask and makes
 * a new gradient. clamp with numbers keeps x; its backward's two bool
 * comparisons live beside the gradient. x [1024] fp32 (4096 B). */
static void test_cumsum_masked_fill_clamp(void) {
    graph g;
    graph_init(&g, true);
    vp_t x = grad_input(&g, 1024, VP_FP32);
    vp_t c = vp_cumsum(&g.sim, x, "cumsum");
    CHECK(g.sim.nodes[0].saved[0] == 0);
    vp_t mask = vp_new(&g.sim, 256, VP_BOOL, "mask");
    vp_t m = vp_where(&g.sim, c, mask, "masked_fill"); /* masked_fill(mask, value) is a where */
    CHECK(g.sim.nodes[1].saved[0] == mask);
    vp_drop(&g.sim, mask); /* the node keeps it */
    vp_t y = vp_clamp_scalar(&g.sim, m, "clamp");
    CHECK(g.sim.nodes[2].saved[0] == m);
    CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 4 * 4096 + 256);
    vp_drop(&g.sim, c);
    vp_drop(&g.sim, m);
    unsigned from = g.ledger.n_events;
    backward_from(&g, y);
    /* seed; clamp: 2 x 1024 bools, the gradient; masked_fill: the gradient;
     * cumsum: two temporaries, the gradient */
    CHECK_EQ_U64(allocated_since(&g.ledger, from), 4096 + 2048 + 4096 + 4096 + 3 * 4096);
    CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
    vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
    vp_drop(&g.sim, x);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* amax over x [64, 1000] fp32 (keepdim): the result alone forward (256 B),
 * x and the result saved. Backward's peak above the incoming gradient,
 * measured on PyTorch 1.13's CPU kernels (memcount, torch.autograd.grad
 * of x.amax(-1, keepdim=True)): 576,768 B (the bool mask 64,000, its fp32
 * copy 256,000, the gradient 256,000, the quotient 256, the count 512);
 * on CUDA without TensorIterator's CPU copies the sum's height: mask
 * 64,000 + its int64 copy 512,000 + count 512 = 576,512 (1.13's bf16 CPU
 * run peaks there too: 576,512). */
static void test_amax(void) {
    for (int device = VP_DEVICE_CUDA; device <= VP_DEVICE_CPU; device++) {
        graph g;
        graph_init(&g, false);
        vp_t x = grad_input(&g, 64 * 1000, VP_FP32);
        vp_t y = vp_amax(&g.sim, x, 64, (vp_device)device, "amax");
        CHECK_EQ_U64(live(&g, VP_CAT_ACTIVATIONS), 256000 + 256);
        CHECK(g.sim.nodes[0].saved[0] == x && g.sim.nodes[0].saved[1] == y);
        uint64_t before = g.ledger.raw.total + 256; /* and the seed */
        backward_from(&g, y);
        CHECK_EQ_U64(g.ledger.raw.peak - before, device == VP_DEVICE_CPU ? 576768 : 576512);
        CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
        vp_drop(&g.sim, vp_at(&g.sim, x)->param_grad);
        vp_drop(&g.sim, x);
        vp_drop(&g.sim, y);
        graph_free(&g);
    }
}

/* acc.index_add(0, index, src) out of place, acc [48, 256] fp32 (49,152
 * B), src [100, 256] (102,400 B), a 100-element int64 index: a new tensor
 * like acc; IndexAddBackward0 keeps the index and src (1.13's grad_fn:
 * _saved_index [100], _saved_source [100, 256]); backward passes acc's
 * gradient on and gives src one of its size. */
static void test_index_added(void) {
    graph g;
    graph_init(&g, false);
    vp_t acc = grad_input(&g, 48 * 256, VP_FP32), src = grad_input(&g, 100 * 256, VP_FP32);
    vp_t index = vp_new(&g.sim, 100, VP_INT64, "index");
    uint64_t before = g.ledger.raw.total;
    vp_t y = vp_index_added(&g.sim, acc, src, index, "index_add");
    CHECK_EQ_U64(g.ledger.raw.total - before, 49152);
    CHECK(g.sim.nodes[0].saved[0] == index && g.sim.nodes[0].saved[1] == src);
    vp_drop(&g.sim, index); /* the node keeps it */
    before = g.ledger.raw.total + 49152; /* and the seed */
    backward_from(&g, y);
    CHECK_EQ_U64(g.ledger.raw.peak - before, 102400); /* src's gradient; acc's is the seed itself */
    vp_drop(&g.sim, vp_at(&g.sim, acc)->param_grad);
    vp_drop(&g.sim, vp_at(&g.sim, src)->param_grad);
    vp_drop(&g.sim, acc);
    vp_drop(&g.sim, src);
    vp_drop(&g.sim, y);
    graph_free(&g);
}

/* Bytes the backward allocated: every positive raw delta once the
 * ledger's place says backward (a stolen gradient's move between
 * categories is no allocation). */
static uint64_t backward_allocations(const graph *g) {
    uint64_t sum = 0;
    for (unsigned i = 0; i < g->ledger.n_events; i++) {
        const vp_event *e = &g->ledger.events[i];
        if (e->place.phase == VP_PHASE_BACKWARD && e->raw_delta > 0 && e->tensor != VP_EVENT_MOVE)
            sum += (uint64_t)e->raw_delta;
    }
    return sum;
}

/* torch.compile's fusion in backward (docs/compile.md): in a compiled
 * region, the gradient element-wise nodes pass one another stays in the
 * fused kernel; it is written where it leaves the chain, here for the
 * matmul's node. x[4,8] -> linear (w[16,8], fp32) -> y[4,16] -> * c -> z
 * -> * c -> out: eagerly backward allocates z's gradient (256 B), y's (256)
 * and w's (512); compiled, z's stays in registers. */
static void test_compiled_region_fuses_backward(void) {
    uint64_t allocated[2];
    for (int compiled = 0; compiled < 2; compiled++) {
        graph g;
        graph_init(&g, true);
        vp_t w = vp_leaf(&g.sim, 16 * 8, VP_FP32, VP_CAT_PARAMS, true, "w");
        vp_t x = vp_new(&g.sim, 4 * 8, VP_FP32, "x");
        uint32_t first_node = g.sim.n_nodes;
        vp_t first_tensor = g.sim.n_tensors;
        vp_t y = vp_linear(&g.sim, x, w, 0, 4, 16, false, "linear");
        vp_t z = vp_scale(&g.sim, y, "z");
        vp_t out = vp_scale(&g.sim, z, "out");
        if (compiled) CHECK(vp_compile_region(&g.sim, first_node, g.sim.n_nodes, first_tensor));
        vp_drop(&g.sim, x);
        vp_drop(&g.sim, y);
        vp_drop(&g.sim, z);
        backward_from(&g, out);
        allocated[compiled] = backward_allocations(&g);
        /* nothing is left behind: the phantoms were never charged, so
         * never released either; w's gradient is its .grad */
        CHECK_EQ_U64(live(&g, VP_CAT_TRANSIENT), 0);
        CHECK_EQ_U64(live(&g, VP_CAT_GRADS), 512);
        vp_drop(&g.sim, out);
        graph_free(&g);
    }
    CHECK_EQ_U64(allocated[0], 256 + 256 + 512);
    CHECK_EQ_U64(allocated[1], 256 + 512);
}

int main(void) {
    test_linear_saves();
    test_linear_backward();
    test_accumulate_grad_tied();
    test_accumulate_grad_waits_for_every_edge();
    test_accumulate_grad_across_ranges();
    test_dropout();
    test_layer_norm();
    test_to();
    test_mul_broadcast();
    test_mul_broadcast_offloaded();
    test_unpack_for_streams();
    test_trl_storage_keys();
    test_trl_views();
    test_gaps_pack();
    test_permuted_pack();
    test_gather_and_index_pair_pack_each_save();
    test_pack_through_contiguous();
    test_accumulate_modes();
    test_add_inplace();
    test_sub();
    test_embedding();
    test_backward_frees_activations();
    test_copy_slice();
    test_conv1d_depthwise();
    test_cumsum_masked_fill_clamp();
    test_amax();
    test_index_added();
    test_compiled_region_fuses_backward();
    return check_summary("test_prims");
}
