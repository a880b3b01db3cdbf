/* kv_cache.h — transformers' key/value cache in a training step. With
 * use_cache (the model configs' default) the model keeps every layer's keys
 * and values for its outputs: LLaMA's DynamicCache holds the keys after the
 * rotary embedding and the values, GPT-2's presents the views of its fused
 * projection. PEFT's prefix tuning passes its prefix in through one. */
#ifndef VRAMPLAN_KV_CACHE_H
#define VRAMPLAN_KV_CACHE_H

#include "step.h"

/* Whether this step's forward keeps a cache: prefix tuning, or use_cache
 * without checkpointing (transformers turns it off under gradient
 * checkpointing) on a model whose attention caches. */
bool vp_kv_cache_wanted(const vp_step *step);

/* The empty cache, made when the forward begins (step->kv_cache). */
void vp_kv_cache_begin(vp_step *step);

/* past_key_value.update(key_states, value_states, layer_idx) for the layer
 * running now: a cached prefix gets the layer's keys and values joined
 * after it (the joined tensors replace *k and *v); an empty entry keeps them
 * as they are. */
void vp_kv_cache_update(vp_step *step, vp_t *k, vp_t *v);

/* An encoder-decoder's cross-attention keys and values for the layer
 * running now (EncoderDecoderCache's cross_attention_cache): kept as they
 * are. */
void vp_kv_cache_update_cross(vp_step *step, vp_t k, vp_t v);

/* The model's outputs let go of a cache. */
void vp_kv_cache_release(vp_step *step, vp_kv_cache *cache);

/* Whether the outputs hold the cache as tuples of tensors, which tools that
 * walk the outputs reach (GPT-2's and BLOOM's presents), not as a Cache
 * object (DynamicCache, EncoderDecoderCache, a prefix's). */
bool vp_kv_cache_in_tuples(const vp_step *step);

/* accelerate's convert_to_fp32 over a cache of tuples: a cache whose 16-bit
 * entries are their fp32 copies (each standing for as many layers as the
 * entry), the others shared. The caller releases the old cache once every
 * output's copy is made. */
vp_kv_cache vp_kv_cache_to_fp32(vp_step *step, const vp_kv_cache *cache);

#endif
