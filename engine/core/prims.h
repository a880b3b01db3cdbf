/* prims.h — PyTorch's primitive ops as the simulator sees them: what each
 * allocates, what autograd saves for backward (tools/autograd/derivatives.yaml,
 * PyTorch 2.x), and what its backward allocates. Composite ops (attention,
 * norms, MLPs) are written in terms of these, line by line like the Python
 * they imitate. Every function returns a new reference owned by the caller. */
#ifndef VP_PRIMS_H
#define VP_PRIMS_H

#include "sim.h"

/* Where kernels differ between devices, the rules follow `device`. */
typedef enum { VP_DEVICE_CUDA, VP_DEVICE_CPU } vp_device;

/* x[rows, in] @ w[out, in]^T (+ b): F.linear / addmm, or with `conv1d`
 * transformers' Conv1D (x @ w[in, out]). Saves x only when w needs a
 * gradient and w only when x does: a Linear's as weight.t(), a view that
 * is not contiguous. */
vp_t vp_linear(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, uint64_t out_features, bool conv1d,
               const char *label);

/* bitsandbytes' matmul_4bit (MatMul4Bit, bitsandbytes 0.45-0.46):
 * F.linear(x, dequantize_4bit(W).to(x.dtype).t(), b), the frozen bias
 * fused (no tensor of its own); the dequantized weight (in x's dtype) is
 * dropped, and before it, under double quantization, the `absmax_numel`
 * fp32 block scales dequantize_blockwise made first. Keeps nothing of x
 * (the weight is frozen; ctx.tensors holds the packed parameter); backward
 * dequantizes again for x's gradient. */
vp_t vp_linear_4bit(vp_sim *sim, vp_t x, vp_t w, uint64_t absmax_numel, uint64_t rows, uint64_t out_features,
                    const char *label);

/* bitsandbytes' MatMul8bitLt (LLM.int8, bitsandbytes 0.46) against a
 * frozen int8 weight (CB, with fp32 row scales): x cast to fp16 and
 * quantized row-wise (int8 plus an fp32 scale per row) after the outlier
 * search (llm_int8_threshold > 0), an int32 product dequantized to fp16 and cast
 * to x's dtype. x itself is kept (ctx.tensors = (None, subA, A)), a ctx
 * attribute the graph frees, not the node: the caller holds it
 * (vp_step_ctx_hold) when the output requires grad.
 * Backward dequantizes the weight into x's dtype (a copy, scaled in place)
 * for x's gradient. Outlier columns are data-dependent and left out: none
 * found. */
vp_t vp_linear_int8(vp_sim *sim, vp_t x, vp_t w, bool outlier_search, uint64_t rows, uint64_t out_features,
                    const char *label);

/* Transformer Engine's Linear under FP8 (TE 2.x, DelayedScaling) with the
 * input already quantized: `columnwise` (its FP8 transpose) is what it
 * saves for the weight gradient, the input itself is not kept; backward
 * quantizes grad_output rowwise and columnwise. */
vp_t vp_linear_fp8(vp_sim *sim, vp_t x, vp_t columnwise, vp_t w, vp_t b, uint64_t rows, uint64_t out_features,
                   const char *label);

/* torchao's Float8LinearRecipeName (torchao 0.19, float8/config.py
 * from_recipe_name): dynamic scaling per tensor; per row (every cast
 * axiswise, e4m3 throughout); per row with grad_weight computed in high
 * precision (and the weight scaled per tensor for grad_input). */
typedef enum { VP_FLOAT8_TENSORWISE, VP_FLOAT8_ROWWISE, VP_FLOAT8_ROWWISE_GW_HP, VP_FLOAT8_RECIPE_COUNT } vp_float8_recipe;

