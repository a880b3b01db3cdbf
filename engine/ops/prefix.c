/* prefix.c — PEFT's prefix tuning (peft/peft_model.py, PeftModel.get_prompt
 * of PEFT 0.14+, which hands the prefix over as a DynamicCache) on the
 * key/value cache of transformers 4.45-4.55 (cache_utils.DynamicCache keeps
 * the tensors it is given, then torch.cat's each layer's new keys after
 * them).
 *
 * What it costs beyond the trained table:
 *  - every layer attends over num_virtual_tokens + seq_len keys;
 *  - the joined keys and values sit in the cache, which the model's outputs
 *    keep (use_cache defaults to true): with them until the loop lets go;
 *  - in backward, the graph nodes that take the prefix's gradients were
 *    made before the model ran, so the engine's ready queue, which runs
 *    the latest-made node first, reaches them only after every layer: each
 *    layer's key and value gradients (whole, the prefix's part being a
 *    narrow() view of them) are held until then. */
#include "prefix.h"

#include "ops.h"

/* SplitBackward of past_key_values.split(2) into one [2, b, kv_heads, v, d]
 * part per layer: each part's gradient waits in the node's input buffer
 * until the last arrives, then torch.cat makes the whole one. The parts
 * beyond a node's three output slots are in the context. */
typedef struct {
    vp_t *parts;
    unsigned n;
} layer_split;

static void backward_split_layers(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    const layer_split *split = node->context;
    vp_t g = vp_grad_like(sim, node->in[0], node->label);
    for (unsigned i = VP_NODE_MAX_OUT; i < split->n; i++) {
        vp_tensor *part = vp_at(sim, split->parts[i]);
        vp_t buffered = part->grad;
        part->grad = 0;
        vp_drop(sim, buffered);
    }
    vp_give_grad(sim, vp_node_at(sim, index), 0, g);
}

static void split_layers(vp_step *step, vp_t x, layer_split *split) {
    vp_sim *sim = &step->sim;
    uint64_t each = vp_at(sim, x)->numel / split->n;
    for (unsigned i = 0; i < split->n; i++) split->parts[i] = vp_view(sim, x, each, "prefix.split");
    vp_node *node = vp_record(sim, backward_split_layers, "prefix.split", &x, 1, split->parts,
                              split->n < VP_NODE_MAX_OUT ? split->n : VP_NODE_MAX_OUT);
    if (!node) return;
    node->context = split;
    for (unsigned i = VP_NODE_MAX_OUT; i < split->n; i++) vp_at(sim, split->parts[i])->requires_grad = true;
}

/* An encoder-decoder's prefix (PEFT's SEQ_2_SEQ_LM, two transformer
 * submodules): prompt_tokens hold 2 x v ids, of which [:, :v] are looked
 * up (a slice; embedding's reshape of it copies it, but for one sequence);
 * after the cast and view, torch.cat([past_key_values, past_key_values],
 * dim=2) doubles the table for the decoder's self- and cross-attention, a
 * part of four per layer. */
static vp_t seq2seq_lookup(vp_step *step, uint64_t v, uint64_t width) {
    vp_sim *sim = &step->sim;
    uint64_t bv = vp_numel(sim, step->batch, v);
    vp_t ids = vp_new(sim, 2 * bv, VP_INT64, "prefix.tokens");
    vp_t first = vp_view(sim, ids, bv, "prefix.tokens_slice");
    vp_drop(sim, ids);
    if (step->batch > 1) { /* one row's slice is contiguous: reshape copies only more */
        vp_t flat = vp_new(sim, bv, VP_INT64, "prefix.tokens_reshape");
        vp_drop(sim, flat);
    }
    vp_t looked_up = vp_embedding(sim, first, step->prompt, bv, width, step->recipe->device, "prefix_encoder");
    vp_drop(sim, first);
    vp_t prefix = vp_to(sim, looked_up, step->precision->params, "prefix.cast");
    vp_drop(sim, looked_up);
    vp_t doubled = vp_cat(sim, prefix, prefix, "prefix.cat");
    vp_drop(sim, prefix);
    /* permute: a view (its gradient too); the cat's two narrow() gradients
     * then sum into a new one */
    vp_t permuted = vp_alias(sim, doubled, "prefix.permute");
    vp_drop(sim, doubled);
    return permuted;
}

void vp_prefix_begin(vp_step *step) {
    vp_sim *sim = &step->sim;
    unsigned layers = step->stage.layers;
    bool seq2seq = vp_model_encoder_decoder(step->model);
    unsigned first = seq2seq ? step->model->first_layers : 0; /* the decoder's cache slots */
    if (seq2seq) layers -= first;
    uint64_t v = step->prefix_tokens, width = vp_prefix_table_width(step->model);
    layer_split *split = vp_step_scratch(step, sizeof *split);
    vp_t *parts = vp_step_scratch(step, layers * sizeof *parts);
    if (!split || !parts || !step->kv_cache.tensors) return;
    *split = (layer_split){parts, layers};

    if (seq2seq) {
        vp_t permuted = seq2seq_lookup(step, v, width);
        split_layers(step, permuted, split);
        vp_drop(sim, permuted);
        /* EncoderDecoderCache.from_legacy_cache: part[:2] unbound into the
         * self-attention cache (the slice's gradient is a zero-filled part),
         * part[2:] into the cross-attention cache, which PEFT then replaces
         * by an empty DynamicCache: views dropped, nothing kept */
        for (unsigned i = 0; i < layers; i++) {
            vp_t self = vp_slice(sim, parts[i], vp_at(sim, parts[i])->numel / 2, "prefix.self_attention");
            vp_split(sim, self, 2, &step->kv_cache.tensors[2 * (first + i)], "prefix.unbind");
            step->kv_cache.repeat[2 * (first + i)] = step->kv_cache.repeat[2 * (first + i) + 1] = 1;
            vp_drop(sim, self);
            vp_drop(sim, parts[i]);
        }
        return;
    }
    /* prompt_tokens: an arange kept on the CPU, expanded to the batch; the
     * .to(device) of the expanded tensor copies it */
    vp_t ids = vp_new(sim, vp_numel(sim, step->batch, v), VP_INT64, "prefix.tokens");
    vp_t looked_up = vp_embedding(sim, ids, step->prompt, vp_numel(sim, step->batch, v), width, step->recipe->device,
                                  "prefix_encoder");
    vp_drop(sim, ids);
    /* .to(base_model_torch_dtype): the model's parameter dtype */
    vp_t prefix = vp_to(sim, looked_up, step->precision->params, "prefix.cast");
    vp_drop(sim, looked_up);
    /* .view(b, v, 2 * layers, kv_heads, d).permute([2, 0, 3, 1, 4]): views,
     * but the gradient arrives in the permuted layout and ViewBackward's
     * reshape copies it */
    vp_t permuted = vp_slice(sim, prefix, vp_at(sim, prefix)->numel, "prefix.permute");
    vp_drop(sim, prefix);
    split_layers(step, permuted, split);
    vp_drop(sim, permuted);
    /* DynamicCache.from_legacy_cache: `key, value = part` unbinds each part
     * (UnbindBackward stacks the two gradients); the cache keeps the views */
    for (unsigned i = 0; i < layers; i++) {
        vp_split(sim, parts[i], 2, &step->kv_cache.tensors[2 * i], "prefix.unbind");
        step->kv_cache.repeat[2 * i] = step->kv_cache.repeat[2 * i + 1] = 1;
        vp_drop(sim, parts[i]);
    }
}
