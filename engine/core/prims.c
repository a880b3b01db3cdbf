/* prims.c — forward behaviour and backward rules of PyTorch's primitive ops.
 * The formulas referred to are those of tools/autograd/derivatives.yaml in
 * PyTorch 2.x; "saves" means the generated node holds a SavedVariable. */
#include "prims.h"

#include <stdlib.h>
#include <string.h>

static vp_dtype dtype_of(vp_sim *sim, vp_t t) { return (vp_dtype)vp_at(sim, t)->dtype; }
static uint64_t numel_of(vp_sim *sim, vp_t t) { return vp_at(sim, t)->numel; }
static bool wants_grad(vp_sim *sim, vp_t t) { return t && vp_at(sim, t)->requires_grad; }

/* Give the gradient `g` to input i, passing it through when it already has
 * the input's size and dtype, else reducing (sum_to_size for broadcasting)
 * then casting, each into a new tensor: what validate_outputs does after
 * the rule (torch/csrc/autograd/engine.cpp: reduce_grad first, then
 * grad.to(the input's dtype), so a broadcast operand of another dtype
 * has its reduced gradient in the rule's dtype beside the cast one).
 * Consumes one reference to g. */
static void give_fitted(vp_sim *sim, uint32_t index, unsigned i, vp_t g) {
    vp_drop_handed(sim, index);
    vp_node *node = vp_node_at(sim, index);
    vp_t input = node->in[i];
    const vp_tensor *x = vp_at(sim, input);
    const vp_tensor *gx = vp_at(sim, g);
    bool reduce = gx->numel != x->numel, cast = gx->dtype != x->grad_dtype;
    if (reduce && cast) {
        vp_t reduced = vp_grad_sized(sim, x->numel, (vp_dtype)gx->dtype, node->label);
        vp_drop(sim, g);
        g = reduced;
    }
    if (reduce || cast) {
        vp_t fitted = vp_grad_like(sim, input, vp_node_at(sim, index)->label);
        vp_drop(sim, g);
        g = fitted;
    }
    vp_give_grad(sim, vp_node_at(sim, index), i, g);
}

/* Rules whose every needed input gets a fresh gradient of its own size. */
static void backward_fresh(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
        node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        vp_t g = vp_grad_like(sim, node->in[i], node->label);
        vp_give_grad(sim, vp_node_at(sim, index), i, g);
    }
}

/* Rules that hand the incoming gradient through (add, views, clone). */
static void backward_pass(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
        node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        vp_hold(sim, g);
        give_fitted(sim, index, i, g);
    }
}

/* mul.Tensor: self: grad * other, other: grad * self. Both products are
 * output-sized; broadcast inputs are reduced afterwards by validate_outputs,
 * so both full products exist together first. */
static void backward_mul(vp_sim *sim, uint32_t index) {
    vp_t full[VP_NODE_MAX_IN] = {0};
    vp_node *node = vp_node_at(sim, index);
    vp_t out = node->out[0];
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) full[i] = vp_grad_like(sim, out, node->label);
    }
    for (unsigned i = 0; i < 2; i++)
        if (full[i]) give_fitted(sim, index, i, full[i]);
}

/* sub.Tensor (alpha 1): self: grad, passed on; other: -grad, an
 * output-sized tensor of its own (reduced afterwards where other was
 * broadcast). */
static void backward_sub(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    vp_t negated = vp_needs_grad(sim, node, 1) ? vp_grad_like(sim, node->out[0], node->label) : 0;
    if (vp_needs_grad(sim, vp_node_at(sim, index), 0)) {
        vp_hold(sim, g);
        give_fitted(sim, index, 0, g);
    }
    if (negated) give_fitted(sim, index, 1, negated);
}

/* Unary ops: `aux` temporaries of the input's size live until the end of
 * the C++ expression that builds the gradient (pow_backward builds
 * grad * (exponent * self.pow(exponent - 1)): two temporaries). */
static void backward_unary(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t input = node->in[0];
    vp_t temps[4] = {0};
    unsigned n = node->aux[0] < 4 ? (unsigned)node->aux[0] : 4;
    for (unsigned i = 0; i < n; i++) temps[i] = vp_grad_like(sim, input, node->label);
    vp_t g = vp_grad_like(sim, input, node->label);
    for (unsigned i = 0; i < n; i++) vp_drop(sim, temps[i]);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

/* SplitBackward: one gradient for the whole input, the parts copied in. */
static void backward_split(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_like(sim, node->in[0], node->label);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

/* CatBackward (cat_tensors_backward): each input gets a narrow() view of
 * the gradient, converted to the input's dtype (a copy) where the cat
 * promoted it. */
static void backward_cat(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        vp_t input = node->in[i];
        vp_t part = vp_at(sim, input)->grad_dtype == dtype_of(sim, g) ? vp_view(sim, g, numel_of(sim, input), node->label)
                                                                      : vp_grad_like(sim, input, node->label);
        vp_give_grad(sim, vp_node_at(sim, index), i, part);
    }
}

/* embedding_dense_backward on CUDA (aten/src/ATen/native/cuda/Embedding.cu and
 * EmbeddingBackwardKernel.cu): indices are sorted into two int64 copies, four
 * more int64 index arrays of at most one entry per index describe segments,
 * and grad_weight_per_segment holds an fp32 (acc_type) row per partial
 * segment, at most one per index; then the zero-filled dense gradient. The
 * feature kernel used for up to 3072 indices needs none of that. */
static void backward_embedding(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t rows = node->aux[0];
    uint64_t dim = numel_of(sim, node->out[0]) / (rows ? rows : 1);
    bool cuda_sort_path = node->aux_dtype == VP_DEVICE_CUDA && rows > 3072;
    vp_t work = 0;
    if (cuda_sort_path) {
        uint64_t words = vp_numel(sim, rows, 6);
        work = vp_grad_sized(sim, vp_numel(sim, rows, dim) + words * 2, VP_FP32, "embedding.backward workspace");
    }
    vp_t g = vp_grad_like(sim, node->in[0], node->label);
    vp_drop(sim, work);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

/* AddmmBackward0: mat1's and mat2's gradients are products; self's (the
 * bias, which addmm broadcasts) is the incoming gradient itself, summed to
 * the bias's shape by validate_outputs once the rule has returned (and
 * what its unpacking handed it has gone). */
static void backward_linear(vp_sim *sim, uint32_t index) {
    for (unsigned i = 0; i < 2; i++) {
        vp_node *node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) vp_give_grad(sim, node, i, vp_grad_like(sim, node->in[i], node->label));
    }
    vp_node *node = vp_node_at(sim, index);
    if (!vp_needs_grad(sim, node, 2)) return;
    vp_t g = vp_grad_out(sim, node, 0);
    vp_hold(sim, g);
    give_fitted(sim, index, 2, g);
}

vp_t vp_linear(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, uint64_t out_features, bool conv1d,
               const char *label) {
    /* F.linear without a bias is aten.mm (matmul folds the batch into
     * rows), as is x @ w of a weight taken as it is (GPT-OSS's experts,
     * DoRA's F.linear over a Conv1D's weight transposed back); with a
     * bias (Conv1D's torch.addmm has one), addmm */
    vp_aten_op op = b ? VP_ATEN_ADDMM : VP_ATEN_MM;
    vp_t in[3] = {x, w, b};
    vp_node *node = vp_record(sim, backward_linear, label, in, 3, NULL, 0);
    if (node) {
        /* mat1's gradient needs mat2 and mat2's needs mat1; AddmmBackward0
         * saves mat2 first, MmBackward0 self (as the hooks see them), both
         * before the product is made (vp_record_output) */
        bool input_first = op == VP_ATEN_MM;
        if (input_first && wants_grad(sim, w)) vp_save(sim, node, x);
        if (wants_grad(sim, x)) vp_save_view(sim, node, w, !conv1d); /* a Linear's weight.t() */
        if (!input_first && wants_grad(sim, w)) vp_save(sim, node, x);
    }
    vp_t y = vp_sac_new(sim, op, vp_numel(sim, rows, out_features), dtype_of(sim, x), label);
    vp_record_output(sim, node, 0, y);
    return y;
}

/* MatMul4Bit's backward: grad_A = grad @ dequantize_4bit(W).t(), the
 * dequantized weight (and its block scales) a transient again. */
static void backward_4bit(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    if (!vp_needs_grad(sim, node, 0)) return;
    uint64_t weight_numel = vp_at(sim, (vp_t)node->aux[0])->numel, absmax_numel = node->aux[1];
    vp_t absmax = absmax_numel ? vp_grad_sized(sim, absmax_numel, VP_FP32, "dequantize_4bit.absmax") : 0;
    vp_t dequantized = vp_grad_sized(sim, weight_numel, (vp_dtype)vp_at(sim, node->out[0])->dtype, "dequantize_4bit");
    vp_drop(sim, absmax);
    vp_t g = vp_grad_like(sim, vp_node_at(sim, index)->in[0], vp_node_at(sim, index)->label);
    vp_drop(sim, dequantized);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_linear_4bit(vp_sim *sim, vp_t x, vp_t w, uint64_t absmax_numel, uint64_t rows, uint64_t out_features,
                    const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    vp_t absmax = absmax_numel ? vp_new(sim, absmax_numel, VP_FP32, "dequantize_4bit.absmax") : 0;
    vp_t dequantized = vp_new(sim, numel_of(sim, w), dt, "dequantize_4bit");
    vp_drop(sim, absmax);
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dt, label);
    vp_drop(sim, dequantized);
    vp_t in[2] = {x, 0}; /* the frozen packed weight gets no gradient */
    vp_node *node = vp_record(sim, backward_4bit, label, in, 2, &y, 1);
    if (node) {
        node->aux[0] = w; /* ctx.tensors = (None, B): the packed weight, a parameter */
        node->aux[1] = absmax_numel;
    }
    return y;
}

/* MatMul8bitLt.backward: CB = state.CB.to(dtype_A, copy=True).mul_(
 * state.SCB.unsqueeze(1).mul(1.0 / 127.0)) (the scaled row scales gone
 * once multiplied in); grad_A = torch.matmul(grad_output.to(dtype_A), CB):
 * the dequantized weight alive while x's gradient is made. */
static void backward_int8(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    if (!vp_needs_grad(sim, node, 0)) return;
    vp_dtype dt = dtype_of(sim, node->in[0]);
    uint64_t weight_numel = vp_at(sim, (vp_t)node->aux[0])->numel, out_features = node->aux[1];
    vp_t dequantized = vp_grad_sized(sim, weight_numel, dt, "int8.dequantize");
    vp_t scales = vp_grad_sized(sim, out_features, VP_FP32, "int8.dequantize");
    vp_drop(sim, scales);
    vp_t grad_out = vp_grad_out(sim, node, 0);
    vp_t cast = dtype_of(sim, grad_out) == dt ? 0 : vp_grad_sized(sim, numel_of(sim, grad_out), dt, "int8.grad_cast");
    vp_t g = vp_grad_like(sim, vp_node_at(sim, index)->in[0], vp_node_at(sim, index)->label);
    vp_drop(sim, cast);
    vp_drop(sim, dequantized);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_linear_int8(vp_sim *sim, vp_t x, vp_t w, bool outlier_search, uint64_t rows, uint64_t out_features,
                    const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    uint64_t in = numel_of(sim, w) / (out_features ? out_features : 1);
    /* int8_vectorwise_quant(A.to(torch.float16), threshold): the row scales
     * and the int8 rows; a threshold above 0 (transformers' default 6.0)
     * looks for outliers with A.abs() >= threshold, an fp16 and a bool
     * tensor of A's size (none found: outliers are data-dependent and left
     * out) */
    vp_t half = dt == VP_FP16 ? 0 : vp_new(sim, numel_of(sim, x), VP_FP16, "int8.cast_input");
    vp_t row_scales = vp_new(sim, rows, VP_FP32, "int8.quantize_input");
    vp_t quantized = vp_new(sim, vp_numel(sim, rows, in), VP_INT8, "int8.quantize_input");
    vp_t magnitude = outlier_search ? vp_new(sim, vp_numel(sim, rows, in), VP_FP16, "int8.outliers") : 0;
    vp_t outliers = outlier_search ? vp_new(sim, vp_numel(sim, rows, in), VP_BOOL, "int8.outliers") : 0;
    vp_drop(sim, magnitude);
    vp_drop(sim, outliers);
    vp_drop(sim, half);
    /* int8_scaled_mm: int8_linear_matmul's int32 product, int8_mm_dequant's
     * fp16 output (the bias fused), cast to x's dtype */
    vp_t product = vp_new(sim, vp_numel(sim, rows, out_features), VP_INT32, "int8.matmul");
    vp_t dequantized = dt == VP_FP16 ? 0 : vp_new(sim, vp_numel(sim, rows, out_features), VP_FP16, "int8.matmul");
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dt, label);
    vp_drop(sim, dequantized);
    vp_drop(sim, product);
    vp_drop(sim, row_scales);
    vp_drop(sim, quantized);
    vp_t in_[2] = {x, 0}; /* the frozen int8 weight gets no gradient */
    vp_node *node = vp_record(sim, backward_int8, label, in_, 2, &y, 1);
    if (node) { /* x is kept by the caller: ctx.tensors, not a saved tensor */
        node->aux[0] = w;
        node->aux[1] = out_features;
    }
    return y;
}

/* Linear's FP8 backward: grad_output quantized rowwise and columnwise
 * (E5M2 under the HYBRID format) for the dgrad and wgrad GEMMs, alive
 * while they run; the gradients come out in the inputs' dtypes. */
static void backward_fp8(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t quantized = vp_grad_sized(sim, 2 * vp_at(sim, node->out[0])->numel, VP_FP8_E5M2, "fp8 grad_output");
    vp_t grads[3] = {0};
    for (unsigned i = 0; i < 3; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) grads[i] = vp_grad_like(sim, node->in[i], node->label);
    }
    vp_drop(sim, quantized);
    for (unsigned i = 0; i < 3; i++)
        if (grads[i]) vp_give_grad(sim, vp_node_at(sim, index), i, grads[i]);
}