/* torchao's Float8Linear (torchao 0.19, float8/float8_linear.py,
 * matmul_with_hp_or_float8_args) under `recipe`, run eagerly (the
 * default, tensorwise, here; prims.c has the rowwise differences): x and
 * the weight w cast to float8_e4m3
 * for the forward GEMM and dropped after it; the function saves the
 * high-precision x and w (ctx.save_for_backward(input_hp, weight_hp_t));
 * backward casts again (grad_output to e5m2 twice, w and x once each).
 * No bias: Float8Linear adds it after the GEMM. `w_float8`: the weight
 * arrives in float8 (FSDP2's float8 all-gather), cast by nobody here;
 * `cuda`: the device (the CPU twin's in-place mixed-dtype temporaries). */
vp_t vp_linear_float8(vp_sim *sim, vp_t x, vp_t w, bool w_float8, vp_float8_recipe recipe, bool cuda, uint64_t rows,
                      uint64_t out_features, const char *label);

/* torchao's float8 tensor-parallel styles (float8_tensor_parallel.py,
 * tensorwise): PrepareFloat8ModuleInput and Float8RowwiseParallel cast a
 * linear's input to float8 before it reaches Float8Linear (which then
 * saves the 1-byte tensor, not the 16-bit one), then all-gather the float8
 * data over `gather` ranks (1: none); the scale's fp32 element is not
 * counted. The result's gradient is x's dtype and, under the gather, x's
 * size (a reduce-scatter). The gather is DTensor's (funcol: vp_funcol_all_gather's
 * flags). */
vp_t vp_float8_input(vp_sim *sim, vp_t x, unsigned gather, unsigned funcol, const char *label);

/* NoopFwToFloat8BwDynamic: forward, y as it is (a view); backward, its
 * gradient cast to float8 once, handed on in float8 to the linear (or the
 * reduce-scatter, which then gathers it in float8: vp_scatter). */
vp_t vp_float8_grad(vp_sim *sim, vp_t y, const char *label);

/* DTensor's loss_parallel (torch/distributed/tensor/parallel/loss.py):
 * the log_softmax of a rank's vocabulary slice as its handler computes it
 * (shifted and exp(shifted) full-size besides the result), and nll_loss,
 * whose backward does both backwards at once (a zero-filled grad_input,
 * exp(x), their sum and the product, full-size); `rows` tokens. */
vp_t vp_loss_parallel_log_softmax(vp_sim *sim, vp_t x, uint64_t rows, const char *label);
vp_t vp_loss_parallel_nll(vp_sim *sim, vp_t log_probs, vp_t target, uint64_t rows, const char *label);

/* A batched matmul of two activations (bmm): saves both, b as the
 * transposed view it is with `b_transposed` (key.transpose(2, 3) of
 * contiguous keys, which matmul's batch fold views rather than copies). */
vp_t vp_matmul(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, bool b_transposed, const char *label);
/* The same with either operand a view that is not contiguous
 * (`a_strided`, `b_strided`): one sequence's heads, which the batch fold
 * views rather than copies, keep the [b, s, heads, d] layout's strides. */
vp_t vp_matmul_views(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, bool a_strided, bool b_strided,
                     const char *label);

/* Elementwise a + b (b may be broadcast, smaller, or not require grad). The
 * result has the promoted dtype. Saves nothing. */
vp_t vp_add(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label);

/* Elementwise a - b (broadcast, promoted): saves nothing; backward passes
 * the gradient to a and gives b -grad, a new tensor (SubBackward0). */
vp_t vp_sub(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label);

/* a += b in place (b broadcast, or wider: a keeps its dtype): a new
 * version of a's storage. Saves nothing; the gradient passes to a as it
 * is and to b reduced or cast to fit (T5's scores += position_bias). */
vp_t vp_add_(vp_sim *sim, vp_t a, vp_t b, const char *label);

/* Elementwise a * b with broadcasting: saves b if a needs a gradient and a if
 * b does (mul.Tensor). */
vp_t vp_mul(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, const char *label);
/* The same with the result's dtype given: a 0-dim operand does not promote
 * a dimensioned one of its category (a 0-dim fp32 tensor times bf16 rows
 * is bf16: c10/core/ScalarType.h, at::native::result_type's priorities). */
