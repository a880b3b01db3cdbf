/* op_t5.c — T5's position biases and the bridge from its encoder to its
 * decoder, as transformers 4.46-4.52 compute them (T5Stack,
 * T5Attention.compute_bias, T5ForConditionalGeneration). T5 adds its masks
 * to a per-stack position bias, and every attention layer of the stack adds
 * that bias to its scores in place. */
#include "ops.h"

/* ---- position biases ---- */

enum { BIAS_HEADS, BIAS_BUCKETS, BIAS_KIND, BIAS_FIELDS };

enum { KIND_ENCODER, KIND_DECODER, KIND_CROSS };
static const char *const kind_names[] = {"encoder", "decoder", "cross", NULL};

static const vp_field bias_fields[BIAS_FIELDS] = {
    [BIAS_HEADS] = {"heads", VP_FIELD_INT, true, 0, 1, 1 << 14, NULL, "attention heads"},
    [BIAS_BUCKETS] = {"buckets", VP_FIELD_INT, false, 32, 1, 1 << 16, NULL, "relative_attention_num_buckets"},
    [BIAS_KIND] = {"kind", VP_FIELD_ENUM, true, 0, 0, 0, kind_names,
                   "encoder (bidirectional buckets, the padding mask), decoder (causal buckets, the causal mask) or "
                   "cross (zeros and the encoder's padding mask)"},
};

/* The encoder's and the decoder's first self-attention own the bucket table. */
static unsigned bias_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    (void)split;
    bool table = vp_op_u64(op, BIAS_KIND) != KIND_CROSS;
    out[0] = vp_param(table ? vp_op_u64(op, BIAS_BUCKETS) * vp_op_u64(op, BIAS_HEADS) : 0,
                      "relative_attention_bias.weight", VP_MODULE_NONE, 0);
    out[0].rows = vp_op_u64(op, BIAS_BUCKETS);
    return 1;
}

/* (1.0 - mask[:, None, None, :].to(dtype)) * finfo(dtype).min: the
 * encoder's padding mask as T5Stack and invert_attention_mask make it,
 * [b, 1, 1, s] in the hidden states' dtype. The batch's mask is int64;
 * PEFT's prompt tuning passes an fp32 one, which .to() returns as it is
 * when the dtype is fp32. */
static vp_t padding_mask(vp_step *step) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_numel(sim, step->batch, step->source_seq);
    bool as_is = vp_step_tensor(step, VP_TENSOR_PROMPT_MASK) && step->activation == VP_FP32;
    vp_t cast = as_is ? 0 : vp_new(sim, n, step->activation, "attention_mask.to");
    vp_t inverted = vp_new(sim, n, step->activation, "attention_mask.invert");
    vp_drop(sim, cast);
    vp_t mask = vp_new(sim, n, step->activation, "attention_mask.extended");
    vp_drop(sim, inverted);
    return mask;
}

/* The decoder's causal mask from T5Stack's all-ones attention mask
 * (_prepare_4d_causal_attention_mask_with_cache_position): full() and
 * triu() of [t, k], a bool comparison, the expansion cloned to
 * [b, 1, t, k], then the padding mask added, compared with 0 and
 * masked_fill-ed back in (three more [b, 1, t, k] temporaries). k is t, or
 * p + t behind a cached prefix of p (the ones mask is past + seq long). */
static vp_t causal_mask(vp_step *step) {
    vp_sim *sim = &step->sim;
    uint64_t t = step->seq, k = t + step->past_tokens, tt = vp_numel(sim, t, k), btt = vp_numel(sim, step->batch, tt);
    vp_t ones = vp_new(sim, vp_numel(sim, step->batch, k), VP_FP32, "attention_mask.ones");
    vp_step_keep_local(step, ones, VP_LOCAL_OF_BODY);
    vp_drop(sim, ones);
    vp_t full = vp_new(sim, tt, step->activation, "causal_mask.full");
    vp_t triu = vp_new(sim, tt, step->activation, "causal_mask.triu");
    vp_drop(sim, full);
    vp_t compare = vp_new(sim, tt, VP_BOOL, "causal_mask.compare");
    vp_drop(sim, compare);
    vp_t mask = vp_new(sim, btt, step->activation, "causal_mask.clone");
    vp_drop(sim, triu);
    /* the mask plus the fp32 ones: fp32 whatever the mask's dtype */
    vp_t padded = vp_new(sim, btt, VP_FP32, "causal_mask.padding");
    vp_t is_padding = vp_new(sim, btt, VP_BOOL, "causal_mask.padding_eq");
    vp_drop(sim, padded);
    vp_t filled = vp_new(sim, btt, step->activation, "causal_mask.masked_fill");
    vp_drop(sim, filled);
    vp_drop(sim, is_padding);
    return mask;
}

