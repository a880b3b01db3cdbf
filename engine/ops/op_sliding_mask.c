/* op_sliding_mask.c — a decoder layer that narrows the model's causal mask
 * to a sliding window itself, as Gemma2DecoderLayer and Gemma3DecoderLayer
 * do (transformers 4.50-4.52) and Cohere2DecoderLayer (transformers
 * 015bfeb), on the layers the pattern makes sliding; it also tells the
 * layer's attention to rotate with the sliding layers' tables where there
 * are such (Gemma 3). */
#include "ops.h"

enum { SLIDING_WINDOW, SLIDING_PATTERN, SLIDING_NARROW, SLIDING_FIELDS };

/* how the window's columns are taken: Gemma 2's indexed copy, or
 * Cohere2's slice (a view of the where result) */
enum { NARROW_INDEX, NARROW_SLICE };
static const char *const narrow_names[] = {"index", "slice", NULL};

static const vp_field sliding_fields[SLIDING_FIELDS] = {
    [SLIDING_WINDOW] = {"window", VP_FIELD_INT, true, 0, 1, 1 << 30, NULL, "keys a query sees at most"},
    [SLIDING_PATTERN] = {"pattern", VP_FIELD_INT, false, 1, 1, 1 << 20, NULL,
                         "layer i slides unless (i + 1) is a multiple of pattern (Gemma 2: 2, every other layer "
                         "global; 1: every layer slides)"},
    [SLIDING_NARROW] = {"narrow", VP_FIELD_ENUM, false, NARROW_INDEX, 0, 0, narrow_names,
                        "the window's columns: index (Gemma 2: cache_position offsets, an arange and an indexed "
                        "copy) or slice (Cohere2: python-int offsets, a view of the where result)"},
};

static void sliding_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    facts->sliding_mask = true;
    if (section == VP_SECTION_LAYER) vp_model_facts_add_period(facts, (unsigned)vp_op_u64(op, SLIDING_PATTERN));
}

static bool sliding_layer(const vp_step *step, const vp_op *op) {
    uint64_t pattern = vp_op_u64(op, SLIDING_PATTERN);
    return (step->layer_index + 1) % pattern != 0;
}

/* Gemma2DecoderLayer.forward, given the model's 4-D mask (eager and SDPA;
 * FlashAttention-2 gets none and allocates nothing here):
 *   sliding_window_mask = torch.tril(torch.ones_like(mask, dtype=bool), -w)
 *   attention_mask = torch.where(sliding_window_mask, min_dtype, mask)
 *   offset = torch.clamp(cache_position[-1] - max(s, w) + 1, min=0)
 *   mask_indexes = torch.arange(min(max(s, w), columns)); mask_indexes += offset
 *   attention_mask = attention_mask[:, :, :, mask_indexes]
 * ones_like of the expanded mask is a whole [b, 1, s, columns] tensor; the
 * where result goes when attention_mask is rebound to the indexed copy;
 * sliding_window_mask, offset, mask_indexes and the copy are locals until
 * the layer returns. The copy is what this layer's attention uses. */
static vp_t sliding_mask_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_sim *sim = &step->sim;
    vp_hold(sim, x);
    bool slides = sliding_layer(step, op);
    /* Gemma3DecoderLayer: position_embeddings_local on sliding layers */
    if (slides && vp_step_tensor(step, VP_TENSOR_COS_LOCAL)) {
        vp_step_lend_tensor(step, VP_TENSOR_LAYER_COS, vp_step_tensor(step, VP_TENSOR_COS_LOCAL));
        vp_step_lend_tensor(step, VP_TENSOR_LAYER_SIN, vp_step_tensor(step, VP_TENSOR_SIN_LOCAL));
    }
    vp_t mask = vp_step_tensor(step, VP_TENSOR_CAUSAL_MASK);
    if (!mask || !slides) return x;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    uint64_t window = vp_op_u64(op, SLIDING_WINDOW), columns = vp_step_tensor_columns(step, VP_TENSOR_CAUSAL_MASK);
    uint64_t effective = step->seq > window ? step->seq : window;
    uint64_t kept = effective < columns ? effective : columns;
    uint64_t n = vp_numel3(sim, step->batch, step->seq, columns);
    vp_dtype dtype = (vp_dtype)vp_at(sim, mask)->dtype;
    vp_t ones = vp_new(sim, n, VP_BOOL, "sliding_mask.ones_like");
    vp_t outside = vp_new(sim, n, VP_BOOL, "sliding_mask.tril");
    vp_drop(sim, ones);
    vp_t filled = vp_new(sim, n, dtype, "sliding_mask.where");
    if (vp_op_u64(op, SLIDING_NARROW) == NARROW_SLICE) {
        /* Cohere2DecoderLayer: attention_mask[:, :, :, offset : offset +
         * effective_seq_len], offset from last_cache_position (an int): the
         * where result, viewed, is the layer's mask; both locals until the
         * layer returns */
        vp_step_keep_local(step, outside, VP_LOCAL_OF_LAYER);
        vp_drop(sim, outside);
        vp_step_keep_local(step, filled, VP_LOCAL_OF_LAYER);
        vp_drop(sim, filled);
        vp_step_lend_tensor(step, VP_TENSOR_LAYER_MASK, filled);
        sim->grad_mode = grad_mode;
        return x;
    }
    /* cache_position[-1] - effective + 1, clamped: 0-dim int64 tensors */
    vp_t last = vp_new(sim, 1, VP_INT64, "sliding_mask.offset");
    vp_t shifted = vp_new(sim, 1, VP_INT64, "sliding_mask.offset");
    vp_drop(sim, last);
    vp_t offset = vp_new(sim, 1, VP_INT64, "sliding_mask.offset");
    vp_drop(sim, shifted);
    vp_t indexes = vp_new(sim, kept, VP_INT64, "sliding_mask.indexes");
    vp_t narrowed = vp_new(sim, vp_numel3(sim, step->batch, step->seq, kept), dtype, "sliding_mask.index");
    vp_drop(sim, filled);
    vp_t locals[4] = {outside, offset, indexes, narrowed};
    for (unsigned i = 0; i < 4; i++) {
        vp_step_keep_local(step, locals[i], VP_LOCAL_OF_LAYER);
        vp_drop(sim, locals[i]);
    }
    vp_step_lend_tensor(step, VP_TENSOR_LAYER_MASK, narrowed); /* the layer's locals keep it */
    sim->grad_mode = grad_mode;
    return x;
}

const vp_op_kind vp_op_sliding_mask = {
    .name = "sliding_mask",
    .doc = "a layer's own sliding-window copy of the causal mask, made at the layer's start and kept until it "
           "returns (Gemma 2's sliding layers under eager and SDPA attention)",
    .fields = sliding_fields,
    .n_fields = SLIDING_FIELDS,
    .facts = sliding_facts,
    .forward = sliding_mask_forward,
};