vp_t vp_linear_fp8(vp_sim *sim, vp_t x, vp_t columnwise, vp_t w, vp_t b, uint64_t rows, uint64_t out_features,
                   const char *label) {
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dtype_of(sim, x), label);
    vp_t in[3] = {x, w, b};
    vp_node *node = vp_record(sim, backward_fp8, label, in, 3, &y, 1);
    if (node) {
        node->late_saves = true; /* Transformer Engine's _Linear, an autograd.Function */
        if (wants_grad(sim, w)) vp_save(sim, node, columnwise);
        if (wants_grad(sim, x)) vp_save(sim, node, w);
    }
    return y;
}

/* torchao 0.19's hp_tensor_to_float8_dynamic, eager (float8_utils.py
 * tensor_to_amax, amax_to_scale; float8_training_tensor.py
 * _ToFloat8ConstrFunc.forward; to_fp8_saturated): the amax of |x| (one,
 * or `scales` of them along an axis: torch.amax(..., keepdim=True)), turned
 * into fp32 scales, then x.to(float32) * scale, clamped, cast to float8
 * (one byte an element). The fp32 copies go when their functions return;
 * the data and its scales stay with the caller (*scale). `make` is vp_new
 * in the forward, vp_grad_sized in backward. Left out: the float64 copies
 * of the amax amax_to_scale makes on the way, and the rowwise recipes'
 * power-of-2 rounding of the scales (exp2(floor(log2(scale)))), all of the
 * scales' size and gone before the fp32 copies are made. `fused`: inside
 * a compiled region, where Inductor makes the cast an amax reduction
 * (|x| fused into it) and one pointwise kernel from x to the 1-byte data
 * (docs/compile.md): none of the full-size copies. */
/* The amax: in the forward, tensorwise, torch.max(torch.abs(x)) is
 * aten.max.default, whose 0-dim output torchtitan's op-selective policy
 * saves (sac_policy.c); rowwise it is torch.amax (aten.amax), and in
 * backward no policy applies. */
static vp_t make_amax(vp_sim *sim, vp_t (*make)(vp_sim *, uint64_t, vp_dtype, const char *), uint64_t scales,
                      vp_dtype dt) {
    if (make == vp_new && scales == 1) return vp_sac_new(sim, VP_ATEN_MAX, scales, dt, "float8.amax");
    return make(sim, scales, dt, "float8.amax");
}

static vp_t cast_float8(vp_sim *sim, vp_t (*make)(vp_sim *, uint64_t, vp_dtype, const char *), vp_t x,
                        uint64_t scales, bool fused, vp_t *scale) {
    uint64_t n = numel_of(sim, x);
    vp_dtype dt = dtype_of(sim, x);
    if (fused) {
        vp_t amax = make_amax(sim, make, scales, dt);
        *scale = make(sim, scales, VP_FP32, "float8.scale");
        vp_drop(sim, amax);
        return make(sim, n, VP_FP8_E4M3, "float8.data");
    }
    vp_t magnitude = make(sim, n, dt, "float8.abs");
    vp_t amax = make_amax(sim, make, scales, dt);
    vp_drop(sim, magnitude);
    *scale = make(sim, scales, VP_FP32, "float8.scale");
    vp_drop(sim, amax);
    vp_t upcast = dt == VP_FP32 ? 0 : make(sim, n, VP_FP32, "float8.upcast");
    vp_t scaled = make(sim, n, VP_FP32, "float8.scaled");
    vp_drop(sim, upcast);
    vp_t clamped = make(sim, n, VP_FP32, "float8.clamp");
    /* e4m3 or e5m2: one byte either way */
    vp_t data = make(sim, n, VP_FP8_E4M3, "float8.data");
    vp_drop(sim, clamped);
    vp_drop(sim, scaled);
    return data;
}

static void drop_float8(vp_sim *sim, vp_t data, vp_t scale) {
    vp_drop(sim, data);
    vp_drop(sim, scale);
}

/* One float8 GEMM's operands as float8_ops.py's preprocess_addmm finds
 * them: how many elements a layout copy makes of each (0: none), and the
 * number of scales each carries (1: tensorwise). */
typedef struct {
    uint64_t a_copy, b_copy, a_scales, b_scales;
} float8_operands;

/* torchao 0.19 float8_ops.py float8_mm -> preprocess_addmm ->
 * addmm_float8_unwrapped: an operand `a` not row-major is made contiguous,
 * an operand `b` that is row-major is made column-major (b.t().contiguous()
 * .t()), both one-byte copies; a tensorwise scale beside a rowwise one is
 * repeated to a row (scale.repeat); the scales' reciprocals; with rowwise
 * scales and no fast accumulation (the grad_input and grad_weight GEMMs:
 * Float8LinearConfig's gemm_config_*) the outer product of the two
 * reciprocals, an fp32 [m, n], scales torch._scaled_mm's output in place
 * afterwards (`output *= post_inverse_scale`: on the CPU TensorIterator
 * casts the 16-bit output to the common dtype, fp32, and computes into an
 * fp32 temporary it copies back, TensorIteratorBase::compute_types; CUDA's
 * kernels cast as they go). The output is in the inputs' high-precision
 * dtype. Everything but the output goes when float8_mm returns. `seen_as`:
 * the op a selective checkpoint's policy sees make the output (VP_ATEN_OTHER:
 * none, the output made by `make`). */
static vp_t scaled_mm(vp_sim *sim, vp_t (*make)(vp_sim *, uint64_t, vp_dtype, const char *), vp_aten_op seen_as,
                      float8_operands op, bool fast_accum, bool cuda, uint64_t m, uint64_t n, vp_dtype out_dtype, const char *label) {
    vp_t a = op.a_copy ? make(sim, op.a_copy, VP_FP8_E4M3, "float8.mm a contiguous") : 0;
    vp_t b = op.b_copy ? make(sim, op.b_copy, VP_FP8_E4M3, "float8.mm b column-major") : 0;
    bool rowwise = op.a_scales > 1 || op.b_scales > 1;
    uint64_t a_scales = op.a_scales, b_scales = op.b_scales;
    vp_t repeated = 0;
    if (rowwise && a_scales == 1) repeated = make(sim, a_scales = m, VP_FP32, "float8.mm scale repeat");
    if (rowwise && b_scales == 1) repeated = make(sim, b_scales = n, VP_FP32, "float8.mm scale repeat");
    vp_t a_inverse = make(sim, a_scales, VP_FP32, "float8.mm scale_a");
    vp_t b_inverse = make(sim, b_scales, VP_FP32, "float8.mm scale_b");
    vp_t post = 0;
    if (rowwise && !fast_accum) { /* a_inverse * b_inverse, then new_ones(()) for both */
        post = make(sim, vp_numel(sim, m, n), VP_FP32, "float8.mm post scale");
        vp_drop(sim, a_inverse);
        vp_drop(sim, b_inverse);
        a_inverse = make(sim, 1, VP_FP32, "float8.mm scale_a");
        b_inverse = make(sim, 1, VP_FP32, "float8.mm scale_b");
    }
    vp_t y = seen_as == VP_ATEN_OTHER ? make(sim, vp_numel(sim, m, n), out_dtype, label)
                                      : vp_sac_new(sim, seen_as, vp_numel(sim, m, n), out_dtype, label);
    if (post && !cuda && out_dtype != VP_FP32) {
        vp_t cast = make(sim, vp_numel(sim, m, n), VP_FP32, "float8.mm post scale (CPU cast)");
        vp_t result = make(sim, vp_numel(sim, m, n), VP_FP32, "float8.mm post scale (CPU result)");
        vp_drop(sim, result);
        vp_drop(sim, cast);
    }
    vp_drop(sim, post);
    vp_drop(sim, b_inverse);
    vp_drop(sim, a_inverse);
    vp_drop(sim, repeated);
    vp_drop(sim, b);
    vp_drop(sim, a);
    return y;
}

/* matmul_with_hp_or_float8_args.backward (torchao 0.19): grad_output and
 * the weight cast for grad_input (the weight's transpose row-major: a
 * column-major copy), then grad_output and the input cast again for
 * grad_weight (grad_output.t() made contiguous, the input made
 * column-major), every cast a local until the function returns; under
 * rowwise_with_gw_hp grad_weight is a plain 16-bit torch.mm of the saved
 * tensors and the weight is scaled per tensor. Both gradients are computed
 * whichever inputs need them. */
static void backward_float8(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t x = node->in[0], w = node->in[1], out = node->out[0];
    uint64_t n_out = numel_of(sim, out), n_x = numel_of(sim, x), n_w = numel_of(sim, w);
    uint64_t out_features = node->aux[2], rows = n_out / out_features, in = n_w / out_features;
    bool w_float8 = node->aux[0], cuda = node->aux[3], fused = node->aux[4];
    vp_float8_recipe recipe = (vp_float8_recipe)node->aux[1];
    bool rowwise = recipe != VP_FLOAT8_TENSORWISE;
    vp_dtype dt = dtype_of(sim, out);
    vp_t go = vp_grad_out(sim, node, 0);
    vp_t s[4] = {0};
    /* grad_input = grad_output [rows, out] @ weight_t.t() [out, in]; the
     * casts axiswise along -1 (rowwise): a scale per row of each */
    /* a gradient already float8 (NoopFwToFloat8BwDynamic: the float8 TP
     * styles) and an input saved in float8 are used as they are */
    bool go_float8 = dtype_of(sim, go) == VP_FP8_E4M3, x_float8 = dtype_of(sim, x) == VP_FP8_E4M3;
    vp_t go_dim0 = go_float8 ? 0 : cast_float8(sim, vp_grad_sized, go, rowwise ? rows : 1, fused, &s[0]);
    /* tensor_already_casted_to_fp8(weight_hp_t): the gathered float8 weight as it is */
    uint64_t w_scales = recipe == VP_FLOAT8_ROWWISE ? in : 1;
    vp_t w_dim0 = w_float8 ? 0 : cast_float8(sim, vp_grad_sized, w, w_scales, fused, &s[1]);
    float8_operands gi = {0, n_w, rowwise ? rows : 1, w_scales};
    vp_t grad_input = scaled_mm(sim, vp_grad_sized, VP_ATEN_OTHER, gi, false, cuda, rows, in, dt, "float8 grad_input");
    vp_t go_dim1 = 0, x_dim1 = 0, grad_weight;
    if (recipe == VP_FLOAT8_ROWWISE_GW_HP) { /* cast configs DISABLED: aten.mm of the 16-bit tensors */
        grad_weight = vp_grad_sized(sim, n_w, dt, "grad_weight");
    } else { /* grad_output.t() [out, rows] @ input [rows, in], the casts along 0 */
        go_dim1 = go_float8 ? 0 : cast_float8(sim, vp_grad_sized, go, rowwise ? out_features : 1, fused, &s[2]);
        x_dim1 = x_float8 ? 0 : cast_float8(sim, vp_grad_sized, x, rowwise ? in : 1, fused, &s[3]);
        float8_operands gw = {n_out, n_x, rowwise ? out_features : 1, rowwise ? in : 1};
        grad_weight = scaled_mm(sim, vp_grad_sized, VP_ATEN_OTHER, gw, false, cuda, out_features, in, dt, "float8 grad_weight");
    }
    drop_float8(sim, go_dim0, s[0]);
    drop_float8(sim, w_dim0, s[1]);
    drop_float8(sim, go_dim1, s[2]);
    drop_float8(sim, x_dim1, s[3]);
    vp_t grads[2] = {grad_input, grad_weight};
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) give_fitted(sim, index, i, grads[i]);
        else vp_drop(sim, grads[i]);
    }
}