/* T5Attention._relative_position_bucket on the [q, k] int64 relative
 * positions, tensor by tensor (L: int64, B: bool, F: fp32, all [q, k]):
 * bidirectional (the encoder), half the buckets for each direction:
 *   (relative_position > 0).to(long) * num_buckets, added to the Python
 *   int 0 (a new L), then abs(relative_position);
 * causal (the decoder): -torch.min(relative_position, zeros_like(...));
 * then for both: is_small (B), the log-scaled large positions (fp32 steps,
 * .to(long), max_exact + ...), min() with a full_like, and torch.where
 * added to the buckets (in place for the encoder; for the decoder 0 + it,
 * a new L). Returns the buckets. */
static vp_t position_buckets(vp_sim *sim, uint64_t qk, bool bidirectional) {
    vp_t buckets = 0, position;
    if (bidirectional) {
        vp_t positive = vp_new(sim, qk, VP_BOOL, "position_bias.positive");
        vp_t as_long = vp_new(sim, qk, VP_INT64, "position_bias.positive_long");
        vp_drop(sim, positive);
        vp_t scaled = vp_new(sim, qk, VP_INT64, "position_bias.positive_scaled");
        vp_drop(sim, as_long);
        buckets = vp_new(sim, qk, VP_INT64, "position_bias.buckets");
        vp_drop(sim, scaled);
        position = vp_new(sim, qk, VP_INT64, "position_bias.abs");
    } else {
        vp_t zeros = vp_new(sim, qk, VP_INT64, "position_bias.zeros_like");
        vp_t least = vp_new(sim, qk, VP_INT64, "position_bias.min");
        vp_drop(sim, zeros);
        position = vp_new(sim, qk, VP_INT64, "position_bias.neg");
        vp_drop(sim, least);
    }
    vp_t is_small = vp_new(sim, qk, VP_BOOL, "position_bias.is_small");
    /* max_exact + (log(rp.float() / max_exact) / log(...) * n).to(long) */
    vp_t f = vp_new(sim, qk, VP_FP32, "position_bias.float");
    for (unsigned i = 0; i < 4; i++) { /* / max_exact, log, / log(...), * (num_buckets - max_exact) */
        vp_t next = vp_new(sim, qk, VP_FP32, "position_bias.log_scale");
        vp_drop(sim, f);
        f = next;
    }
    vp_t truncated = vp_new(sim, qk, VP_INT64, "position_bias.to_long");
    vp_drop(sim, f);
    vp_t large = vp_new(sim, qk, VP_INT64, "position_bias.if_large");
    vp_drop(sim, truncated);
    vp_t full = vp_new(sim, qk, VP_INT64, "position_bias.full_like");
    vp_t capped = vp_new(sim, qk, VP_INT64, "position_bias.if_large_min");
    vp_drop(sim, full);
    vp_drop(sim, large);
    vp_t chosen = vp_new(sim, qk, VP_INT64, "position_bias.where");
    if (!bidirectional) buckets = vp_new(sim, qk, VP_INT64, "position_bias.buckets");
    vp_drop(sim, chosen);
    vp_drop(sim, capped);
    vp_drop(sim, is_small);
    vp_drop(sim, position);
    return buckets;
}

/* compute_bias(q, k): memory_position - context_position ([q, k] int64;
 * the aranges are left out), the buckets, the table looked up ([q, k,
 * heads], keeping the buckets), permuted to [1, heads, q, k] and sliced
 * [:, :, -q:, :]. The permuted view's gradient is made contiguous by
 * embedding_dense_backward (a new tensor, as an expand's backward makes);
 * the slice's backward builds a zero-filled gradient of the whole. */
static vp_t relative_bias(vp_step *step, vp_t table, uint64_t heads, uint64_t q, uint64_t k, bool bidirectional) {
    vp_sim *sim = &step->sim;
    uint64_t qk = vp_numel(sim, q, k);
    vp_t relative = vp_new(sim, qk, VP_INT64, "position_bias.relative_position");
    vp_t buckets = position_buckets(sim, qk, bidirectional);
    vp_drop(sim, relative);
    vp_t values = vp_embedding(sim, buckets, table, qk, heads, step->recipe->device, "relative_attention_bias");
    vp_drop(sim, buckets);
    vp_t permuted = vp_expand(sim, values, vp_at(sim, values)->numel, "position_bias.permute");
    vp_drop(sim, values);
    vp_t sliced = vp_slice(sim, permuted, vp_at(sim, permuted)->numel, "position_bias.slice");
    vp_drop(sim, permuted);
    return sliced;
}