vp_t vp_mul_as(vp_sim *sim, vp_t a, vp_t b, uint64_t out_numel, vp_dtype dtype, const char *label);
/* a.mul_(b), b broadcast over a: a new version of a's storage. MulBackward0
 * saves b for a's gradient and, when b needs one, a clone of a as it was
 * before the op (the generated in-place code clones self for it; PyTorch
 * 1.13's VariableType, checked: _saved_self is not a's storage). */
vp_t vp_mul_(vp_sim *sim, vp_t a, vp_t b, const char *label);
/* The same on a view of all of a (a.view(...).mul_(b), a needing a
 * gradient): autograd wraps MulBackward0 in CopySlices, whose backward
 * makes a base-sized result holding the gradient, clones the view's part,
 * runs MulBackward0 on the clone (a's gradient copied back into result, b's
 * a new a-sized tensor reduced to b's size) and lets the clone go
 * (torch/csrc/autograd/functions/tensor.cpp, CopySlices::apply, 1.13). */
vp_t vp_mul_view_(vp_sim *sim, vp_t a, vp_t b, const char *label);

/* a times (or over) a Python scalar or a 0-dim tensor that needs no
 * gradient: saves that 0-dim tensor; backward allocates grad * scalar. */
vp_t vp_scale(vp_sim *sim, vp_t a, const char *label);
/* a /= (or *=) a Python number in place: a new version of a's storage
 * (no allocation); backward as vp_scale's. */
vp_t vp_scale_(vp_sim *sim, vp_t a, const char *label);
/* -a: saves nothing; backward allocates -grad. */
vp_t vp_neg(vp_sim *sim, vp_t a, const char *label);

/* a plus a scalar or a tensor that needs no gradient: the gradient passes
 * through unchanged. `out_dtype` lets a wider operand promote the result. */
vp_t vp_shift(vp_sim *sim, vp_t a, vp_dtype out_dtype, uint64_t out_numel, const char *label);

/* Ops that save their input (gelu, silu, pow) or their output (tanh, rsqrt,
 * softmax, log_softmax, relu). `backward_temps` extra input-sized tensors
 * are alive at the end of the backward expression. */
typedef enum { VP_SAVES_INPUT, VP_SAVES_OUTPUT } vp_saves;
vp_t vp_unary(vp_sim *sim, vp_t a, vp_saves saves, unsigned backward_temps, vp_dtype out_dtype,
              const char *label);

/* Gemma 2's soft cap, cap * tanh(x / cap), as three tensor ops: the
 * quotient, tanh (kept for backward) and the product. Takes over the
 * reference to x; returns a new one. */
vp_t vp_softcap(vp_sim *sim, vp_t x, const char *label);

/* torch.cat of n tensors of one dtype (any number: recorded as a tree of
 * nodes whose outputs are views of the result); backward gives each a view
 * of the gradient. parts are borrowed; the result is owned. */
vp_t vp_cat_many(vp_sim *sim, const vp_t *parts, unsigned n, const char *label);

/* torch.clamp(x, min=min, max=max) with 0-dim tensor bounds (clamp.Tensor):
 * a new tensor of x's dtype; ClampBackward1 keeps x and both bounds. */
vp_t vp_clamp(vp_sim *sim, vp_t x, vp_t min, vp_t max, const char *label);

/* torch.clamp(x, min, max) with Python numbers (clamp with Scalar
 * bounds; derivatives.yaml: clamp_backward(grad, self, min, max)): a new
 * tensor of x's dtype keeping x; backward builds
 * where((self >= min).logical_and_(self <= max), grad, 0): two bool
 * temporaries beside the gradient (FunctionsManual.cpp clamp_backward). */
vp_t vp_clamp_scalar(vp_sim *sim, vp_t x, const char *label);
/* The same with `bounds` Python numbers given (1: clamp(max=limit) alone,
 * whose backward makes one comparison, where(self <= max, grad, 0)). */