vp_t vp_linear_float8(vp_sim *sim, vp_t x, vp_t w, bool w_float8, vp_float8_recipe recipe, bool cuda, uint64_t rows,
                      uint64_t out_features, const char *label) {
    bool rowwise = recipe != VP_FLOAT8_TENSORWISE;
    vp_t s[2] = {0};
    /* the input [rows, in] scaled along -1, the weight's transpose [in, out] along 0 */
    /* tensor_already_casted_to_fp8(input_hp): cast by a float8 TP style */
    bool x_float8 = dtype_of(sim, x) == VP_FP8_E4M3;
    vp_t x8 = x_float8 ? 0 : cast_float8(sim, vp_new, x, rowwise ? rows : 1, sim->fused_casts, &s[0]);
    vp_t w8 = w_float8 ? 0 : cast_float8(sim, vp_new, w, rowwise ? out_features : 1, sim->fused_casts, &s[1]);
    /* the input row-major, the weight's transpose column-major: no copies;
     * gemm_config_output uses fast accumulation. torch.mm on the float8
     * tensors: a selective checkpoint's policy sees aten.mm (its mode runs
     * above Float8TrainingTensor's dispatch, which calls _scaled_mm), so
     * the output is saved or recomputed as an mm's. A rerun that takes it
     * from the cache runs none of float8_mm; here it still makes the
     * scales' reciprocals (one element each, tensorwise; a row's and a
     * column's rowwise), as the rerun must retrace the forward's tensors */
    float8_operands op = {0, 0, rowwise ? rows : 1, rowwise ? out_features : 1};
    /* the output in the input's original dtype (a float8 input's gradient dtype) */
    vp_dtype hp = x_float8 ? (vp_dtype)vp_at(sim, x)->grad_dtype : dtype_of(sim, x);
    vp_t y = scaled_mm(sim, vp_new, VP_ATEN_MM, op, true, cuda, rows, out_features, hp, label);
    vp_at(sim, y)->aten = VP_ATEN_SCALED_MM;
    drop_float8(sim, x8, s[0]);
    drop_float8(sim, w8, s[1]);
    vp_t in[2] = {x, w};
    vp_node *node = vp_record(sim, backward_float8, label, in, 2, &y, 1);
    if (node) {
        node->late_saves = true; /* an autograd.Function: packed once forward has returned */
        node->aux[0] = w_float8;
        node->aux[1] = recipe;
        node->aux[2] = out_features;
        node->aux[3] = cuda;
        node->aux[4] = sim->fused_casts; /* its backward runs in the compiled backward */
        vp_save(sim, node, x);
        vp_save(sim, node, w);
    }
    return y;
}

/* DTensor's collectives go through torch.distributed._functional_collectives
 * (torch 2.6, all_gather_tensor and reduce_scatter_tensor): on sequence
 * parallelism's Shard(1), a dim other than 0, the gather is
 * all_gather_into_tensor followed by torch.cat(torch.chunk(out, tp), dim=1)
 * and the scatter torch.cat(torch.chunk(x, tp, dim=1)) followed by
 * reduce_scatter_tensor: a second full-size tensor beside the collective's
 * for a moment (the collective's output until the cat has copied it; the
 * cat's copy of the input until the reduce-scatter has read it). Inductor's
 * micro-pipeline TP (torch/_inductor/fx_passes/micro_pipeline_tp.py:
 * find_all_gather_patterns and find_reduce_scatter_patterns match exactly
 * these split + cat forms) replaces a gather and the matmuls that read it
 * by symm_mem.fused_all_gather_matmul, and a matmul and the reduce-scatter
 * of its output by fused_matmul_reduce_scatter
 * (torch/distributed/_symmetric_memory/__init__.py): the former writes the
 * gathered input into one new full tensor (ag_out / A_flat, returned for
 * the backward) and the outputs, the latter its partials into one new
 * tensor of the matmul output's size (stacked_partials) and reduces them
 * into the shard; no cat in either. Each asks the process group's
 * symmetric-memory workspace (get_symm_mem_workspace) for min_size bytes:
 * the shard gathered (_pipelined_all_gather_and_consume), or two chunks of
 * the output, 2 x the shard (_pipelined_produce_and_all2all); the largest
 * request is kept in sim->symm_mem_request. */
static void symm_mem_request(vp_sim *sim, vp_dtype dtype, uint64_t numel, unsigned times) {
    uint64_t bytes = vp_bytes_of(dtype, numel) * times;
    if (bytes > sim->symm_mem_request) sim->symm_mem_request = bytes;
}

/* The gathered tensor (a new one, the all-gather's kind for the policies)
 * with funcol's transient beside it, or the fused op's request. */
static vp_t funcol_gathered(vp_sim *sim, vp_t x, unsigned parts, unsigned funcol, const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    uint64_t n = vp_numel(sim, numel_of(sim, x), parts);
    vp_t raw = 0;
    if (funcol & VP_FUNCOL_FUSED_FORWARD) symm_mem_request(sim, dt, numel_of(sim, x), 1);
    else raw = vp_new(sim, n, dt, "all_gather_into_tensor (before its cat)");
    vp_t y = vp_sac_new(sim, VP_ATEN_ALL_GATHER, n, dt, label);
    vp_drop(sim, raw);
    return y;
}

/* The gather's backward: the incoming gradient (the sum over the linears
 * that read the gathered input) reduce-scattered into one like the input:
 * funcol's cat first, or, where one matmul alone produced it and the op is
 * fused, its stacked partials (which are the gradient here) and the request. */
