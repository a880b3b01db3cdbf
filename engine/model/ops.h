/* ops.h — the op kinds the core knows; each lives in its own file and is
 * listed once in op_list.h (the registry: registry.c). */
#ifndef VP_OPS_H
#define VP_OPS_H

#include "model.h"
#include "op_context.h"

#define VP_OP(name) extern const vp_op_kind vp_op_##name;
#include "op_list.h"
#undef VP_OP

/* A projection as F.linear under the step's precision: autocast casts the
 * input (every call: activations are not cached) and the weight and bias
 * (cached per autocast region: they are leaves that require grad). The
 * rows come from the input. */
vp_t vp_project(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, const char *label);

/* Megatron's column-parallel projection: `out_local` outputs of this
 * tensor-parallel rank; under sequence parallelism the sequence-split input
 * is all-gathered first (vp_gathered_linear). */
vp_t vp_project_column(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_local, const char *label);

/* Megatron's row-parallel projection: the partial sums are all-reduced in
 * place, or reduce-scattered along the sequence under sequence parallelism. */
vp_t vp_project_row(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, const char *label);

/* F.layer_norm(x, weight, bias) over `rows` rows under the step's
 * precision: on autocast's fp32 list (autocast_mode.cpp KERNEL_CUDA(
 * layer_norm, fp32)), which casts every floating argument up, the 16-bit
 * weight and bias of a 16-bit model included (uncached: autocast caches
 * only casts down), the casts temporaries of the call. bias may be 0. */
vp_t vp_layer_norm_op(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t rows, const char *label);

/* HF's RMSNorm (LlamaRMSNorm, DeepseekV3RMSNorm) over `rows` rows of x. */
vp_t vp_hf_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows);
/* Olmo2RMSNorm: the weight applied in fp32, the cast back last. */
vp_t vp_olmo2_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows);
/* GemmaRMSNorm (Gemma 1-3): 1 + weight applied to the fp32 rows, the cast back last. */
vp_t vp_gemma_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows);
/* What Liger-Kernel's patch puts on a norm, an op field's values (the
 * rmsnorm op's liger, the attention's liger_qk): nothing, LigerRMSNorm's
 * in-place backward or an out-of-place one. */
enum { VP_LIGER_NORM_NONE, VP_LIGER_NORM_IN_PLACE, VP_LIGER_NORM_OUT_OF_PLACE };
extern const char *const vp_liger_norm_names[];
/* Liger-Kernel's LigerRMSNorm module (vp_liger_rms_norm) over `rows` rows
 * of x, with its backward's program count for the step's device. */
vp_t vp_liger_rms_norm_op(vp_step *step, vp_t x, vp_t weight, uint64_t rows, bool in_place, const char *label);
/* CohereLayerNorm (a LayerNorm without a bias, written out in fp32) over
 * `rows` rows; the weight may be one row or several (Cohere's q/k norms:
 * [heads, head_dim], broadcast over the tokens). */
vp_t vp_cohere_layer_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows);

/* apply_rotary_pos_emb for one of q, k with the step's cos and sin. */
vp_t vp_apply_rotary(vp_step *step, vp_t x, const char *label);
/* (x * cos) + (rotate(x) * sin) with the given tables (broadcast over
 * heads; the products in the promoted dtype). */
vp_t vp_rotate_with(vp_sim *sim, vp_t x, vp_t cos, vp_t sin, const char *label);


/* T5's position bias for the stack running now, masks added, [b, heads,
 * q, k]: its first self-attention's (relative positions) or
 * cross-attention's (zeros in the scores' dtype). */
vp_t vp_t5_position_bias(vp_step *step, bool cross, uint64_t heads, uint64_t k, vp_dtype scores_dtype);

/* Tensor-parallel helpers. */
uint64_t vp_split_tp(const vp_step *step, uint64_t n);          /* n / tp */
uint64_t vp_padded_vocab(uint64_t vocab, unsigned tp);           /* Megatron's vocabulary padding */
/* A rank's slice of the vocabulary: Megatron's padded one, or DTensor's
 * Shard(0) (exact: ceil(vocab / tp), torch.chunk's first and largest) */
uint64_t vp_local_vocab(uint64_t vocab, unsigned tp, bool exact);
/* A module's input under DTensor's sequence parallelism (dtensor_tp):
 * all-gathered once (PrepareModuleInput(Shard(1) -> Replicate())) for the
 * module's column-parallel linears; 0 where x is the input as it is. With
 * Float8 tensorwise and `weight` (the module's first linear) swapped,
 * torchao's PrepareFloat8ModuleInput: cast to float8, then gathered in
 * float8 (with or without sequence parallelism, never 0); `weight` 0: a
 * module without one (no float8 input). The caller drops it.
 * `linears`: how many linears read it inside a compiled block (0: outside
 * one, the head), for async TP's fusions (op_basic.c). */
vp_t vp_module_input(vp_step *step, vp_t x, vp_t weight, unsigned linears);

/* Run ops in sequence: each result replaces the previous one, which is
 * dropped as a rebound Python local is. x is borrowed; the result is owned. */
vp_t vp_run_ops(vp_step *step, const vp_op *ops, unsigned n, const vp_t *leaves, vp_t x);

/* The main loss with a branch's (op_branch.c) added, times its loss_weight:
 * loss + mtp_loss * lambda (a new reference; `loss` is taken over), or
 * `loss` itself when no branch ran. */
vp_t vp_branch_join_loss(vp_step *step, vp_t loss);

/* A dropout as nn.Dropout applies it: only while training. */
vp_t vp_train_dropout(vp_step *step, vp_t x, double p, const char *label);

#endif