/* T5Stack before its layers: the masks (the encoder's padding mask, the
 * decoder's causal mask, the decoder's inverted encoder mask for
 * cross-attention), locals of the stack; the bias itself is made by the
 * stack's first attention layer (vp_t5_position_bias). */
static vp_t bias_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    unsigned kind = (unsigned)vp_op_u64(op, BIAS_KIND);
    vp_t mask = kind == KIND_DECODER ? causal_mask(step) : padding_mask(step);
    /* T5Stack passes each block its mask, the stack's position biases (the
     * first block makes them, the next ones take them) and cache_position */
    vp_step_put_tensor(step, kind == KIND_CROSS ? VP_TENSOR_CROSS_MASK : VP_TENSOR_SELF_MASK, mask);
    vp_step_pass_tensor(step, kind == KIND_CROSS ? VP_TENSOR_CROSS_BIAS : VP_TENSOR_POSITION_BIAS, 1);
    vp_step_pass_tensor(step, VP_TENSOR_POSITION_IDS, 1);
    vp_tensor_slot table = kind == KIND_ENCODER ? VP_TENSOR_ENCODER_POSITION_TABLE : VP_TENSOR_DECODER_POSITION_TABLE;
    if (kind != KIND_CROSS) vp_step_lend_tensor(step, table, leaves[0]);
    vp_hold(&step->sim, x);
    return x;
}

/* T5Attention.forward with position_bias None (the stack's first layer):
 * compute_bias(q, k)[:, :, -q:, :], or for cross-attention
 * torch.zeros((1, heads, q, k), dtype=scores.dtype), plus the stack's mask:
 * [b, heads, q, k]. The stack's loop keeps it (`position_bias =
 * layer_outputs[2]`) for every later layer. */
vp_t vp_t5_position_bias(vp_step *step, bool cross, uint64_t heads, uint64_t k, vp_dtype scores_dtype) {
    vp_sim *sim = &step->sim;
    uint64_t q = step->seq;
    /* the encoder's layers are the model's first ones; its buckets are bidirectional */
    bool encoder = step->layer_index < step->model->first_layers;
    vp_t table = vp_step_tensor(step, encoder ? VP_TENSOR_ENCODER_POSITION_TABLE : VP_TENSOR_DECODER_POSITION_TABLE);
    vp_t bias = cross ? vp_new(sim, vp_numel4(sim, 1, heads, q, k), scores_dtype, "position_bias.zeros")
                      : relative_bias(step, table, heads, q, k, encoder);
    /* `if self.gradient_checkpointing and self.training:
     * position_bias.requires_grad = True`: in a checkpointed layer's rerun
     * the zeros become a leaf of its graph, kept with the .grad the mask's
     * add gives them (summed to their shape) until the chunk's backward
     * ends; the cross bias the layer returns then needs a gradient too */
    if (cross && step->recipe->checkpoint_every && step->ledger.place.phase == VP_PHASE_RECOMPUTE) {
        vp_requires_grad(sim, bias);
        vp_step_rerun_leaf(step, bias);
    } else if (cross && step->recipe->checkpoint_every && !step->recipe->use_reentrant && sim->grad_mode) {
        /* a non-reentrant checkpoint's forward runs with grad: the graph
         * keeps the leaf, and its .grad, until it goes */
        vp_requires_grad(sim, bias);
        vp_step_graph_leaf(step, bias);
    }
    vp_t masked = vp_add(sim, bias, vp_step_tensor(step, cross ? VP_TENSOR_CROSS_MASK : VP_TENSOR_SELF_MASK),
                         vp_numel4(sim, step->batch, heads, q, k), "position_bias.add_mask");
    vp_drop(sim, bias);
    return masked;
}

const vp_op_kind vp_op_position_bias = {
    .name = "position_bias",
    .doc = "T5Stack's masks before its layers, and the relative-position table its first attention layer uses for "
           "the stack's position bias",
    .fields = bias_fields,
    .n_fields = BIAS_FIELDS,
    .leaves = bias_leaves,
    .forward = bias_forward,
};

/* ---- the encoder-decoder bridge ---- */

enum { DECODER_HIDDEN, DECODER_FIELDS };