vp_t vp_clamp_bounds(vp_sim *sim, vp_t x, unsigned bounds, const char *label);

/* torch.cumsum(x, dim): a new tensor that keeps nothing (derivatives.yaml:
 * cumsum_backward(grad.to(self.scalar_type()), dim)); backward is
 * grad.flip(dim).cumsum(dim).flip(dim) (FunctionsManual.cpp
 * cumsum_backward): two gradient-sized temporaries beside the result. */
vp_t vp_cumsum(vp_sim *sim, vp_t x, const char *label);

/* F.conv1d(x, w, b, padding, groups = channels), a depthwise convolution
 * to `out_numel` elements, as CUDA runs it (ATen Convolution.cpp:
 * ConvBackend::CudaDepthwise2d, at::_conv_depthwise2d(input.contiguous(),
 * weight, ...)): a contiguous copy of x when `strided` (gone with the
 * call), the output in x's dtype. ConvolutionBackward0 keeps x and w
 * (derivatives.yaml convolution: convolution_backward(grad, input, weight,
 * ...)); backward copies x contiguous again when strided, makes x's and
 * w's gradients (conv_depthwise2d_backward) and b's (grad_output.sum over
 * batch and length). */
vp_t vp_conv1d_depthwise(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t out_numel, bool strided, const char *label);

/* A reduction over the last dimension to `out_numel` elements that keeps
 * nothing (mean in 2.x saves only sizes); backward expands and divides into
 * an input-sized tensor. */
vp_t vp_reduce(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label);

/* A sum over a dimension to `out_numel` elements: keeps nothing; backward
 * expands the gradient, a view with no memory of its own. */
vp_t vp_sum(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label);
/* The same over a view of `a` that splits the summed dimension out
 * (a.view(n, k, h).sum(dim=1)): the view's backward reshapes the expanded
 * gradient back to a's shape, which a stride-0 dimension makes a copy,
 * made before any later node runs (before a checkpoint's recompute that a
 * later node's saved tensor triggers). */
vp_t vp_sum_of_view(vp_sim *sim, vp_t a, uint64_t out_numel, const char *label);

/* x.to(dtype): a no-op returning x itself when the dtype matches. */
vp_t vp_to(vp_sim *sim, vp_t x, vp_dtype dtype, const char *label);

/* A copy with a new layout (.contiguous(), reshape of a non-viewable
 * tensor): backward passes the gradient through. */
vp_t vp_copy(vp_sim *sim, vp_t x, const char *label);

/* x.contiguous() (or a reshape that may view): x itself, a new reference,
 * when its layout allows already (`viewable`: a slice or transpose whose
 * leading dimension has size 1, say), else vp_copy. */
vp_t vp_contiguous(vp_sim *sim, vp_t x, bool viewable, const char *label);

/* A view: no storage, the gradient passes through. */
vp_t vp_alias(vp_sim *sim, vp_t x, const char *label);

/* Split into `parts` equal views (tensor.split): backward allocates the whole
 * gradient (SplitBackward concatenates, zero-filling missing parts). */
void vp_split(vp_sim *sim, vp_t x, unsigned parts, vp_t *out, const char *label);

/* torch.split into parts of the given sizes (views, at most three): one
 * gradient of the whole input in backward. */
void vp_split_sizes(vp_sim *sim, vp_t x, unsigned parts, const uint64_t *numels, vp_t *out, const char *label);

/* F.pad(x, ...) with zeros to `numel` elements: a new tensor; backward
 * (constant_pad_nd with the negated padding) makes x's gradient anew. */
vp_t vp_pad(vp_sim *sim, vp_t x, uint64_t numel, const char *label);

/* x.expand(...) to `numel` elements: a view; backward sums the gradient
 * back to x's size (sum_to_size), a new tensor. */