static void backward_funcol_gather(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    bool fused = node->aux[0] & VP_FUNCOL_FUSED_BACKWARD;
    vp_t go = vp_grad_out(sim, node, 0);
    vp_t cat = go && !fused ? vp_grad_sized(sim, numel_of(sim, go), dtype_of(sim, go), "reduce_scatter.cat") : 0;
    node = vp_node_at(sim, index);
    vp_t g = vp_grad_like(sim, node->in[0], node->label);
    if (go && fused) symm_mem_request(sim, dtype_of(sim, g), numel_of(sim, g), 2);
    vp_drop(sim, cat);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_float8_input(vp_sim *sim, vp_t x, unsigned gather, unsigned funcol, const char *label) {
    vp_t scale;
    vp_t data = cast_float8(sim, vp_new, x, 1, sim->fused_casts, &scale);
    vp_drop(sim, scale);
    vp_t y = data;
    if (gather > 1) { /* funcol all_gather_into_tensor on the float8 data (allgather_fp8), then its cat */
        y = funcol_gathered(sim, data, gather, funcol, label);
        vp_drop(sim, data);
    }
    /* a Float8TrainingTensor reports its original dtype: its gradient is x's */
    vp_at(sim, y)->grad_dtype = vp_at(sim, x)->grad_dtype;
    /* _ToFloat8ConstrFunc.backward hands the gradient through; the
     * all-gather's backward reduce-scatters it into one like x */
    vp_node *node = vp_record(sim, gather > 1 ? backward_funcol_gather : backward_pass, label, &x, 1, &y, 1);
    if (node) node->aux[0] = funcol;
    return y;
}

/* NoopFwToFloat8BwDynamic.backward: tensor_to_scale(gradY) and
 * hp_tensor_and_scale_to_float8 (e5m2), the float8 gradient handed on as
 * it is (its dtype float8, not the output's). */
static void backward_float8_grad(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t go = vp_grad_out(sim, node, 0);
    if (!go || dtype_of(sim, go) == VP_FP8_E4M3) { /* tensor_already_casted_to_fp8 */
        if (go) vp_hold(sim, go);
        vp_give_grad(sim, vp_node_at(sim, index), 0, go);
        return;
    }
    vp_t scale;
    vp_t data = cast_float8(sim, vp_grad_sized, go, 1, node->aux[0], &scale);
    vp_drop(sim, scale);
    vp_give_grad(sim, vp_node_at(sim, index), 0, data);
}

vp_t vp_float8_grad(vp_sim *sim, vp_t y, const char *label) {
    vp_t out = vp_view(sim, y, numel_of(sim, y), label);
    vp_node *node = vp_record(sim, backward_float8_grad, label, &y, 1, &out, 1);
    if (node) node->aux[0] = sim->fused_casts;
    return out;
}

vp_t vp_matmul_views(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, bool a_strided, bool b_strided,
                     const char *label) {
    vp_t y = vp_sac_new(sim, VP_ATEN_BMM, out_numel, dtype_of(sim, a), label);
    vp_t in[2] = {a, b};
    vp_node *node = vp_record(sim, backward_fresh, label, in, 2, &y, 1);
    if (node) {
        if (wants_grad(sim, b)) vp_save_view(sim, node, a, a_strided);
        if (wants_grad(sim, a)) vp_save_view(sim, node, b, b_strided);
    }
    return y;
}

vp_t vp_matmul(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, bool b_transposed, const char *label) {
    return vp_matmul_views(sim, a, b, out_numel, false, b_transposed, label);
}

/* An elementwise op of two tensors that saves nothing: a new tensor in the
 * promoted dtype. */
static vp_t binary_unsaved(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, vp_backward_fn backward,
                           const char *label) {
    vp_dtype dt = vp_dtype_promote(dtype_of(sim, a), dtype_of(sim, b));
    vp_t y = vp_new(sim, out_numel, dt, label);
    vp_keep_layout(sim, y, a, b);
    vp_t in[2] = {a, b};
    vp_record(sim, backward, label, in, 2, &y, 1);
    return y;
}

vp_t vp_add(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label) {
    return binary_unsaved(sim, a, b, out_numel, backward_pass, label);
}

vp_t vp_sub(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label) {
    return binary_unsaved(sim, a, b, out_numel, backward_sub, label);
}

vp_t vp_add_(vp_sim *sim, vp_t a, vp_t b, const char *label) {
    vp_t y = vp_view(sim, a, numel_of(sim, a), label);
    vp_t in[2] = {a, b};
    vp_record(sim, backward_pass, label, in, 2, &y, 1);
    return y;
}

vp_t vp_mul(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label) {
    return vp_mul_as(sim, a, b, out_numel, vp_dtype_promote(dtype_of(sim, a), dtype_of(sim, b)), label);
}

vp_t vp_mul_as(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, vp_dtype dt, const char *label) {
    vp_t in[2] = {a, b};
    vp_node *node = vp_record(sim, backward_mul, label, in, 2, NULL, 0);
    /* MulBackward0 saves self, then other (the order the hooks see them),
     * before the product is made: what a pack hook lets go of (an
     * OffloadActivations stash's old entries) goes first */
    if (node) {
        if (wants_grad(sim, b)) vp_save(sim, node, a);
        if (wants_grad(sim, a)) vp_save(sim, node, b);
    }
    vp_t y = vp_new(sim, out_numel, dt, label);
    vp_keep_layout(sim, y, a, b);
    vp_record_output(sim, node, 0, y);
    return y;
}

static vp_t mul_in_place(vp_sim *sim, vp_t a, vp_t b, vp_backward_fn backward, const char *label) {
    bool clones = sim->grad_mode && wants_grad(sim, b);
    vp_t original = clones ? vp_new(sim, numel_of(sim, a), dtype_of(sim, a), label) : 0;
    vp_t y = vp_view(sim, a, numel_of(sim, a), label);
    vp_t in[2] = {a, b};
    vp_node *node = vp_record(sim, backward, label, in, 2, &y, 1);
    if (node) { /* self's original first, then other */
        if (original) vp_save(sim, node, original);
        if (wants_grad(sim, a)) vp_save(sim, node, b);
    }
    vp_drop(sim, original);
    return y;
}

vp_t vp_mul_(vp_sim *sim, vp_t a, vp_t b, const char *label) { return mul_in_place(sim, a, b, backward_mul, label); }

static void backward_mul_slices(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    const char *label = node->label;
    uint64_t n = numel_of(sim, node->out[0]);
    vp_dtype dtype = dtype_of(sim, vp_grad_out(sim, node, 0));
    bool base_grad = vp_needs_grad(sim, node, 0), other_grad = vp_needs_grad(sim, node, 1);
    vp_t result = vp_grad_sized(sim, n, dtype, label);
    vp_t clone = vp_grad_sized(sim, n, dtype, label);
    vp_t own = base_grad ? vp_grad_sized(sim, n, dtype, label) : 0;  /* MulBackward0's grad * other */
    vp_t full = other_grad ? vp_grad_sized(sim, n, dtype, label) : 0; /* and grad * original self */
    vp_drop(sim, clone);
    vp_drop(sim, own); /* copied into result's view part */
    if (base_grad) vp_give_grad(sim, vp_node_at(sim, index), 0, result);
    else vp_drop(sim, result);
    if (full) give_fitted(sim, index, 1, full);
}

vp_t vp_mul_view_(vp_sim *sim, vp_t a, vp_t b, const char *label) {
    return mul_in_place(sim, a, b, backward_mul_slices, label);
}

/* `in_place`: a /= number, a new version of a's storage (div_ on the
 * wrapped number: DivBackward0 all the same). */
static vp_t times_constant(vp_sim *sim, vp_t a, bool saves_scalar, bool in_place, const char *label) {
    /* MulBackward0 and DivBackward0 save the 0-dim `other` (a Python
     * number wrapped as a tensor before the op runs): no memory to count,
     * but a saved input a non-reentrant checkpoint holds, whose unpack
     * starts the rerun and whose pack can be its early stop. Left out where
     * save_on_cpu would pack it (a few host bytes). */
    bool wrapped = saves_scalar && (!sim->pack || sim->saving || sim->refilling);
    vp_t scalar = wrapped ? vp_new(sim, 0, VP_FP32, "wrapped_scalar") : 0;
    vp_t y = in_place ? vp_view(sim, a, numel_of(sim, a), label)
                      : vp_new(sim, numel_of(sim, a), dtype_of(sim, a), label);
    vp_keep_layout(sim, y, a, 0);
    vp_node *node = vp_record(sim, backward_unary, label, &a, 1, &y, 1);
    if (node) {
        node->aux[0] = 0;
        if (scalar) vp_save(sim, node, scalar);
        /* what save_on_cpu's hooks would get: kept where it is by
         * OffloadActivations (under 1 KiB), but one of the packs its stash
         * counts */
        else if (saves_scalar) vp_pack_kept(sim);
    }
    vp_drop(sim, scalar);
    return y;
}

vp_t vp_scale(vp_sim *sim, vp_t a, const char *label) { return times_constant(sim, a, true, false, label); }

vp_t vp_scale_(vp_sim *sim, vp_t a, const char *label) { return times_constant(sim, a, true, true, label); }

vp_t vp_neg(vp_sim *sim, vp_t a, const char *label) { return times_constant(sim, a, false, false, label); }

vp_t vp_softcap(vp_sim *sim, vp_t x, const char *label) {
    vp_t divided = vp_scale(sim, x, label);
    vp_drop(sim, x);
    vp_t capped = vp_unary(sim, divided, VP_SAVES_OUTPUT, 0, dtype_of(sim, divided), label);
    vp_drop(sim, divided);
    vp_t y = vp_scale(sim, capped, label);
    vp_drop(sim, capped);
    return y;
}

vp_t vp_shift(vp_sim *sim, vp_t a, vp_dtype out_dtype, uint64_t out_numel, const char *label) {
    vp_t y = vp_new(sim, out_numel, out_dtype, label);
    vp_record(sim, backward_pass, label, &a, 1, &y, 1);
    return y;
}

vp_t vp_unary(vp_sim *sim, vp_t a, vp_saves saves, unsigned backward_temps, vp_dtype out_dtype,
              const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, a), out_dtype, label);
    vp_keep_layout(sim, y, a, 0);
    vp_node *node = vp_record(sim, backward_unary, label, &a, 1, &y, 1);
    if (node) {
        node->aux[0] = backward_temps;
        vp_save(sim, node, saves == VP_SAVES_INPUT ? a : y);
    }
    return y;
}

vp_t vp_clamp(vp_sim *sim, vp_t x, vp_t min, vp_t max, const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) {
        /* clamp_backward_min_max: self >= min and self <= max, two bool
         * tensors (one input-sized 16-bit temporary's bytes), then
         * where(pred, grad, 0) */
        node->aux[0] = 1;
        vp_save(sim, node, x);
        vp_save(sim, node, min);
        vp_save(sim, node, max);
    }
    return y;
}

/* clamp_backward: with both bounds the two comparisons' bool tensors
 * (logical_and_ in place into the first) live until where() has made the
 * gradient; with one bound (aux[0] = 1) its one comparison does. */
static void backward_clamp_scalar(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t input = node->in[0];
    bool one_bound = node->aux[0] == 1;
    vp_t above = vp_new(sim, numel_of(sim, input), VP_BOOL, node->label);
    vp_t below = one_bound ? 0 : vp_new(sim, numel_of(sim, input), VP_BOOL, node->label);
    vp_t g = vp_grad_like(sim, input, node->label);
    vp_drop(sim, below);
    vp_drop(sim, above);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_clamp_bounds(vp_sim *sim, vp_t x, unsigned bounds, const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_clamp_scalar, label, &x, 1, &y, 1);
    if (node) {
        node->aux[0] = bounds;
        vp_save(sim, node, x);
    }
    return y;
}

vp_t vp_clamp_scalar(vp_sim *sim, vp_t x, const char *label) { return vp_clamp_bounds(sim, x, 2, label); }

vp_t vp_cumsum(vp_sim *sim, vp_t x, const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) node->aux[0] = 2; /* flip and cumsum, then the flipped result */
    return y;
}

/* conv_depthwise2d_backward, then the bias's sum: x's contiguous copy
 * lives while x's and w's gradients are made. */
static void backward_conv1d(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t input = node->in[0];
    vp_t copy = node->aux[0] ? vp_new(sim, numel_of(sim, input), dtype_of(sim, input), node->label) : 0;
    vp_t grads[3] = {0};
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) grads[i] = vp_grad_like(sim, node->in[i], node->label);
    }
    vp_drop(sim, copy);
    node = vp_node_at(sim, index);
    if (node->in[2] && vp_needs_grad(sim, node, 2)) grads[2] = vp_grad_like(sim, node->in[2], node->label);
    for (unsigned i = 0; i < 3; i++)
        if (grads[i]) give_fitted(sim, index, i, grads[i]);
}

vp_t vp_conv1d_depthwise(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t out_numel, bool strided, const char *label) {
    vp_t copy = strided ? vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label) : 0;
    vp_t y = vp_new(sim, out_numel, dtype_of(sim, x), label);
    vp_drop(sim, copy);
    vp_t in[3] = {x, w, b};
    vp_node *node = vp_record(sim, backward_conv1d, label, in, b ? 3 : 2, &y, 1);
    if (node) {
        node->aux[0] = strided;
        vp_save(sim, node, x);
        vp_save(sim, node, w);
    }
    return y;
}

/* SumBackward: grad.expand(self's sizes), a view of the incoming gradient. */
static void backward_expand(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    if (!vp_needs_grad(sim, node, 0)) return;
    vp_t g = vp_grad_out(sim, node, 0);
    vp_t expanded = vp_view(sim, g, numel_of(sim, node->in[0]), node->label);
    vp_give_grad(sim, vp_node_at(sim, index), 0, expanded);
}

vp_t vp_sum(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label) {
    vp_t y = vp_new(sim, out_numel, dtype_of(sim, a), label);
    vp_record(sim, backward_expand, label, &a, 1, &y, 1);
    return y;
}

/* SumBackward's expanded view, then ViewBackward's reshape of it
 * (grad.reshape(self's sizes): a copy, stride 0 cannot be viewed flat):
 * an input-sized gradient of its own while the incoming one is alive. */
static void backward_expand_reshaped(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    if (!vp_needs_grad(sim, node, 0)) return;
    vp_give_grad(sim, node, 0, vp_grad_like(sim, node->in[0], node->label));
}

vp_t vp_sum_of_view(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label) {
    vp_t y = vp_new(sim, out_numel, dtype_of(sim, a), label);
    vp_record(sim, backward_expand_reshaped, label, &a, 1, &y, 1);
    return y;
}

vp_t vp_reduce(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label) {
    vp_t y = vp_new(sim, out_numel, dtype_of(sim, a), label);
    vp_node *node = vp_record(sim, backward_unary, label, &a, 1, &y, 1);
    if (node) node->aux[0] = 0;
    return y;
}

vp_t vp_to(vp_sim *sim, vp_t x, vp_dtype dtype, const char *label) {
    if (dtype_of(sim, x) == dtype) { /* Tensor.to returns self */
        vp_hold(sim, x);
        return x;
    }
    vp_t y = vp_new(sim, numel_of(sim, x), dtype, label);
    vp_keep_layout(sim, y, x, 0); /* preserve_format */
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) node->aux[0] = 0; /* ToCopyBackward: grad.to(self's dtype) */
    return y;
}

vp_t vp_copy(vp_sim *sim, vp_t x, const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_record(sim, backward_pass, label, &x, 1, &y, 1);
    return y;
}

vp_t vp_contiguous(vp_sim *sim, vp_t x, bool viewable, const char *label) {
    if (!viewable) return vp_copy(sim, x, label);
    vp_hold(sim, x);
    return x;
}

vp_t vp_alias(vp_sim *sim, vp_t x, const char *label) {
    vp_t y = vp_view(sim, x, numel_of(sim, x), label);
    vp_record(sim, backward_pass, label, &x, 1, &y, 1);
    return y;
}

void vp_split(vp_sim *sim, vp_t x, unsigned parts, vp_t *out, const char *label) {
    uint64_t each = numel_of(sim, x) / parts;
    for (unsigned i = 0; i < parts; i++) {
        out[i] = vp_view(sim, x, each, label);
        if (out[i]) vp_at(sim, out[i])->offset += i * each; /* part i starts further into the storage */
    }
    vp_record(sim, backward_split, label, &x, 1, out, parts);
}

void vp_split_sizes(vp_sim *sim, vp_t x, unsigned parts, const uint64_t *numels, vp_t *out, const char *label) {
    uint64_t offset = 0;
    for (unsigned i = 0; i < parts; i++) {
        out[i] = vp_view(sim, x, numels[i], label);
        if (out[i]) vp_at(sim, out[i])->offset += offset;
        offset += numels[i];
    }
    vp_record(sim, backward_split, label, &x, 1, out, parts);
}

