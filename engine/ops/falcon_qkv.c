/* falcon_qkv.c — FalconAttention._split_heads (transformers, models/falcon/
 * modeling_falcon.py, commit 00dcc6d of the 4.5x line), as the autograd
 * graph sees it:
 *   multi_query:  fused.view(b, s, heads + 2, d); [..., :-2, :] (a view),
 *                 [..., [-2], :] and [..., [-1], :] (index with a list: a
 *                 one-element int64 index each, saved, and a copy);
 *   new_decoder_architecture: fused.view(b, s, kv, heads / kv + 2, d);
 *                 [:, :, :, :-2] (a view), [:, :, :, [-2]] and [..., [-1]]
 *                 (copies), both broadcast_to the queries' shape (views),
 *                 then each of the three flatten(2, 3): a copy wherever the
 *                 merged dimensions cannot be viewed (several query heads a
 *                 group: the sliced queries and the zero-stride keys and
 *                 values);
 *   otherwise:    fused.view(b, s, heads, 3, d); [..., 0, :] and so on
 *                 (select: views).
 * Every view's and index's backward makes a zero-filled gradient of the
 * whole projection (slice_backward, select_backward, index_backward), the
 * broadcast's sums back to the group's size. */
#include "falcon_qkv.h"

#include "ops.h"

uint64_t vp_falcon_kv_heads(const vp_falcon_shape *shape) {
    return shape->layout == VP_FALCON_MULTI_QUERY ? 1 : shape->heads;
}

/* fused[..., [i], ...]: the list made a one-element int64 tensor, which
 * IndexBackward0 saves; the result a copy */
static vp_t index_copy(vp_sim *sim, vp_t fused, uint64_t numel, const char *label) {
    vp_t index = vp_new(sim, 1, VP_INT64, "falcon.split_heads.index");
    vp_t y = vp_index(sim, fused, index, numel, label);
    vp_drop(sim, index);
    return y;
}

void vp_falcon_split(vp_step *step, const vp_falcon_shape *shape, vp_t fused, vp_t *q, vp_t *k, vp_t *v) {
    vp_sim *sim = &step->sim;
    uint64_t rows = vp_at(sim, fused)->numel / ((shape->heads + 2 * shape->kv_heads) * shape->head_dim);
    uint64_t q_numel = vp_numel3(sim, rows, shape->heads, shape->head_dim);
    if (shape->layout == VP_FALCON_HEADS) {
        *q = vp_slice(sim, fused, q_numel, "falcon.split_heads.query");
        *k = vp_slice(sim, fused, q_numel, "falcon.split_heads.key");
        *v = vp_slice(sim, fused, q_numel, "falcon.split_heads.value");
        return;
    }
    uint64_t kv_numel = vp_numel3(sim, rows, shape->kv_heads, shape->head_dim);
    vp_t query = vp_slice(sim, fused, q_numel, "falcon.split_heads.query");
    vp_t key = index_copy(sim, fused, kv_numel, "falcon.split_heads.key");
    vp_t value = index_copy(sim, fused, kv_numel, "falcon.split_heads.value");
    if (shape->layout == VP_FALCON_MULTI_QUERY) {
        *q = query;
        *k = key;
        *v = value;
        return;
    }
    /* one query head a group: broadcast_to and flatten(2, 3) merge a size-1
     * dimension, views all; else the queries and the broadcast keys and
     * values are copied (the check refuses one group of several heads,
     * whose flatten views the zero-stride keys) */
    bool copies = shape->heads != shape->kv_heads;
    vp_t key_wide = copies ? vp_expand(sim, key, q_numel, "falcon.split_heads.broadcast_to")
                           : vp_alias(sim, key, "falcon.split_heads.broadcast_to");
    vp_t value_wide = copies ? vp_expand(sim, value, q_numel, "falcon.split_heads.broadcast_to")
                             : vp_alias(sim, value, "falcon.split_heads.broadcast_to");
    *q = vp_contiguous(sim, query, !copies, "falcon.split_heads.flatten");
    *k = vp_contiguous(sim, key_wide, !copies, "falcon.split_heads.flatten");
    *v = vp_contiguous(sim, value_wide, !copies, "falcon.split_heads.flatten");
    /* the group-sized copies and the views go when _split_heads returns */
    vp_drop(sim, key_wide);
    vp_drop(sim, value_wide);
    vp_drop(sim, query);
    vp_drop(sim, key);
    vp_drop(sim, value);
}