vp_t vp_expand(vp_sim *sim, vp_t x, uint64_t numel, const char *label);
/* vp_split and vp_split_sizes along the last dimension (chunk(n, dim=-1),
 * split(sizes, dim=-1)): each part a view with gaps, further in than the
 * one before. */
void vp_split_columns(vp_sim *sim, vp_t x, unsigned parts, vp_t *out, const char *label);
void vp_split_columns_sizes(vp_sim *sim, vp_t x, unsigned parts, const uint64_t *numels, vp_t *out, const char *label);
/* x[e] of a stacked tensor (a 3-D expert parameter's e-th matrix):
 * `numel` contiguous elements from `start` in. */
vp_t vp_slice_rows(vp_sim *sim, vp_t x, uint64_t numel, uint64_t start, const char *label);
/* x[..., start::step] of the last dimension, `numel` elements: a view
 * with gaps at `start` (GPT-OSS's gate_up[..., ::2] and [..., 1::2]). */
vp_t vp_slice_columns(vp_sim *sim, vp_t x, uint64_t numel, uint64_t start, const char *label);

/* A slice x[..., a:b] (a view): backward allocates a zero-filled gradient
 * of the whole input and copies into it (slice_backward). */
vp_t vp_slice(vp_sim *sim, vp_t x, uint64_t numel, const char *label);

/* expand + reshape (repeat_kv): a copy `times` larger; backward sums back. */
vp_t vp_repeat(vp_sim *sim, vp_t x, unsigned times, const char *label);

/* cat of two tensors, in their promoted dtype; backward hands out views of
 * the gradient (copies for an input of another dtype). */
vp_t vp_cat(vp_sim *sim, vp_t a, vp_t b, const char *label);

/* native_dropout: output plus a one-byte bool mask, which it saves. p == 0
 * returns x itself (ATen's dropout short-circuits). */
vp_t vp_dropout(vp_sim *sim, vp_t x, double p, const char *label);

/* native_layer_norm over `rows` rows: saves input, weight, bias, and the
 * per-row mean and rstd (fp32 on CUDA: at::opmath_type; input dtype on CPU). */
vp_t vp_layer_norm(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, vp_device device,
                   const char *label);

/* A fused RMSNorm kernel (apex FusedRMSNorm, Transformer Engine): saves the
 * input, the weight and one fp32 rstd per row. */
vp_t vp_rms_norm(vp_sim *sim, vp_t x, vp_t w, uint64_t rows, const char *label);

/* Liger-Kernel's LigerRMSNormFunction (src/liger_kernel/ops/rms_norm.py,
 * 2024-2026): vp_rms_norm's forward (Y and the fp32 RSTD made empty for the
 * kernel, X, W and RSTD saved). Backward (rms_norm_backward): W's gradient
 * gathered per program in `_dW`, [programs, h] fp32 (programs: the GPU's
 * multiprocessor count, 1 on the CPU), summed over the programs and cast to
 * W's dtype; X's gradient is the incoming one itself with `in_place`
 * (LigerRMSNorm's default), torch.zeros_like(dY) without. */
vp_t vp_liger_rms_norm(vp_sim *sim, vp_t x, vp_t w, uint64_t rows, bool in_place, uint64_t programs,
                       const char *label);

/* Liger-Kernel's LigerSiLUMulFunction (src/liger_kernel/ops/swiglu.py):
 * silu(gate) * up made empty for the kernel, gate and up saved; backward
 * (swiglu_backward) writes their gradients over the saved tensors and
 * returns them, allocating nothing. */
vp_t vp_liger_swiglu(vp_sim *sim, vp_t gate, vp_t up, const char *label);

