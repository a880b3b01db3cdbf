/* mpt_alibi.c — MPT's ALiBi table and causal mask, made once per step by
 * MptModel.forward (transformers 4.50-4.52, models/mpt/modeling_mpt.py)
 * before its blocks run; both are passed to every block (and to every
 * checkpointed call) and go when the model returns. */
#include "mpt_alibi.h"

#include "ops.h"

/* MptModel.forward without an attention mask: torch.ones((b, s)) in fp32,
 * a local until it returns. build_mpt_alibi_tensor(heads, max_seq_len): an
 * int32 arange of max_seq_len (1 - L .. 0) times the per-head slopes
 * ([1, heads, 1, 1] fp32) is [1, heads, 1, L] in fp32, squeezed (a view):
 * never cast to the model's dtype, whatever it is. The slopes (a few floats
 * per head, made and freed on the way) are left out. */
void vp_mpt_prepare_alibi(vp_step *step, uint64_t heads, uint64_t width) {
    vp_sim *sim = &step->sim;
    vp_t ones = vp_new(sim, vp_numel(sim, step->batch, step->seq), VP_FP32, "attention_mask.ones");
    vp_step_keep_local(step, ones, VP_LOCAL_OF_BODY);
    vp_drop(sim, ones);
    vp_t arange = vp_new(sim, width, VP_INT32, "alibi.arange");
    vp_step_put_tensor(step, VP_TENSOR_ALIBI, vp_new(sim, vp_numel(sim, heads, width), VP_FP32, "alibi"));
    vp_drop(sim, arange);
}

/* _prepare_4d_causal_attention_mask(ones, (b, s), inputs_embeds, 0) and
 * .bool() (modeling_attn_mask_utils.py, AttentionMaskConverter.to_4d), in
 * the embeddings' dtype D:
 *  - _make_causal_mask: torch.full((s, s)) in fp32 (no dtype given), an
 *    int64 arange and its + 1, their bool comparison for masked_fill_
 *    (in place), then .to(D) (a copy unless fp32), expanded to the batch;
 *  - _expand_mask: the ones expanded to [b, 1, s, s] and .to(D) (a copy
 *    unless fp32: the expanded view itself), 1.0 - it, its .to(bool), and
 *    masked_fill's result;
 *  - to_4d: that result's .bool() and the causal mask's masked_fill with it
 *    ([b, 1, s, s] in D); the [s, s] causal mask goes when to_4d returns;
 *  - MptModel: causal_mask.bool(), which the blocks' masked_fill keeps. */
void vp_mpt_prepare_mask(vp_step *step) {
    vp_sim *sim = &step->sim;
    vp_dtype dtype = step->activation;
    uint64_t n = vp_numel(sim, step->seq, step->seq), bn = vp_numel(sim, step->batch, n);
    vp_t full = vp_new(sim, n, VP_FP32, "causal_mask.full");
    vp_t cond = vp_new(sim, step->seq, VP_INT64, "causal_mask.arange");
    vp_t plus = vp_new(sim, step->seq, VP_INT64, "causal_mask.arange_plus_one");
    vp_t compare = vp_new(sim, n, VP_BOOL, "causal_mask.compare");
    vp_drop(sim, plus);
    vp_drop(sim, compare);
    vp_t causal = vp_to(sim, full, dtype, "causal_mask.to");
    vp_drop(sim, full);
    vp_drop(sim, cond);
    vp_t expanded = dtype == VP_FP32 ? 0 : vp_new(sim, bn, dtype, "attention_mask.expand_to");
    vp_t inverted = vp_new(sim, bn, dtype, "attention_mask.invert");
    vp_t as_bool = vp_new(sim, bn, VP_BOOL, "attention_mask.to_bool");
    vp_t padding = vp_new(sim, bn, dtype, "attention_mask.masked_fill");
    vp_drop(sim, as_bool);
    vp_drop(sim, inverted);
    vp_drop(sim, expanded);
    vp_t padding_bool = vp_new(sim, bn, VP_BOOL, "causal_mask.padding_bool");
    vp_t combined = vp_new(sim, bn, dtype, "causal_mask.masked_fill");
    vp_drop(sim, padding_bool);
    vp_drop(sim, padding);
    vp_drop(sim, causal);
    vp_step_put_tensor(step, VP_TENSOR_CAUSAL_MASK, vp_new(sim, bn, VP_BOOL, "causal_mask.bool"));
    vp_drop(sim, combined);
}
