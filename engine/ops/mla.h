/* mla.h — DeepSeek's multi-head latent attention (DeepSeek-V2/V3): the
 * projections that make a layer's queries, keys and values. */
#ifndef VRAMPLAN_MLA_H
#define VRAMPLAN_MLA_H

#include "step.h"

typedef struct {
    uint64_t hidden, heads;
    uint64_t q_lora_rank;  /* 0: one q_proj (DeepSeek-V2-Lite) */
    uint64_t kv_lora_rank;
    uint64_t qk_nope, qk_rope, v_dim;
    bool bias;             /* attention_bias: on the down-projections and o_proj */
    bool interleave;       /* rope_interleave: the rotary halves are interleaved in the weights */
    bool layer_rotary;     /* DeepSeek's own modeling_deepseek.py (DeepSeek-V2): each layer's rotary tables, the
                              query and key states filled by slice assignments */
    bool complex_rotary;   /* transformers' DeepseekV2Attention (4.54+): apply_rotary_emb's complex product with
                              the model's freqs_cis */
} vp_mla_shape;

/* Leaf slots of an MLA layer; o_proj's are the attention's output. */
enum {
    MLA_Q_W,
    MLA_QA_W,
    MLA_QA_B,
    MLA_QA_NORM,
    MLA_QB_W,
    MLA_KVA_W,
    MLA_KVA_B,
    MLA_KVA_NORM,
    MLA_KVB_W,
    MLA_O_W,
    MLA_O_B,
    MLA_INV_FREQ, /* layer_rotary: the layer's rotary_emb buffers */
    MLA_COS_CACHED,
    MLA_SIN_CACHED,
    MLA_SLOTS
};

unsigned vp_mla_leaves(const vp_mla_shape *m, vp_leaf_spec *out);

enum { MLA_LOCALS = 4 };

/* DeepseekV3Attention.forward up to the attention kernel: the query states
 * ([b, heads, s, nope + rope], a cat's contiguous result), key states (the
 * same, the shared rotary key expanded to every head) and value states
 * (a view of kv_b_proj's output). New references in *q, *k, *v, and in
 * locals[] the tensors its other Python locals keep until it returns
 * (q_pass, compressed_kv, q_rot, k_rot): what save_on_cpu leaves on the
 * GPU. With layer_rotary, DeepseekV2Attention.forward of DeepSeek's
 * modeling_deepseek.py: the same locals (q_nope, compressed_kv, q_pe,
 * k_pe), the states new_empty'd and filled by slice. */
void vp_mla_project(vp_step *step, const vp_mla_shape *m, const vp_t *leaves, vp_t x, vp_t *q, vp_t *k, vp_t *v,
                    vp_t locals[MLA_LOCALS]);

#endif