/* Liger-Kernel's LigerFusedMoEFunction (src/liger_kernel/ops/fused_moe.py,
 * 2026), transformers 5's experts under Liger (LigerExperts): x [tokens, h]
 * routed to top-k of `experts` 3-D SwiGLU experts (w1 [experts, 2 inter,
 * h], w2 [experts, h, inter]) by `weights` [tokens, k]. compute_routing_
 * metadata's int32 tables (per-tile expert counts, prefix sums, the
 * gather and scatter indices, `row_tiles` tiles of rows), then
 * pre_act [tk, 2 inter], post_act [tk, inter], Y [tk, h] and the weighted
 * sum [tokens, h]; it saves x, both weights, pre_act, the weights and six
 * index tables. Backward makes d_pre_act, weighted_act, dS, both weights'
 * gradients (zeros_like), dx_expanded [tk, h] and dx. */
vp_t vp_liger_fused_moe(vp_sim *sim, vp_t x, vp_t w1, vp_t w2, vp_t weights, uint64_t tokens, unsigned k,
                        unsigned experts, uint64_t inter, uint64_t hidden, uint64_t row_tiles, const char *label);
/* fused_moe.py's BLOCK_M_TOKEN: `row_tiles` (num_m_tiles) counts each
 * expert's rows in tiles of this many */
enum { VP_LIGER_MOE_TILE_ROWS = 64 };

/* A fused gated activation (Megatron's bias_swiglu): half its input's size
 * out; saves the input. */
vp_t vp_glu(vp_sim *sim, vp_t x, const char *label);

/* torch.where(condition, x, scalar): saves the condition (a resident mask). */
vp_t vp_where(vp_sim *sim, vp_t x, vp_t condition, const char *label);

/* x.masked_fill_(mask, value): x's new version (a view of its storage);
 * MaskedFillBackward0 keeps the mask; backward a new gradient like x. */
vp_t vp_masked_fill_(vp_sim *sim, vp_t x, vp_t mask, const char *label);

/* Embedding lookup of `rows` indices into w[vocab, dim]: saves the indices;
 * backward allocates a dense vocab x dim gradient (embedding_dense_backward),
 * on CUDA with an fp32 partial-sum workspace per index (EmbeddingBackwardKernel.cu). */
vp_t vp_embedding(vp_sim *sim, vp_t indices, vp_t w, uint64_t rows, uint64_t dim, vp_device device,
                  const char *label);

/* Megatron's column-parallel linear under sequence parallelism
 * (LinearWithGradAccumulationAndAsyncCommunication): the sequence-split
 * input x (rows / parts of them) is all-gathered into a transient buffer of
 * `rows` rows for the matmul; x, not the gathered buffer, is saved, and
 * backward gathers it again and reduce-scatters the input's gradient. */
vp_t vp_gathered_linear(vp_sim *sim, vp_t x, vp_t w, vp_t b, uint64_t rows, uint64_t out_features, unsigned parts,
                        const char *label);

/* Reduce-scatter along the sequence into `parts` (the row-parallel output
 * under sequence parallelism): a new tensor 1/parts the size; backward
 * all-gathers the gradient. */
vp_t vp_scatter(vp_sim *sim, vp_t x, unsigned parts, const char *label);

/* All-gather into `parts` times the rows (tokens gathered over a group): a
 * new tensor; backward reduce-scatters the gradient into one like x. */
vp_t vp_all_gather(vp_sim *sim, vp_t x, unsigned parts, const char *label);

/* DTensor's all-gather and reduce-scatter of sequence parallelism's
 * Shard(1) through torch's functional collectives (prims.c): as
 * vp_all_gather and vp_scatter, with funcol's chunk + cat beside each
 * collective, forward and backward, unless Inductor's micro-pipeline TP
 * fused it with its matmul (async TP): VP_FUNCOL_FUSED_FORWARD for the
 * forward's collective, VP_FUNCOL_FUSED_BACKWARD for the backward's. A
 * fused op's symmetric-memory request raises sim->symm_mem_request. */
enum { VP_FUNCOL_FUSED_FORWARD = 1u, VP_FUNCOL_FUSED_BACKWARD = 2u };
vp_t vp_funcol_all_gather(vp_sim *sim, vp_t x, unsigned parts, unsigned funcol, const char *label);
vp_t vp_funcol_reduce_scatter(vp_sim *sim, vp_t x, unsigned parts, unsigned funcol, const char *label);

