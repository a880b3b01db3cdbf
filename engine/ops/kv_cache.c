/* kv_cache.c — the key/value cache a training step's outputs keep
 * (transformers 4.46-4.52: LlamaModel makes a DynamicCache when use_cache
 * is set, which keeps the tensors it is first given; GPT-2 returns its
 * presents). Under folding one layer stands for several: an entry stands
 * for as many, and goes with as many. */
#include "kv_cache.h"

#include "framework.h"
#include "ops.h"

bool vp_kv_cache_wanted(const vp_step *step) {
    if (step->prefix_tokens) return true;
    const vp_recipe *r = step->recipe;
    if (!r->use_cache || r->checkpoint_every || r->selective || !vp_framework_of(r)->hf_modeling) return false;
    return step->model->facts.caches;
}

/* Slots: a key and a value per layer, then an encoder-decoder's
 * cross-attention key and value per layer. */
static unsigned slot_count(const vp_step *step) { return 4 * step->stage.layers; }

void vp_kv_cache_begin(vp_step *step) {
    size_t n = slot_count(step);
    step->kv_cache.tensors = vp_step_scratch(step, n * sizeof *step->kv_cache.tensors);
    step->kv_cache.repeat = vp_step_scratch(step, n * sizeof *step->kv_cache.repeat);
    if (!step->kv_cache.tensors || !step->kv_cache.repeat) step->kv_cache.tensors = NULL;
}

static void update_one(vp_step *step, unsigned slot, vp_t *x, const char *label) {
    vp_sim *sim = &step->sim;
    vp_t *entry = &step->kv_cache.tensors[slot];
    if (*entry) { /* torch.cat([cached, new], dim=-2) takes the cached one's place */
        vp_t joined = vp_cat(sim, *entry, *x, label);
        vp_drop(sim, *entry);
        vp_drop(sim, *x);
        *x = joined;
    }
    vp_hold(sim, *x);
    *entry = *x;
    step->kv_cache.repeat[slot] = vp_step_repeat(step);
}

void vp_kv_cache_update(vp_step *step, vp_t *k, vp_t *v) {
    if (!step->kv_cache.tensors) return;
    unsigned layer = (unsigned)step->ledger.place.layer - step->stage.first_layer;
    update_one(step, 2 * layer, k, "cache.keys_cat");
    update_one(step, 2 * layer + 1, v, "cache.values_cat");
}

void vp_kv_cache_update_cross(vp_step *step, vp_t k, vp_t v) {
    if (!step->kv_cache.tensors) return;
    unsigned layer = (unsigned)step->ledger.place.layer - step->stage.first_layer;
    unsigned base = 2 * step->stage.layers;
    update_one(step, base + 2 * layer, &k, "cache.cross_keys");
    update_one(step, base + 2 * layer + 1, &v, "cache.cross_values");
}

/* transformers 5 returns every model's cache as a Cache object */
bool vp_kv_cache_in_tuples(const vp_step *step) {
    return step->kv_cache.tensors && !step->prefix_tokens && step->model->facts.cache_tuples &&
           step->recipe->transformers_major != 5;
}

vp_kv_cache vp_kv_cache_to_fp32(vp_step *step, const vp_kv_cache *cache) {
    vp_sim *sim = &step->sim;
    size_t n = slot_count(step);
    vp_kv_cache out = {.tensors = vp_step_scratch(step, n * sizeof *out.tensors),
                       .repeat = vp_step_scratch(step, n * sizeof *out.repeat)};
    if (!out.tensors || !out.repeat) {
        sim->status = VP_SIM_NOMEM;
        return (vp_kv_cache){0};
    }
    for (unsigned i = 0; i < n; i++) {
        vp_t t = cache->tensors[i];
        if (!t) continue;
        out.repeat[i] = cache->repeat[i];
        if (!vp_dtype_is_half((vp_dtype)vp_at(sim, t)->dtype)) { /* kept as it is, in the new tuple too */
            vp_hold(sim, t);
            out.tensors[i] = t;
            continue;
        }
        out.tensors[i] = vp_to(sim, t, VP_FP32, "accelerate.convert_to_fp32.cache");
        /* the layers this entry stands for make theirs too */
        const vp_tensor *copy = vp_at(sim, out.tensors[i]);
        for (unsigned r = 1; r < out.repeat[i]; r++)
            vp_ledger_alloc(sim->ledger, (vp_category)copy->category, copy->bytes, copy->label);
    }
    return out;
}

void vp_kv_cache_release(vp_step *step, vp_kv_cache *cache) {
    if (!cache->tensors) return;
    vp_sim *sim = &step->sim;
    for (unsigned i = 0; i < slot_count(step); i++) {
        vp_t t = cache->tensors[i];
        if (!t) continue;
        /* the layers this entry stood for let go of theirs too, when this
         * drop frees the storage (a view's: its base's) */
        const vp_tensor *x = vp_at(sim, t);
        const vp_tensor *owner = x->base ? vp_at(sim, x->base) : x;
        bool frees = x->refs == 1 && (!x->base || owner->refs == 1);
        for (unsigned r = 1; frees && r < cache->repeat[i]; r++)
            vp_ledger_release(sim->ledger, (vp_category)owner->category, owner->bytes, owner->label);
        vp_drop(sim, t);
        cache->tensors[i] = 0;
    }
    cache->tensors = NULL;
}