static const vp_field decoder_fields[DECODER_FIELDS] = {
    [DECODER_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "embedding width (d_model)"},
};

/* Where T5's encoder returns and its decoder begins. The encoder's output
 * (after its final norm and dropout) is what every cross-attention reads;
 * the outputs keep it too (encoder_last_hidden_state). The encoder stack's
 * locals go. The decoder runs on the labels' length: _shift_right(labels)
 * (a zeros tensor, a clone of all but the last column, a comparison for
 * the -100s), the shared embedding looked up (a local of the decoder
 * stack) and its dropout is applied by the next op. */
static vp_t decoder_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_sim *sim = &step->sim;
    vp_hold(sim, x);
    vp_step_put_tensor(step, VP_TENSOR_MEMORY, x);
    vp_hold(sim, x);
    vp_step_put_tensor(step, VP_TENSOR_ENCODER_OUTPUT, x);
    vp_step_stack_returns(step);

    step->seq = step->target_seq;
    step->tokens = step->rows = vp_numel(sim, step->batch, step->seq);
    /* the decoder's self-attention alone reads PEFT's prefix (prefix.c) */
    step->past_tokens = step->prefix_tokens;
    uint64_t bt = step->tokens;
    vp_t ids = vp_new(sim, bt, VP_INT64, "decoder_input_ids");
    vp_t head = vp_new(sim, bt - step->batch, VP_INT64, "shift_right.clone");
    vp_drop(sim, head);
    vp_t is_ignored = vp_new(sim, bt, VP_BOOL, "shift_right.eq");
    vp_drop(sim, is_ignored);
    vp_t embeds = vp_embedding(sim, ids, step->tied_weight, bt, vp_op_u64(op, DECODER_HIDDEN), step->recipe->device,
                               "decoder.embed_tokens");
    vp_step_embedding_output(step, embeds);
    /* the decoder stack's cache_position: the labels' length (the encoder's went with its stack) */
    vp_step_put_tensor(step, VP_TENSOR_POSITION_IDS, 0);
    vp_step_put_tensor(step, VP_TENSOR_POSITION_IDS, vp_new(sim, step->seq, VP_INT64, "cache_position"));
    /* decoder_input_ids: a local of the model's forward, like the embeddings
     * of the decoder stack */
    vp_step_keep_local(step, ids, VP_LOCAL_OF_WRAPPER);
    vp_drop(sim, ids);
    vp_step_keep_local(step, embeds, VP_LOCAL_OF_BODY);
    return embeds;
}

/* T5Block (transformers 4.46-4.52) after each of its layers:
 *   if hidden_states.dtype == torch.float16:
 *       clamp_value = torch.where(torch.isinf(hidden_states).any(),
 *                                 torch.finfo(hidden_states.dtype).max - 1000, torch.finfo(hidden_states.dtype).max)
 *       hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
 * isinf's bool rows and any()'s 0-dim result are temporaries; where of two
 * Python floats is a 0-dim fp32 tensor, its negation another; the clamp is
 * a new fp16 tensor and keeps its input and both bounds. Anything but fp16
 * passes through untouched. */
static vp_t clamp_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)op;
    (void)leaves;
    vp_sim *sim = &step->sim;
    if (vp_at(sim, x)->dtype != VP_FP16) {
        vp_hold(sim, x);
        return x;
    }
    vp_t inf = vp_new(sim, vp_at(sim, x)->numel, VP_BOOL, "t5_clamp.isinf");
    vp_t any = vp_new(sim, 1, VP_BOOL, "t5_clamp.any");
    vp_drop(sim, inf);
    vp_t value = vp_new(sim, 1, VP_FP32, "t5_clamp.where");
    vp_drop(sim, any);
    vp_t low = vp_new(sim, 1, VP_FP32, "t5_clamp.neg");
    vp_t y = vp_clamp(sim, x, low, value, "t5_clamp.clamp");
    vp_drop(sim, low);
    vp_drop(sim, value);
    return y;
}

const vp_op_kind vp_op_fp16_clamp = {
    .name = "fp16_clamp",
    .doc = "T5Block's clamp of fp16 hidden states after each layer: the clamped copy, its input kept for "
           "backward; other dtypes pass through",
    .forward = clamp_forward,
};

const vp_op_kind vp_op_decoder_start = {
    .name = "decoder_start",
    .doc = "where an encoder-decoder's encoder returns (its output kept for cross-attention) and its decoder "
           "begins on the labels shifted right",
    .fields = decoder_fields,
    .n_fields = DECODER_FIELDS,
    .forward = decoder_forward,
};