/* torch.logsumexp(x, -1) to `rows` elements: amax, one x-sized
 * temporary ((self - maxes).exp_()) while it sums; LogsumexpBackward0
 * keeps x and the result (derivatives.yaml, PyTorch 1.13), its backward
 * three x-sized tensors (grad * (self - result).exp()). */
vp_t vp_logsumexp(vp_sim *sim, vp_t x, uint64_t rows, const char *label);

/* x.var(-1) (or with `std` x.std(-1)) to `rows` elements: the result
 * alone; VarBackward0 keeps x, StdBackward0 x and the result; backward
 * two x-sized tensors and a few rows (var_backward). */
vp_t vp_var(vp_sim *sim, vp_t x, uint64_t rows, bool std, const char *label);

/* x.amax(-1) or x.amin(-1) (keepdim) to `rows` elements: the result alone;
 * AmaxBackward0 / AminBackward0 keep x and the result; backward splits
 * the gradient among the ties (scale_grad_by_count): an x-sized bool mask,
 * its int64 copy for the count (the sum's, on every device), an x-sized
 * gradient, and on the CPU (`device`) x-sized and row-sized copies of the
 * mask and count in the gradient's dtype that CUDA's kernels do not make. */
vp_t vp_amax(vp_sim *sim, vp_t x, uint64_t rows, vp_device device, const char *label);

/* x[indices] along rows (tensor indexing with an index tensor): a new
 * tensor of `numel` elements; saves the indices; backward builds a
 * zero-filled gradient of all of x and puts rows into it (index_backward). */
vp_t vp_index(vp_sim *sim, vp_t x, vp_t indices, uint64_t numel, const char *label);

/* x[first, second]: advanced indexing with two index tensors
 * (IndexBackward0 saves both; save_on_cpu packs each, even when both are
 * views of one tensor, as torch.where's columns are). */
vp_t vp_index_pair(vp_sim *sim, vp_t x, vp_t first, vp_t second, uint64_t numel, const char *label);

/* x.gather(dim, index): like vp_index, but GatherBackward0 saves x too
 * (gather_backward takes self). */
vp_t vp_gather(vp_sim *sim, vp_t x, vp_t index, uint64_t numel, const char *label);

/* torch.topk(x, k): values (x's dtype) and int64 indices of `numel`
 * elements each; saves the indices; backward scatters into a zero-filled
 * gradient of x. *indices_out gets the indices (a new reference). */
vp_t vp_topk(vp_sim *sim, vp_t x, uint64_t numel, vp_t *indices_out, const char *label);

/* acc.index_add_(0, index, source), or scatter_add_: in place; returns
 * acc's new version (a view of the same storage). Saves the index, and
 * with keeps_source the source (index_add's gradient,
 * grad.index_select(dim, index).expand_as(source), needs it; scatter_add's,
 * grad.gather(dim, index), does not); backward passes acc's gradient on
 * and gives source one of its size. */
vp_t vp_index_add(vp_sim *sim, vp_t acc, vp_t source, vp_t index, bool keeps_source, const char *label);

/* acc.index_add(dim, index, source), out of place: a new tensor like acc
 * whose node is index_add_'s (IndexAddBackward0 in PyTorch 1.13 keeps the
 * index and, when it needs a gradient, the source). */
vp_t vp_index_added(vp_sim *sim, vp_t acc, vp_t source, vp_t index, const char *label);

/* x.scatter_add(dim, index, src) and x.scatter(dim, index, src), out of
 * place: a new tensor like x; both keep only the index. scatter_add passes
 * x's gradient through; scatter gives x a new one (grad.scatter(dim,
 * index, 0)); src gets grad.gather(dim, index), a new tensor of its size. */
vp_t vp_scatter_add(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label);
vp_t vp_scatter_src(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label);