static void mark_gaps(vp_sim *sim, const vp_t *parts, unsigned n) {
    for (unsigned i = 0; i < n; i++)
        if (parts[i]) vp_at(sim, parts[i])->gaps = true;
}

void vp_split_columns(vp_sim *sim, vp_t x, unsigned parts, vp_t *out, const char *label) {
    vp_split(sim, x, parts, out, label);
    mark_gaps(sim, out, parts);
}

void vp_split_columns_sizes(vp_sim *sim, vp_t x, unsigned parts, const uint64_t *numels, vp_t *out, const char *label) {
    vp_split_sizes(sim, x, parts, numels, out, label);
    mark_gaps(sim, out, parts);
}

vp_t vp_slice_rows(vp_sim *sim, vp_t x, uint64_t numel, uint64_t start, const char *label) {
    vp_t y = vp_slice(sim, x, numel, label);
    if (y) vp_at(sim, y)->offset += start;
    return y;
}

vp_t vp_slice_columns(vp_sim *sim, vp_t x, uint64_t numel, uint64_t start, const char *label) {
    vp_t y = vp_slice_rows(sim, x, numel, start, label);
    mark_gaps(sim, &y, 1);
    return y;
}

vp_t vp_pad(vp_sim *sim, vp_t x, uint64_t numel, const char *label) {
    vp_t y = vp_new(sim, numel, dtype_of(sim, x), label);
    vp_record(sim, backward_fresh, label, &x, 1, &y, 1);
    return y;
}

vp_t vp_expand(vp_sim *sim, vp_t x, uint64_t numel, const char *label) {
    vp_t y = vp_view(sim, x, numel, label);
    vp_record(sim, backward_fresh, label, &x, 1, &y, 1);
    return y;
}

vp_t vp_slice(vp_sim *sim, vp_t x, uint64_t numel, const char *label) {
    vp_t y = vp_view(sim, x, numel, label);
    vp_record(sim, backward_split, label, &x, 1, &y, 1);
    return y;
}

vp_t vp_repeat(vp_sim *sim, vp_t x, unsigned times, const char *label) {
    vp_t y = vp_new(sim, vp_numel(sim, numel_of(sim, x), times), dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) node->aux[0] = 0;
    return y;
}

/* CatBackward of one node of vp_cat_many's tree: each input gets a view of
 * the node's output gradient (itself a view of the cat's). */
static void backward_cat_views(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    for (unsigned i = 0; i < VP_NODE_MAX_IN; i++) {
        node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        vp_t part = vp_view(sim, g, numel_of(sim, node->in[i]), node->label);
        vp_give_grad(sim, vp_node_at(sim, index), i, part);
    }
}

vp_t vp_cat_many(vp_sim *sim, const vp_t *parts, unsigned n, const char *label) {
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) total += numel_of(sim, parts[i]);
    vp_t y = vp_new(sim, total, dtype_of(sim, parts[0]), label);
    vp_t *level = malloc(n * sizeof *level);
    if (!level) {
        sim->status = VP_SIM_NOMEM;
        return y;
    }
    memcpy(level, parts, n * sizeof *level);
    bool views = false; /* whether level holds views of y this function owns */
    while (n > VP_NODE_MAX_IN) {
        unsigned groups = (n + VP_NODE_MAX_IN - 1) / VP_NODE_MAX_IN;
        for (unsigned g = 0; g < groups; g++) {
            unsigned first = g * VP_NODE_MAX_IN, count = n - first < VP_NODE_MAX_IN ? n - first : VP_NODE_MAX_IN;
            uint64_t numel = 0;
            for (unsigned i = 0; i < count; i++) numel += numel_of(sim, level[first + i]);
            vp_t part = vp_view(sim, y, numel, label);
            vp_record(sim, backward_cat_views, label, &level[first], count, &part, 1);
            for (unsigned i = 0; views && i < count; i++) vp_drop(sim, level[first + i]);
            level[g] = part;
        }
        n = groups;
        views = true;
    }
    vp_record(sim, backward_cat_views, label, level, n, &y, 1);
    for (unsigned i = 0; views && i < n; i++) vp_drop(sim, level[i]);
    free(level);
    return y;
}

vp_t vp_cat(vp_sim *sim, vp_t a, vp_t b, const char *label) {
    vp_dtype dtype = vp_dtype_promote(dtype_of(sim, a), dtype_of(sim, b));
    vp_t y = vp_new(sim, numel_of(sim, a) + numel_of(sim, b), dtype, label);
    vp_t in[2] = {a, b};
    vp_record(sim, backward_cat, label, in, 2, &y, 1);
    return y;
}

vp_t vp_dropout(vp_sim *sim, vp_t x, double p, const char *label) {
    if (p <= 0.0) {
        vp_hold(sim, x);
        return x;
    }
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_t mask = vp_new(sim, numel_of(sim, x), VP_BOOL, label);
    vp_at(sim, y)->aten = vp_at(sim, mask)->aten = VP_ATEN_NATIVE_DROPOUT;
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) {
        node->aux[0] = 0;
        vp_save(sim, node, mask); /* native_dropout_backward(grad, mask, scale) */
    }
    vp_drop(sim, mask);
    return y;
}

vp_t vp_layer_norm(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, vp_device device,
                   const char *label) {
    vp_dtype stat = device == VP_DEVICE_CUDA ? VP_FP32 : dtype_of(sim, x);
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_t mean = vp_new(sim, rows, stat, label);
    vp_t rstd = vp_new(sim, rows, stat, label);
    vp_t in[3] = {x, w, b};
    vp_node *node = vp_record(sim, backward_fresh, label, in, 3, &y, 1);
    if (node) {
        vp_save(sim, node, x);
        vp_save(sim, node, w);
        vp_save(sim, node, b);
        vp_save(sim, node, mean);
        vp_save(sim, node, rstd);
    }
    vp_drop(sim, mean);
    vp_drop(sim, rstd);
    return y;
}

/* x.masked_fill(mask, value) as torch.where(condition, x, scalar), or in
 * place (masked_fill_: x's new version, a view of its storage). */
static vp_t filled(vp_sim *sim, vp_t x, vp_t condition, bool in_place, const char *label) {
    vp_t y = in_place ? vp_view(sim, x, numel_of(sim, x), label) : vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) {
        node->aux[0] = 0;
        vp_save(sim, node, condition);
    }
    return y;
}

vp_t vp_where(vp_sim *sim, vp_t x, vp_t condition, const char *label) { return filled(sim, x, condition, false, label); }

/* MaskedFillBackward0 (derivatives.yaml, PyTorch 1.13: self:
 * grad.masked_fill(mask, 0), a new tensor like x; checked on 1.13's
 * grad_fn: _saved_mask alone). */
vp_t vp_masked_fill_(vp_sim *sim, vp_t x, vp_t mask, const char *label) { return filled(sim, x, mask, true, label); }

vp_t vp_embedding(vp_sim *sim, vp_t indices, vp_t w, uint64_t rows, uint64_t dim, vp_device device,
                  const char *label) {
    vp_t y = vp_new(sim, vp_numel(sim, rows, dim), dtype_of(sim, w), label);
    vp_node *node = vp_record(sim, backward_embedding, label, &w, 1, &y, 1);
    if (node) {
        node->aux[0] = rows;
        node->aux_dtype = (uint8_t)device;
        vp_save(sim, node, indices);
        /* no memory of its own, unless saved tensors are packed elsewhere */
        if (sim->embedding_saves_weight) vp_save(sim, node, w);
    }
    return y;
}

/* DTensor's loss_parallel (torch/distributed/tensor/parallel/loss.py,
 * pytorch 02eef6b; the functions as loss_parallel came in PyTorch 2.3):
 * the log_softmax of this rank's vocabulary slice x, written out as
 * _log_softmax does it: amax and its all_reduce (rows), shifted = x -
 * max, exp(shifted) until its sum is taken (rows, all_reduced), the
 * log-sum-exp, result = shifted - lse; shifted goes when the handler
 * returns. The input is fp32 already (torchtitan's pred.float()), so the
 * handler's to(computation dtype) copies nothing. LogSoftmaxBackward saves
 * the result; its backward (_log_softmax_backward_handler) returns the
 * gradient as it is, nll_loss's backward having done the work. */
vp_t vp_loss_parallel_log_softmax(vp_sim *sim, vp_t x, uint64_t rows, const char *label) {
    uint64_t n = numel_of(sim, x);
    vp_dtype dt = dtype_of(sim, x);
    vp_t x_max = vp_new(sim, rows, dt, "loss_parallel.amax");
    vp_t max_all = vp_new(sim, rows, dt, "loss_parallel.all_reduce"); /* funcol: a new tensor */
    vp_drop(sim, x_max);
    vp_t shifted = vp_new(sim, n, dt, "loss_parallel.shifted");
    vp_t e = vp_new(sim, n, dt, "loss_parallel.exp");
    vp_t sumexp = vp_new(sim, rows, dt, "loss_parallel.sumexp");
    vp_drop(sim, e);
    vp_t sum_all = vp_new(sim, rows, dt, "loss_parallel.all_reduce");
    vp_drop(sim, sumexp);
    vp_t lse = vp_new(sim, rows, dt, "loss_parallel.logsumexp");
    vp_drop(sim, sum_all);
    vp_t y = vp_new(sim, n, dt, label);
    vp_drop(sim, lse);
    vp_drop(sim, shifted);
    vp_drop(sim, max_all);
    vp_node *node = vp_record(sim, backward_pass, label, &x, 1, &y, 1);
    if (node) vp_save(sim, node, y);
    return y;
}

/* _MaskPartial over the targets (loss_parallel, as below): the safe
 * targets (where(target != ignore_index, target, 0)), the ones outside
 * this rank's slice masked, and the mask_buffer the placement keeps until
 * the handler returns; t[0..2], row-sized, the caller drops them. */
static void mask_targets(vp_sim *sim, vp_t (*make)(vp_sim *, uint64_t, vp_dtype, const char *), uint64_t rows,
                         vp_t t[3]) {
    t[0] = make(sim, rows, VP_INT64, "loss_parallel.safe_target");
    t[1] = make(sim, rows, VP_INT64, "loss_parallel.masked_target");
    t[2] = make(sim, rows, VP_BOOL, "loss_parallel.mask_buffer");
}

static void drop_targets(vp_sim *sim, vp_t t[3]) {
    for (unsigned i = 3; i-- > 0;) vp_drop(sim, t[i]);
}

/* _nll_loss_and_log_softmax_backward (loss_parallel, as above): both
 * backwards in one, over the saved log-probabilities x: safe_target, a
 * zero-filled grad_input like x, the masked targets (mask_targets), the update
 * and an arange (rows), the -1 written in place, then (grad_input +
 * exp(x)) * grad_output: exp(x) until the sum is made, the sum until the
 * product is; grad_input and the rest go when it returns. */
static void backward_loss_parallel_nll(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t x = node->in[0];
    uint64_t n = numel_of(sim, x), rows = node->aux[0];
    vp_dtype dt = dtype_of(sim, x);
    vp_t grad_input = vp_grad_sized(sim, n, dt, "loss_parallel.grad_input");
    vp_t targets[3];
    mask_targets(sim, vp_grad_sized, rows, targets);
    vp_t update = vp_grad_sized(sim, rows, dt, "loss_parallel.grad_update");
    vp_t arange = vp_grad_sized(sim, rows, VP_INT64, "loss_parallel.arange");
    vp_t e = vp_grad_sized(sim, n, dt, "loss_parallel.exp");
    vp_t sum = vp_grad_sized(sim, n, dt, "loss_parallel.grad_input_plus_exp");
    vp_drop(sim, e);
    vp_t g = vp_grad_sized(sim, n, dt, node->label);
    vp_drop(sim, sum);
    vp_drop(sim, arange);
    vp_drop(sim, update);
    drop_targets(sim, targets);
    vp_drop(sim, grad_input);
    give_fitted(sim, index, 0, g);
}

/* _nll_loss_forward under loss_parallel: the masked targets
 * (mask_targets), the gathered log-probabilities and their all_reduce,
 * their negation and where(): transients; NllLossBackward saves the
 * log-probabilities, the target and total_weight. */