/* The in-place forms x.scatter_add_(dim, index, src), x.scatter_(dim,
 * index, src): x's new version (a view of its storage, nothing new), the
 * same nodes and savings. */
vp_t vp_scatter_add_(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label);
vp_t vp_scatter_src_(vp_sim *sim, vp_t x, vp_t index, vp_t src, const char *label);

/* x.index_copy_(dim, index, source): x's new version; IndexCopyBackward0
 * keeps the index and, when it needs a gradient, the source; backward
 * gives x and the source each a new gradient of its size. */
vp_t vp_index_copy_(vp_sim *sim, vp_t x, vp_t source, vp_t index, const char *label);

/* x itself (a view), with `side` hooked onto it: in backward x's gradient
 * passes through and side gets a new one of its own size (DeepSeek's
 * AddAuxiliaryLoss, whose loss gets ones(1)). */
vp_t vp_attach(vp_sim *sim, vp_t x, vp_t side, const char *label);

/* acc[indices] = values (index_put_, no accumulate): in place; returns
 * acc's new version. Saves the indices as given (a bool mask stays a
 * mask); backward gives acc a new gradient like it and values one like
 * values. */
vp_t vp_index_put(vp_sim *sim, vp_t acc, vp_t values, vp_t indices, const char *label);

/* base[..., slice] = src (Tensor.__setitem__: copy_ into a view of base,
 * autograd's CopySlices around CopyBackwards; torch/csrc/autograd/
 * functions/tensor.cpp, PyTorch 1.13-2.x): in place, nothing allocated;
 * returns base's new version. The slice is slice_numel elements of base;
 * src may be smaller (broadcast). Backward: a base-sized result with the
 * incoming gradient copied in (new_empty_strided, copy_), the slice's
 * contiguous clone, and CopyBackwards' zeros_like of it when the base needs
 * a gradient (copied into the result's slice, gone as the rule returns,
 * with the result when the base needs none); the clone is src's gradient,
 * summed to src's size (validate_outputs' sum_to) when src was broadcast. */
vp_t vp_copy_slice(vp_sim *sim, vp_t base, vp_t src, uint64_t slice_numel, const char *label);

/* A grouped GEMM over the experts of one rank (Megatron's GroupedMLP,
 * TEGroupedLinear): x's `rows` rows in `n` groups, group i through
 * weights[i] ([out_features x in]); one output of rows x out_features.
 * Saves x; backward allocates x's gradient and each weight's, which go to
 * the weights at once. `weights` must outlive the step. */
vp_t vp_grouped_linear(vp_sim *sim, vp_t x, const vp_t *weights, unsigned n, uint64_t rows, uint64_t out_features,
                       const char *label);

/* torch._grouped_mm(x, w.transpose(-2, -1), offs): x's `rows` rows in
 * groups (offs, int32 offsets, one per group) each through its slice of
 * the 3-D parameter w ([groups, out_features, in]); one new output of rows
 * x out_features in x's dtype (not on autocast's lists). Saves x when w
 * needs a gradient, w when x does (the transposed view, or with
 * !w_transposed w itself: transformers' _grouped_linear with is_transposed,
 * GPT-OSS's [groups, in, out_features] layout), and offs. Backward (_grouped_mm_mat1_backward, then
 * _mat2_backward, torch/csrc/autograd/FunctionsManual.cpp): x's gradient,
 * then w's whole, made in w's own layout (the transposed view's is
 * column-major), so AccumulateGrad takes it without a copy. */
vp_t vp_grouped_mm(vp_sim *sim, vp_t x, vp_t w, bool w_transposed, vp_t offs, uint64_t rows, uint64_t out_features,
                   const char *label);

/* nll_loss(log_probs, target) with mean reduction: a scalar output and total
 * weight; saves its input and target; backward allocates a zero-filled
 * gradient the size of the input. */
vp_t vp_nll_loss(vp_sim *sim, vp_t log_probs, vp_t target, const char *label);

#endif