vp_t vp_loss_parallel_nll(vp_sim *sim, vp_t log_probs, vp_t target, uint64_t rows, const char *label) {
    vp_dtype dt = dtype_of(sim, log_probs);
    vp_t targets[3];
    mask_targets(sim, vp_new, rows, targets);
    vp_t partial = vp_new(sim, rows, dt, "loss_parallel.gather");
    vp_t reduced = vp_new(sim, rows, dt, "loss_parallel.all_reduce");
    vp_drop(sim, partial);
    vp_t negated = vp_new(sim, rows, dt, "loss_parallel.neg");
    vp_drop(sim, reduced);
    vp_t kept = vp_new(sim, rows, dt, "loss_parallel.where");
    vp_drop(sim, negated);
    vp_t total_weight = vp_new(sim, 1, dt, label);
    vp_t summed = vp_new(sim, 1, dt, label);
    vp_drop(sim, kept);
    vp_t loss = vp_new(sim, 1, dt, label);
    vp_drop(sim, summed);
    drop_targets(sim, targets);
    vp_node *node = vp_record(sim, backward_loss_parallel_nll, label, &log_probs, 1, &loss, 1);
    if (node) {
        node->aux[0] = rows;
        vp_save(sim, node, log_probs);
        vp_save(sim, node, target);
        vp_save(sim, node, total_weight);
    }
    vp_drop(sim, total_weight);
    return loss;
}

vp_t vp_nll_loss(vp_sim *sim, vp_t log_probs, vp_t target, const char *label) {
    vp_t loss = vp_new(sim, 1, dtype_of(sim, log_probs), label);
    vp_t total_weight = vp_new(sim, 1, dtype_of(sim, log_probs), label);
    vp_node *node = vp_record(sim, backward_fresh, label, &log_probs, 1, &loss, 1);
    if (node) {
        vp_save(sim, node, log_probs);
        vp_save(sim, node, target);
        vp_save(sim, node, total_weight);
    }
    vp_drop(sim, total_weight);
    return loss;
}

/* Backward of vp_gathered_linear: the gathered input again (for the weight
 * gradient), the weight and bias gradients, the input's gradient at full
 * rows reduce-scattered to the shard. */
static void backward_gathered_linear(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t rows = node->aux[0], in = node->aux[1], parts = node->aux[2];
    vp_dtype dt = (vp_dtype)node->aux_dtype;
    vp_t gathered = vp_grad_sized(sim, vp_numel(sim, rows, in), dt, "all_gather.input");
    vp_t full = 0;
    if (vp_needs_grad(sim, node, 0)) full = vp_grad_sized(sim, vp_numel(sim, rows, in), dt, node->label);
    for (unsigned i = 1; i < 3; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) vp_give_grad(sim, node, i, vp_grad_like(sim, node->in[i], node->label));
    }
    if (full) {
        node = vp_node_at(sim, index);
        vp_t shard = vp_grad_sized(sim, vp_at(sim, node->in[0])->numel, dt, "reduce_scatter.grad");
        vp_drop(sim, full);
        vp_give_grad(sim, vp_node_at(sim, index), 0, shard);
    }
    vp_drop(sim, gathered);
    (void)parts;
}

vp_t vp_gathered_linear(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, uint64_t out_features, unsigned parts,
                        const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    uint64_t in = numel_of(sim, x) / (rows / parts ? rows / parts : 1);
    vp_t gathered = vp_new(sim, vp_numel(sim, rows, in), dt, "all_gather.input");
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dt, label);
    vp_drop(sim, gathered);
    vp_t inputs[3] = {x, w, b};
    vp_node *node = vp_record(sim, backward_gathered_linear, label, inputs, 3, &y, 1);
    if (node) {
        node->aux[0] = rows;
        node->aux[1] = in;
        node->aux[2] = parts;
        node->aux_dtype = (uint8_t)dt;
        if (wants_grad(sim, w)) vp_save(sim, node, x);
        if (wants_grad(sim, x)) vp_save(sim, node, w);
    }
    return y;
}

/* The reduce-scatter's backward, an all-gather of the output's gradient:
 * one like x, or, where the gradient arrives in float8 (torchao's
 * NoopFwToFloat8BwDynamic after Float8RowwiseParallel's reduce-scatter),
 * gathered as it is, one byte an element (float8_ops.py allgather_fp8). */
static void backward_scatter(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t go = vp_grad_out(sim, node, 0);
    if (!go || dtype_of(sim, go) != VP_FP8_E4M3 || vp_at(sim, node->in[0])->grad_dtype == VP_FP8_E4M3) {
        backward_split(sim, index);
        return;
    }
    vp_t g = vp_grad_sized(sim, numel_of(sim, node->in[0]), VP_FP8_E4M3, node->label);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

/* The reduce-scatter's backward under funcol: the output's gradient
 * all-gathered into one like x (in float8 where it arrives so, as
 * backward_scatter), with funcol's collective output beside the cat's, or
 * fused with the matmul that reads it (the row-parallel linear's input
 * gradient) and the request of the shard. */
static void backward_funcol_scatter(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    unsigned funcol = (unsigned)node->aux[0];
    vp_t go = vp_grad_out(sim, node, 0);
    bool f8 = go && dtype_of(sim, go) == VP_FP8_E4M3 && vp_at(sim, node->in[0])->grad_dtype != VP_FP8_E4M3;
    vp_dtype dt = f8 ? VP_FP8_E4M3 : (vp_dtype)vp_at(sim, node->in[0])->grad_dtype;
    uint64_t n = numel_of(sim, node->in[0]);
    vp_t raw = 0;
    if (go && (funcol & VP_FUNCOL_FUSED_BACKWARD)) symm_mem_request(sim, dt, numel_of(sim, go), 1);
    else if (go) raw = vp_grad_sized(sim, n, dt, "all_gather_into_tensor (before its cat)");
    node = vp_node_at(sim, index);
    vp_t g = f8 ? vp_grad_sized(sim, n, VP_FP8_E4M3, node->label) : vp_grad_like(sim, node->in[0], node->label);
    vp_drop(sim, raw);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_funcol_reduce_scatter(vp_sim *sim, vp_t x, unsigned parts, unsigned funcol, const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    vp_t cat = funcol & VP_FUNCOL_FUSED_FORWARD ? 0 : vp_new(sim, numel_of(sim, x), dt, "reduce_scatter.cat");
    vp_t y = vp_sac_new(sim, VP_ATEN_REDUCE_SCATTER, numel_of(sim, x) / parts, dt, label);
    if (!cat) symm_mem_request(sim, dt, numel_of(sim, y), 2);
    vp_drop(sim, cat);
    vp_node *node = vp_record(sim, backward_funcol_scatter, label, &x, 1, &y, 1);
    if (node) node->aux[0] = funcol;
    return y;
}

vp_t vp_funcol_all_gather(vp_sim *sim, vp_t x, unsigned parts, unsigned funcol, const char *label) {
    vp_t y = funcol_gathered(sim, x, parts, funcol, label);
    vp_node *node = vp_record(sim, backward_funcol_gather, label, &x, 1, &y, 1);
    if (node) node->aux[0] = funcol;
    return y;
}

vp_t vp_scatter(vp_sim *sim, vp_t x, unsigned parts, const char *label) {
    vp_t y = vp_sac_new(sim, VP_ATEN_REDUCE_SCATTER, numel_of(sim, x) / parts, dtype_of(sim, x), label);
    vp_record(sim, backward_scatter, label, &x, 1, &y, 1); /* all-gather: a gradient like x */
    return y;
}

vp_t vp_all_gather(vp_sim *sim, vp_t x, unsigned parts, const char *label) {
    vp_t y = vp_sac_new(sim, VP_ATEN_ALL_GATHER, vp_numel(sim, numel_of(sim, x), parts), dtype_of(sim, x), label);
    vp_record(sim, backward_split, label, &x, 1, &y, 1); /* reduce-scatter: a gradient like x */
    return y;
}

/* A fused RMSNorm's forward: the output and one fp32 rstd per row, the
 * input, the weight and the rstd saved; returns the node (NULL without
 * one) through *node. */
static vp_t fused_rms_norm(vp_sim *sim, vp_t x, vp_t w, uint64_t rows, vp_backward_fn backward, const char *label,
                           vp_node **node) {
    vp_t y = vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_t rstd = vp_new(sim, rows, VP_FP32, label);
    vp_t in[2] = {x, w};
    *node = vp_record(sim, backward, label, in, 2, &y, 1);
    if (*node) {
        vp_save(sim, *node, x);
        vp_save(sim, *node, w);
        vp_save(sim, *node, rstd);
    }
    vp_drop(sim, rstd);
    return y;
}

vp_t vp_rms_norm(vp_sim *sim, vp_t x, vp_t w, uint64_t rows, const char *label) {
    vp_node *node;
    return fused_rms_norm(sim, x, w, rows, backward_fresh, label, &node);
}

/* rms_norm_backward runs whichever inputs need a gradient: _dW and dW are
 * made whenever there is a weight, dX (in place or not) always; autograd
 * drops what no input takes. */
static void backward_liger_rms_norm(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    /* the saved X and W: `in` holds only the inputs that need a gradient */
    vp_t x = node->saved[0], w = node->saved[1], dy = vp_grad_out(sim, node, 0);
    bool in_place = node->aux[0];
    uint64_t h = numel_of(sim, w);
    vp_t partial = vp_new(sim, vp_numel(sim, node->aux[1], h), VP_FP32, "rmsnorm.liger._dW");
    vp_t dx;
    if (in_place && dy) {
        vp_hold(sim, dy);
        dx = dy;
    } else {
        dx = vp_grad_like(sim, x, "rmsnorm.liger.dX"); /* torch.zeros_like(dY) */
    }
    /* dW = _dW.sum(dim=0).to(W.dtype): the fp32 sum goes once cast */
    vp_t sum = vp_new(sim, h, VP_FP32, "rmsnorm.liger.dW");
    vp_t dw = sum;
    if (dtype_of(sim, w) != VP_FP32) {
        dw = vp_new(sim, h, dtype_of(sim, w), "rmsnorm.liger.dW");
        vp_drop(sim, sum);
    }
    vp_drop(sim, partial); /* a local of rms_norm_backward */
    node = vp_node_at(sim, index);
    if (vp_needs_grad(sim, node, 0)) vp_give_grad(sim, node, 0, dx);
    else vp_drop(sim, dx);
    node = vp_node_at(sim, index);
    if (vp_needs_grad(sim, node, 1)) vp_give_grad(sim, node, 1, dw);
    else vp_drop(sim, dw);
}

vp_t vp_liger_rms_norm(vp_sim *sim, vp_t x, vp_t w, uint64_t rows, bool in_place, uint64_t programs,
                       const char *label) {
    vp_node *node;
    vp_t y = fused_rms_norm(sim, x, w, rows, backward_liger_rms_norm, label, &node);
    if (node) {
        node->aux[0] = in_place;
        node->aux[1] = programs;
    }
    return y;
}

/* The kernel's gradients are the saved gate and up themselves. */
static void backward_liger_swiglu(vp_sim *sim, uint32_t index) {
    for (unsigned i = 0; i < 2; i++) {
        vp_node *node = vp_node_at(sim, index);
        if (!vp_needs_grad(sim, node, i)) continue;
        vp_t saved = node->saved[i];
        vp_hold(sim, saved);
        vp_give_grad(sim, node, i, saved);
    }
}

vp_t vp_liger_swiglu(vp_sim *sim, vp_t gate, vp_t up, const char *label) {
    vp_t c = vp_new(sim, numel_of(sim, gate), dtype_of(sim, gate), label);
    vp_t in[2] = {gate, up};
    vp_node *node = vp_record(sim, backward_liger_swiglu, label, in, 2, &c, 1);
    if (node) {
        vp_save(sim, node, gate);
        vp_save(sim, node, up);
    }
    return c;
}

static uint64_t next_pow2(uint64_t n) {
    uint64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

enum { MOE_T, MOE_K, MOE_E, MOE_I, MOE_H };

/* LigerFusedMoEFunction.backward: its buffers in order, the ones that are
 * not gradients gone as it returns; dS (dO's dtype) fitted to the weights'. */
static void backward_liger_moe(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t t = node->aux[MOE_T], tk = vp_numel(sim, t, node->aux[MOE_K]);
    uint64_t inter = node->aux[MOE_I], h = node->aux[MOE_H];
    vp_t dy = vp_grad_out(sim, node, 0);
    if (!dy) return; /* set_materialize_grads(False): nothing to do */
    vp_dtype dt = dtype_of(sim, dy);
    vp_t w1 = node->saved[1], w2 = node->saved[2];
    vp_t d_pre_act = vp_new(sim, vp_numel(sim, tk, 2 * inter), dt, "moe.liger.d_pre_act");
    vp_t weighted_act = vp_new(sim, vp_numel(sim, tk, inter), dt, "moe.liger.weighted_act");
    vp_t ds = vp_new(sim, tk, dt, "moe.liger.dS");
    vp_t dw2 = vp_new(sim, numel_of(sim, w2), dtype_of(sim, w2), "moe.liger.ddown_proj");
    vp_t dx_expanded = vp_new(sim, vp_numel(sim, tk, h), dt, "moe.liger.dx_expanded");
    vp_t dx = vp_new(sim, vp_numel(sim, t, h), dt, "moe.liger.dx");
    vp_t dw1 = vp_new(sim, numel_of(sim, w1), dtype_of(sim, w1), "moe.liger.dgate_up_proj");
    vp_drop(sim, d_pre_act);
    vp_drop(sim, weighted_act);
    vp_drop(sim, dx_expanded);
    vp_t grads[4] = {dx, dw1, dw2, ds};
    for (unsigned i = 0; i < 4; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) give_fitted(sim, index, i, grads[i]);
        else vp_drop(sim, grads[i]);
    }
}

vp_t vp_liger_fused_moe(vp_sim *sim, vp_t x, vp_t w1, vp_t w2, vp_t weights, uint64_t tokens, unsigned k,
                        unsigned experts, uint64_t inter, uint64_t hidden, uint64_t row_tiles, const char *label) {
    uint64_t tk = vp_numel(sim, tokens, k);
    vp_dtype dt = dtype_of(sim, x);
    /* compute_routing_metadata, under no_grad */
    /* TOKENS_PER_BLOCK = max(1, 1024 // next_power_of_2(k)) tokens a histogram tile */
    uint64_t per_block = 1024 / next_pow2(k);
    if (!per_block) per_block = 1;
    uint64_t tiles = (tokens + per_block - 1) / per_block;
    vp_t counts = vp_new(sim, vp_numel(sim, experts, tiles), VP_INT32, "moe.liger.tile_expert_counts");
    vp_t token_count = vp_new(sim, experts, VP_INT32, "moe.liger.expert_token_count");
    vp_t start = vp_new(sim, experts + 1ull, VP_INT32, "moe.liger.expert_start_idx");
    vp_t tile_offset = vp_new(sim, experts + 1ull, VP_INT32, "moe.liger.expert_tile_offset");
    vp_t tile_row_start = vp_new(sim, row_tiles, VP_INT32, "moe.liger.tile_row_start");
    vp_t tile_expert = vp_new(sim, row_tiles, VP_INT32, "moe.liger.tile_expert");
    vp_t s_scatter = vp_new(sim, tk, VP_INT32, "moe.liger.s_scatter_idx");
    vp_t s_reverse = vp_new(sim, tk, VP_INT32, "moe.liger.s_reverse_scatter_idx");
    vp_t x_gather = vp_new(sim, tk, VP_INT32, "moe.liger.x_gather_idx");
    vp_drop(sim, counts);
    vp_drop(sim, tile_offset);
    vp_t pre_act = vp_new(sim, vp_numel(sim, tk, 2 * inter), dt, "moe.liger.pre_act");
    vp_t post_act = vp_new(sim, vp_numel(sim, tk, inter), dt, "moe.liger.post_act");
    vp_t y = vp_new(sim, vp_numel(sim, tk, hidden), dt, "moe.liger.Y");
    vp_t out = vp_new(sim, vp_numel(sim, tokens, hidden), dt, label);
    vp_t in[4] = {x, w1, w2, weights};
    vp_node *node = vp_record(sim, backward_liger_moe, label, in, 4, &out, 1);
    if (node) {
        vp_t saved[] = {x, w1, w2, pre_act, weights, start, x_gather, s_scatter, s_reverse, tile_row_start, tile_expert};
        for (unsigned i = 0; i < sizeof saved / sizeof *saved; i++) vp_save(sim, node, saved[i]);
        node->aux[MOE_T] = tokens;
        node->aux[MOE_K] = k;
        node->aux[MOE_E] = experts;
        node->aux[MOE_I] = inter;
        node->aux[MOE_H] = hidden;
    }
    /* forward returns: its locals go (`_`, the token counts, among them) */
    vp_t locals[] = {token_count, start, tile_row_start, tile_expert, s_scatter, s_reverse, x_gather, pre_act,
                     post_act, y};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    return out;
}

vp_t vp_glu(vp_sim *sim, vp_t x, const char *label) {
    vp_t y = vp_new(sim, numel_of(sim, x) / 2, dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, backward_unary, label, &x, 1, &y, 1);
    if (node) {
        node->aux[0] = 0;
        vp_save(sim, node, x);
    }
    return y;
}

/* LogsumexpBackward0: grad * (self - result).exp() (FunctionsManual.cpp
 * logsumexp_backward, PyTorch 1.13): the difference, its exp and the
 * product, three x-sized tensors; the product is x's gradient. */
static void backward_logsumexp(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t diff = vp_grad_like(sim, node->in[0], node->label);
    vp_t exp = vp_grad_like(sim, vp_node_at(sim, index)->in[0], node->label);
    vp_t g = vp_grad_like(sim, vp_node_at(sim, index)->in[0], node->label);
    vp_drop(sim, diff);
    vp_drop(sim, exp);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_logsumexp(vp_sim *sim, vp_t x, uint64_t rows, const char *label) {
    vp_dtype dt = dtype_of(sim, x);
    /* logsumexp_out_impl: maxes = amax(self, dims, true); the infinite
     * maxes zeroed (abs() == INFINITY: a row of dt and one of bool); then
     * sum_out(result, (self - maxes).exp_(), ...): one x-sized temporary
     * beside maxes and the result (measured on 1.13's CPU kernels:
     * forward peak x + 2 rows) */
    vp_t maxes = vp_new(sim, rows, dt, label);
    vp_t absolute = vp_new(sim, rows, dt, label);
    vp_t infinite = vp_new(sim, rows, VP_BOOL, label);
    vp_drop(sim, absolute);
    vp_drop(sim, infinite);
    vp_t shifted = vp_new(sim, numel_of(sim, x), dt, label);
    vp_t y = vp_new(sim, rows, dt, label);
    vp_drop(sim, shifted);
    vp_drop(sim, maxes);
    vp_node *node = vp_record(sim, backward_logsumexp, label, &x, 1, &y, 1);
    if (node) {
        vp_save(sim, node, x);
        vp_save(sim, node, y);
    }
    return y;
}

/* VarBackward0 and StdBackward0 (FunctionsManual.cpp var_backward,
 * std_backward, PyTorch 1.13): std first makes grad / (result * 2)
 * masked where result == 0 (two rows and a bool row, the quotient
 * kept); var_backward is (2.0 / dof) * grad * (self - self.mean(dim,
 * true)): two rows, the difference and the product (x-sized), the
 * product x's gradient. */
static void backward_var(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g_out = vp_grad_out(sim, node, 0);
    vp_dtype dt = dtype_of(sim, node->in[0]);
    uint64_t rows = numel_of(sim, g_out);
    const char *label = node->label;
    vp_t quotient = 0;
    if (node->aux[0]) { /* std */
        vp_t doubled = vp_grad_sized(sim, rows, dt, label);
        quotient = vp_grad_sized(sim, rows, dt, label);
        vp_t zero = vp_grad_sized(sim, rows, VP_BOOL, label);
        vp_drop(sim, doubled);
        vp_drop(sim, zero);
    }
    vp_t scaled = vp_grad_sized(sim, rows, dt, label);
    vp_t mean = vp_grad_sized(sim, rows, dt, label);
    vp_t diff = vp_grad_like(sim, vp_node_at(sim, index)->in[0], label);
    vp_t g = vp_grad_like(sim, vp_node_at(sim, index)->in[0], label);
    vp_drop(sim, scaled);
    vp_drop(sim, mean);
    vp_drop(sim, diff);
    vp_drop(sim, quotient);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

/* A reduction kernel's result of `rows` elements, alone (var's, std's,
 * amax's: measured on 1.13's CPU kernels), its node (`rule`, `aux` its
 * aux[0]) keeping x and with keeps_result the result. */
static vp_t reduced(vp_sim *sim, vp_backward_fn rule, vp_t x, uint64_t rows, uint64_t aux, bool keeps_result,
                    const char *label) {
    vp_t y = vp_new(sim, rows, dtype_of(sim, x), label);
    vp_node *node = vp_record(sim, rule, label, &x, 1, &y, 1);
    if (node) {
        node->aux[0] = aux;
        vp_save(sim, node, x);
        if (keeps_result) vp_save(sim, node, y);
    }
    return y;
}

vp_t vp_var(vp_sim *sim, vp_t x, uint64_t rows, bool std, const char *label) {
    return reduced(sim, backward_var, x, rows, std, std, label);
}

/* AmaxBackward0 and AminBackward0 (derivatives.yaml, PyTorch 1.13: self:
 * scale_grad_by_count(restore_reduced_dims(grad, dim, keepdim),
 * restore_reduced_dims(result, dim, keepdim) == self, dim); checked on
 * 1.13's grad_fn: _saved_self, _saved_result). FunctionsManual.cpp's
 * scale_grad_by_count is (grad / mask.sum(dims, true)) * mask:
 * - the mask, bool, x-sized (an equality of like dtypes: no copies);
 * - mask.sum: its int64 rows, and before them an int64 copy of the mask
 *   (ReduceOpsUtils.h make_reduction: self.to(in_dtype), in_dtype the
 *   output's int64 on every device), freed after the sum;
 * - grad / count and then (.) * mask: TensorIterator's compute_types
 *   (aten/src/ATen/TensorIterator.cpp, "Promotes inputs by creating
 *   temporaries of the correct dtype", only where common_device is the
 *   CPU) copies the int64 count and the bool mask into the gradient's
 *   dtype first; CUDA's kernels cast as they load (no copies).
 * Measured on 1.13's CPU kernels ([64, 1000] fp32: backward peak
 * 576,768 B above the incoming gradient = mask 64,000 + its float copy
 * 256,000 + the gradient 256,000 + quotient 256 + count 512; bf16: the
 * sum's 64,000 + 512,000 + 512). */
static void backward_amax(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g_out = vp_grad_out(sim, node, 0), x = node->in[0];
    vp_dtype dt = dtype_of(sim, g_out);
    uint64_t rows = numel_of(sim, g_out), n = numel_of(sim, x);
    bool cpu = node->aux[0] == VP_DEVICE_CPU;
    const char *label = node->label;
    vp_t mask = vp_grad_sized(sim, n, VP_BOOL, label);
    vp_t count = vp_grad_sized(sim, rows, VP_INT64, label);
    vp_drop(sim, vp_grad_sized(sim, n, VP_INT64, label)); /* the mask as int64, summed */
    vp_t count_copy = cpu ? vp_grad_sized(sim, rows, dt, label) : 0;
    vp_t quotient = vp_grad_sized(sim, rows, dt, label);
    vp_drop(sim, count_copy);
    vp_t mask_copy = cpu ? vp_grad_sized(sim, n, dt, label) : 0;
    vp_t g = vp_grad_like(sim, x, label);
    vp_drop(sim, mask_copy);
    vp_drop(sim, quotient);
    vp_drop(sim, count);
    vp_drop(sim, mask);
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

vp_t vp_amax(vp_sim *sim, vp_t x, uint64_t rows, vp_device device, const char *label) {
    return reduced(sim, backward_amax, x, rows, device, true, label);
}

/* Rows of x picked by an op whose backward fills a zero gradient of all of
 * x, saving `saved` (its index tensors, and for gather x itself). */
static vp_t picked(vp_sim *sim, vp_t x, const vp_t *saved, unsigned n_saved, uint64_t numel, const char *label) {
    vp_node *node = vp_record(sim, backward_split, label, &x, 1, NULL, 0); /* a gradient like all of x */
    /* the inputs saved before the output is made (vp_record_output) */
    for (unsigned i = 0; node && i < n_saved; i++) vp_save(sim, node, saved[i]);
    vp_t y = vp_new(sim, numel, dtype_of(sim, x), label);
    vp_record_output(sim, node, 0, y);
    return y;
}

vp_t vp_index(vp_sim *sim, vp_t x, vp_t indices, uint64_t numel, const char *label) {
    return picked(sim, x, &indices, 1, numel, label);
}

vp_t vp_index_pair(vp_sim *sim, vp_t x, vp_t first, vp_t second, uint64_t numel, const char *label) {
    vp_t indices[2] = {first, second};
    return picked(sim, x, indices, 2, numel, label);
}

vp_t vp_gather(vp_sim *sim, vp_t x, vp_t index, uint64_t numel, const char *label) {
    vp_t saved[2] = {x, index};
    return picked(sim, x, saved, 2, numel, label);
}

vp_t vp_topk(vp_sim *sim, vp_t x, uint64_t numel, vp_t *indices_out, const char *label) {
    vp_t values = vp_new(sim, numel, dtype_of(sim, x), label);
    vp_t indices = vp_new(sim, numel, VP_INT64, label);
    vp_node *node = vp_record(sim, backward_split, label, &x, 1, &values, 1);
    if (node) vp_save(sim, node, indices);
    *indices_out = indices;
    return values;
}

/* IndexAddBackward, and any op whose output is its first input with the
 * second folded in: the first gets the incoming gradient as it is, the
 * second a new one of its own size (index_add's grad.index_select(...)). */
static void backward_through(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    if (vp_needs_grad(sim, node, 0)) {
        vp_hold(sim, g);
        vp_give_grad(sim, node, 0, g);
    }
    node = vp_node_at(sim, index);
    if (vp_needs_grad(sim, node, 1)) vp_give_grad(sim, node, 1, vp_grad_like(sim, node->in[1], node->label));
}

vp_t vp_attach(vp_sim *sim, vp_t x, vp_t side, const char *label) {
    vp_t y = vp_view(sim, x, numel_of(sim, x), label);
    vp_t in[2] = {x, side};
    vp_record(sim, backward_through, label, in, 2, &y, 1);
    return y;
}

/* index_add's node on its result y: the index kept, and the source with
 * keeps_source when it needs a gradient (its formula's; on 1.13 a source
 * that needs none leaves _saved_source empty). */
static vp_t index_added(vp_sim *sim, vp_t y, vp_t acc, vp_t source, vp_t index, bool keeps_source, const char *label) {
    vp_t in[2] = {acc, source};
    vp_node *node = vp_record(sim, backward_through, label, in, 2, &y, 1);
    if (node) {
        vp_save(sim, node, index);
        if (keeps_source && wants_grad(sim, source)) vp_save(sim, node, source);
    }
    return y;
}

vp_t vp_index_add(vp_sim *sim, vp_t acc, vp_t source, vp_t index, bool keeps_source, const char *label) {
    return index_added(sim, vp_view(sim, acc, numel_of(sim, acc), label), acc, source, index, keeps_source, label);
}

/* IndexAddBackward0 (derivatives.yaml, PyTorch 1.13: self: grad; source:
 * grad.index_select(dim, index).expand_as(source), which names source;
 * checked on 1.13's grad_fn: _saved_index, _saved_source,
 * _saved_source_dim, _saved_dim, _saved_alpha). */
vp_t vp_index_added(vp_sim *sim, vp_t acc, vp_t source, vp_t index, const char *label) {
    return index_added(sim, vp_new(sim, numel_of(sim, acc), dtype_of(sim, acc), label), acc, source, index, true, label);
}

/* x.scatter_add(dim, index, src) or x.scatter(dim, index, src), out of
 * place (a new tensor like x) or in place (x's new version, a view of its
 * storage), whose node (`rule`) keeps the index alone. */
static vp_t scattered(vp_sim *sim, vp_backward_fn rule, vp_t x, vp_t index, vp_t src, bool in_place, const char *label) {
    vp_t y = in_place ? vp_view(sim, x, numel_of(sim, x), label) : vp_new(sim, numel_of(sim, x), dtype_of(sim, x), label);
    vp_t in[2] = {x, src};
    vp_node *node = vp_record(sim, rule, label, in, 2, &y, 1);
    if (node) vp_save(sim, node, index);
    return y;
}

/* ScatterAddBackward0 (derivatives.yaml, PyTorch 1.13: self: grad, src:
 * grad.gather(dim, index); checked on 1.13's grad_fn: _saved_index,
 * _saved_dim): x's gradient passes through, src gets a new one. */
vp_t vp_scatter_add(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label) {
    return scattered(sim, backward_through, x, index, src, false, label);
}

/* scatter_add_ (ScatterAddBackward0 as above; 1.13's in-place call
 * returns x itself, its version counter bumped, no new storage). */
vp_t vp_scatter_add_(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label) {
    return scattered(sim, backward_through, x, index, src, true, label);
}

/* ScatterBackward0 (self: grad.scatter(dim, index, 0), src:
 * grad.gather(dim, index)): each a new tensor, x's first. */
vp_t vp_scatter_src(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label) {
    return scattered(sim, backward_fresh, x, index, src, false, label);
}

/* scatter_ (ScatterBackward0, or ScatterBackward1 of a number: as above). */
vp_t vp_scatter_src_(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label) {
    return scattered(sim, backward_fresh, x, index, src, true, label);
}

/* IndexCopyBackward0 (derivatives.yaml, PyTorch 1.13: self:
 * grad.index_fill(dim, index, 0), a new tensor like x; source:
 * grad.index_select(dim, index).expand_as(source), a new one of its size;
 * checked on 1.13's grad_fn: _saved_index, and _saved_source only when
 * the source needs a gradient). */
vp_t vp_index_copy_(vp_sim *sim, vp_t x, vp_t source, vp_t index, const char *label) {
    vp_t y = vp_view(sim, x, numel_of(sim, x), label);
    vp_t in[2] = {x, source};
    vp_node *node = vp_record(sim, backward_fresh, label, in, 2, &y, 1);
    if (node) {
        vp_save(sim, node, index);
        if (wants_grad(sim, source)) vp_save(sim, node, source);
    }
    return y;
}

/* IndexPutBackward (index_put_ without accumulate): self's gradient is
 * grad.index_put(indices, zeros_like(values)), a new tensor like self made
 * while the zeros exist; values' is grad.index(indices). */
static void backward_index_put(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t grads[2] = {0};
    if (vp_needs_grad(sim, node, 0)) {
        vp_t zeros = vp_grad_like(sim, node->in[1], node->label);
        grads[0] = vp_grad_like(sim, vp_node_at(sim, index)->in[0], node->label);
        vp_drop(sim, zeros);
    }
    node = vp_node_at(sim, index);
    if (vp_needs_grad(sim, node, 1)) grads[1] = vp_grad_like(sim, node->in[1], node->label);
    for (unsigned i = 0; i < 2; i++)
        if (grads[i]) vp_give_grad(sim, vp_node_at(sim, index), i, grads[i]);
}

vp_t vp_index_put(vp_sim *sim, vp_t acc, vp_t values, vp_t indices, const char *label) {
    vp_t y = vp_view(sim, acc, numel_of(sim, acc), label);
    vp_t in[2] = {acc, values};
    vp_node *node = vp_record(sim, backward_index_put, label, in, 2, &y, 1);
    if (node) vp_save(sim, node, indices);
    return y;
}

static void backward_copy_slice(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t slice = node->aux[0];
    const char *label = node->label;
    bool base_grad = vp_needs_grad(sim, node, 0), src_grad = vp_needs_grad(sim, node, 1);
    vp_t src = node->in[1]; /* 0 unless it needs a gradient, as the base */
    vp_dtype dtype = dtype_of(sim, vp_grad_out(sim, node, 0));
    vp_t result = vp_grad_sized(sim, node->aux[1], dtype, label);
    vp_t clone = vp_grad_sized(sim, slice, dtype, label);
    if (base_grad) vp_drop(sim, vp_grad_sized(sim, slice, dtype, label)); /* zeros_like, copied into result */
    else vp_drop(sim, result);
    vp_t grad_src = 0;
    if (src_grad && numel_of(sim, src) < slice) { /* sum_to the broadcast source's size */
        grad_src = vp_grad_like(sim, src, label);
        vp_drop(sim, clone);
    } else if (src_grad) {
        grad_src = clone;
    } else {
        vp_drop(sim, clone);
    }
    if (base_grad) vp_give_grad(sim, vp_node_at(sim, index), 0, result);
    if (grad_src) vp_give_grad(sim, vp_node_at(sim, index), 1, grad_src);
}

vp_t vp_copy_slice(vp_sim *sim, vp_t base, vp_t src, uint64_t slice_numel, const char *label) {
    vp_t y = vp_view(sim, base, numel_of(sim, base), label);
    vp_t in[2] = {base, src};
    vp_node *node = vp_record(sim, backward_copy_slice, label, in, 2, &y, 1);
    if (node) {
        node->aux[0] = slice_numel;
        node->aux[1] = numel_of(sim, base);
    }
    return y;
}

static void backward_grouped_mm(vp_sim *sim, uint32_t index) {
    for (unsigned i = 0; i < 2; i++) {
        vp_node *node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) vp_give_grad(sim, node, i, vp_grad_like(sim, node->in[i], node->label));
    }
}

vp_t vp_grouped_mm(vp_sim *sim, vp_t x, vp_t w, bool w_transposed, vp_t offs, uint64_t rows, uint64_t out_features,
                   const char *label) {
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dtype_of(sim, x), label);
    vp_t in[2] = {x, w};
    vp_node *node = vp_record(sim, backward_grouped_mm, label, in, 2, &y, 1);
    if (node) {
        if (wants_grad(sim, w)) vp_save(sim, node, x);
        if (wants_grad(sim, x)) vp_save_view(sim, node, w, w_transposed);
        vp_save(sim, node, offs);
    }
    return y;
}

typedef struct {
    const vp_t *weights;
    unsigned n;
} grouped;

static void backward_grouped(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    const vp_t *weights = (const vp_t *)node->context;
    unsigned n = (unsigned)node->aux[0];
    if (vp_needs_grad(sim, node, 0)) vp_give_grad(sim, node, 0, vp_grad_like(sim, node->in[0], node->label));
    for (unsigned i = 0; i < n; i++)
        if (weights[i] && vp_at(sim, weights[i])->requires_grad)
            vp_deliver_grad(sim, weights[i], vp_grad_like(sim, weights[i], vp_node_at(sim, index)->label));
}

vp_t vp_grouped_linear(vp_sim *sim, vp_t x, const vp_t *weights, unsigned n, uint64_t rows, uint64_t out_features,
                       const char *label) {
    vp_t y = vp_new(sim, vp_numel(sim, rows, out_features), dtype_of(sim, x), label);
    bool any_weight = false;
    for (unsigned i = 0; i < n; i++) any_weight |= wants_grad(sim, weights[i]);
    /* the node's input is x; the weights' gradients are delivered by the rule */
    vp_t in[2] = {x, any_weight ? weights[0] : 0};
    vp_node *node = vp_record(sim, backward_grouped, label, in, 2, &y, 1);
    if (node) {
        node->in[1] = 0; /* not through the node's own routing */
        node->context = (void *)weights;
        node->aux[0] = n;
        if (any_weight) vp_save(sim, node, x);
    }
    return y;
}
