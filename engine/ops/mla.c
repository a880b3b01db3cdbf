/* mla.c — multi-head latent attention as transformers 4.51-4.52 writes it
 * (DeepseekV3Attention), or as DeepSeek's own modeling_deepseek.py does
 * for DeepSeek-V2 (layer_rotary, below): queries through a
 * low-rank down-projection, its RMSNorm and an up-projection (or one
 * q_proj); keys and values through kv_a_proj_with_mqa to a latent of
 * kv_lora_rank plus one rotary key shared by all heads, the latent's
 * RMSNorm and kv_b_proj to every head's keys and values. Training gains
 * nothing from the latent: the full keys and values are made per layer. */
#include "mla.h"

#include "ops.h"

unsigned vp_mla_leaves(const vp_mla_shape *m, vp_leaf_spec *out) {
    uint64_t qk = m->qk_nope + m->qk_rope, kva = m->kv_lora_rank + m->qk_rope;
    uint64_t kvb = m->heads * (m->qk_nope + m->v_dim), o = m->heads * m->v_dim;
    bool lora = m->q_lora_rank > 0;
    for (unsigned i = 0; i < MLA_SLOTS; i++) out[i] = vp_param(0, "attention", VP_MODULE_NONE, 0);
    out[MLA_Q_W] = vp_param(lora ? 0 : m->hidden * m->heads * qk, "q_proj.weight", VP_MODULE_Q_PROJ, m->heads * qk);
    out[MLA_QA_W] = vp_param(lora ? m->hidden * m->q_lora_rank : 0, "q_a_proj.weight", VP_MODULE_Q_A_PROJ, m->q_lora_rank);
    out[MLA_QA_B] = vp_param(lora && m->bias ? m->q_lora_rank : 0, "q_a_proj.bias", VP_MODULE_Q_A_PROJ, 0);
    out[MLA_QA_NORM] = vp_param(lora ? m->q_lora_rank : 0, "q_a_layernorm.weight", VP_MODULE_NORM, 0);
    out[MLA_QB_W] = vp_param(lora ? m->q_lora_rank * m->heads * qk : 0, "q_b_proj.weight", VP_MODULE_Q_B_PROJ,
                             m->heads * qk);
    out[MLA_KVA_W] = vp_param(m->hidden * kva, "kv_a_proj_with_mqa.weight", VP_MODULE_KV_A_PROJ, kva);
    out[MLA_KVA_B] = vp_param(m->bias ? kva : 0, "kv_a_proj_with_mqa.bias", VP_MODULE_KV_A_PROJ, 0);
    out[MLA_KVA_NORM] = vp_param(m->kv_lora_rank, "kv_a_layernorm.weight", VP_MODULE_NORM, 0);
    out[MLA_KVB_W] = vp_param(m->kv_lora_rank * kvb, "kv_b_proj.weight", VP_MODULE_KV_B_PROJ, kvb);
    out[MLA_O_W] = vp_param(o * m->hidden, "o_proj.weight", VP_MODULE_O_PROJ, m->hidden);
    out[MLA_O_B] = vp_param(m->bias ? m->hidden : 0, "o_proj.bias", VP_MODULE_O_PROJ, 0);
    /* DeepseekV2RotaryEmbedding (and its Yarn subclass, which registers it
     * again in fp32): inv_freq, fp32 [rope / 2]; cos_cached and sin_cached,
     * made for max_position_embeddings in __init__, which then sets
     * max_seq_len_cached = None, so the first forward makes them again for
     * its own length in the activations' dtype: [seq_len, rope] each */
    if (m->layer_rotary) {
        out[MLA_INV_FREQ] = (vp_leaf_spec){.numel = m->qk_rope / 2, .dtype = VP_FP32, .buffer = true,
                                           .label = "rotary_emb.inv_freq", .count = 1};
        out[MLA_COS_CACHED] = (vp_leaf_spec){.numel = m->qk_rope, .dtype = VP_DTYPE_NONE, .buffer = true,
                                             .per_position = true, .label = "rotary_emb.cos_cached", .count = 1};
        out[MLA_SIN_CACHED] = (vp_leaf_spec){.numel = m->qk_rope, .dtype = VP_DTYPE_NONE, .buffer = true,
                                             .per_position = true, .label = "rotary_emb.sin_cached", .count = 1};
    }
    return MLA_SLOTS;
}

/* The rotary part of q or k: apply_rotary_pos_emb, after
 * apply_rotary_pos_emb_interleave's view/transpose/reshape (a copy) when
 * the weights interleave the halves. */
static vp_t rotary(vp_step *step, const vp_mla_shape *m, vp_t x, const char *label) {
    if (!m->interleave) return vp_apply_rotary(step, x, label);
    vp_t regrouped = vp_copy(&step->sim, x, label);
    vp_t y = vp_apply_rotary(step, regrouped, label);
    vp_drop(&step->sim, regrouped);
    return y;
}

/* apply_rotary_emb of transformers' DeepseekV2Attention (4.56-4.57:
 * src/transformers/models/deepseek_v2/modeling_deepseek_v2.py at commit
 * 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d) on q_pe and the one k_pe:
 * both made fp32 (.float(): copies unless fp32), viewed as complex pairs
 * (views), each times the model's complex64 freqs_cis (a new complex
 * tensor, the bytes of the fp32 rows; MulBackward0 keeps only the table,
 * which needs no gradient), viewed back and cast to its input's dtype
 * (type_as: a copy unless fp32, which then keeps the product); the fp32
 * copies go as it returns. New references in *q_pe and *k_pe. */
static void complex_rotary(vp_step *step, vp_t q_rot, vp_t k_rot, vp_t *q_pe, vp_t *k_pe) {
    vp_sim *sim = &step->sim;
    vp_t freqs_cis = vp_step_tensor(step, VP_TENSOR_COS);
    vp_t inputs[2] = {q_rot, k_rot}, *outs[2] = {q_pe, k_pe};
    vp_t wide[2] = {vp_to(sim, q_rot, VP_FP32, "mla.rotary_q"), vp_to(sim, k_rot, VP_FP32, "mla.rotary_k")};
    for (unsigned i = 0; i < 2; i++) {
        vp_t product = vp_mul(sim, wide[i], freqs_cis, vp_at(sim, wide[i])->numel, i ? "mla.rotary_k" : "mla.rotary_q");
        *outs[i] = vp_to(sim, product, (vp_dtype)vp_at(sim, inputs[i])->dtype, i ? "mla.rotary_k" : "mla.rotary_q");
        vp_drop(sim, product);
    }
    vp_drop(sim, wide[0]);
    vp_drop(sim, wide[1]);
}

/* apply_rotary_pos_emb of DeepSeek's modeling_deepseek.py on q_pe and
 * k_pe: the layer's tables gathered at position_ids (cos[position_ids]:
 * new [1, s, rope] tensors, kept by the products' backward), q and k
 * regrouped (view, transpose, reshape: copies), then (x * cos) +
 * (rotate_half(x) * sin) for each; the gathered tables and the copies go
 * as it returns. New references in *q_pe and *k_pe. */
static void layer_rotary(vp_step *step, const vp_t *leaves, vp_t q_rot, vp_t k_rot, vp_t *q_pe, vp_t *k_pe) {
    vp_sim *sim = &step->sim;
    vp_t cos = vp_new(sim, vp_at(sim, leaves[MLA_COS_CACHED])->numel, (vp_dtype)vp_at(sim, leaves[MLA_COS_CACHED])->dtype,
                      "mla.cos_gathered");
    vp_t sin = vp_new(sim, vp_at(sim, leaves[MLA_SIN_CACHED])->numel, (vp_dtype)vp_at(sim, leaves[MLA_SIN_CACHED])->dtype,
                      "mla.sin_gathered");
    vp_t q = vp_copy(sim, q_rot, "mla.rotary_q");
    vp_t k = vp_copy(sim, k_rot, "mla.rotary_k");
    *q_pe = vp_rotate_with(sim, q, cos, sin, "mla.rotary_q");
    *k_pe = vp_rotate_with(sim, k, cos, sin, "mla.rotary_k");
    vp_t locals[] = {cos, sin, q, k};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
}

/* k_pe.new_empty(b, heads, s, nope + rope), then states[..., :nope] = nope
 * and states[..., nope:] = rope (CopySlices twice). Returns the states. */
static vp_t filled_by_slices(vp_sim *sim, const vp_mla_shape *m, uint64_t b, uint64_t n, vp_t nope, vp_t rope,
                             vp_dtype dtype, const char *label) {
    vp_t empty = vp_new(sim, vp_numel4(sim, b, m->heads, n, m->qk_nope + m->qk_rope), dtype, label);
    vp_t first = vp_copy_slice(sim, empty, nope, vp_numel4(sim, b, m->heads, n, m->qk_nope), label);
    vp_drop(sim, empty);
    vp_t states = vp_copy_slice(sim, first, rope, vp_numel4(sim, b, m->heads, n, m->qk_rope), label);
    vp_drop(sim, first);
    return states;
}

void vp_mla_project(vp_step *step, const vp_mla_shape *m, const vp_t *leaves, vp_t x, vp_t *q, vp_t *k, vp_t *v,
                    vp_t locals[MLA_LOCALS]) {
    vp_sim *sim = &step->sim;
    uint64_t rows = step->rows, b = step->batch, n = step->seq;
    uint64_t qk = m->qk_nope + m->qk_rope;

    /* q_states = q_b_proj(q_a_layernorm(q_a_proj(hidden_states))), or q_proj */
    vp_t q_states;
    if (m->q_lora_rank) {
        vp_t down = vp_project_column(step, x, leaves[MLA_QA_W], leaves[MLA_QA_B], m->q_lora_rank, "mla.q_a_proj");
        vp_t normed = vp_hf_rms_norm(step, down, leaves[MLA_QA_NORM], rows);
        vp_drop(sim, down);
        q_states = vp_project_column(step, normed, leaves[MLA_QB_W], 0, m->heads * qk, "mla.q_b_proj");
        vp_drop(sim, normed);
    } else {
        q_states = vp_project_column(step, x, leaves[MLA_Q_W], 0, m->heads * qk, "mla.q_proj");
    }
    /* .view(...).transpose(1, 2), torch.split(..., [nope, rope], dim=-1) */
    vp_t q_parts[2];
    uint64_t q_sizes[2] = {vp_numel4(sim, b, m->heads, n, m->qk_nope), vp_numel4(sim, b, m->heads, n, m->qk_rope)};
    vp_split_columns_sizes(sim, q_states, 2, q_sizes, q_parts, "mla.q_split");
    vp_drop(sim, q_states);

    /* compressed_kv = kv_a_proj_with_mqa(hidden_states), split into the
     * latent and the rotary key */
    vp_t compressed = vp_project_column(step, x, leaves[MLA_KVA_W], leaves[MLA_KVA_B], m->kv_lora_rank + m->qk_rope,
                                        "mla.kv_a_proj_with_mqa");
    vp_t kv_parts[2];
    uint64_t kv_sizes[2] = {vp_numel(sim, rows, m->kv_lora_rank), vp_numel(sim, rows, m->qk_rope)};
    vp_split_columns_sizes(sim, compressed, 2, kv_sizes, kv_parts, "mla.kv_split");
    locals[1] = compressed; /* compressed_kv */

    /* kv_b_proj(kv_a_layernorm(k_pass)).view(...).transpose(1, 2), split
     * into every head's keys and values (views) */
    vp_t latent = vp_hf_rms_norm(step, kv_parts[0], leaves[MLA_KVA_NORM], rows);
    vp_drop(sim, kv_parts[0]);
    vp_t expanded = vp_project_column(step, latent, leaves[MLA_KVB_W], 0, m->heads * (m->qk_nope + m->v_dim),
                                      "mla.kv_b_proj");
    vp_drop(sim, latent);
    vp_t kv_heads[2];
    uint64_t head_sizes[2] = {vp_numel4(sim, b, m->heads, n, m->qk_nope), vp_numel4(sim, b, m->heads, n, m->v_dim)};
    vp_split_columns_sizes(sim, expanded, 2, head_sizes, kv_heads, "mla.kv_b_split");
    vp_drop(sim, expanded);

    if (m->layer_rotary) {
        vp_t q_pe, k_pe;
        layer_rotary(step, leaves, q_parts[1], kv_parts[1], &q_pe, &k_pe);
        vp_drop(sim, q_parts[1]);
        vp_drop(sim, kv_parts[1]);
        vp_dtype dtype = (vp_dtype)vp_at(sim, k_pe)->dtype;
        *q = filled_by_slices(sim, m, b, n, q_parts[0], q_pe, dtype, "mla.query_states");
        *k = filled_by_slices(sim, m, b, n, kv_heads[0], k_pe, dtype, "mla.key_states");
        vp_drop(sim, kv_heads[0]); /* k_nope: a view of what value_states keeps */
        *v = kv_heads[1];
        locals[0] = q_parts[0]; /* q_nope, with q: q_b_proj's output */
        locals[2] = q_pe;
        locals[3] = k_pe;
        return;
    }

    /* the rotary parts: q's per head, k's once ([b, 1, s, rope]) */
    vp_t q_rot, k_rot;
    if (m->complex_rotary) {
        complex_rotary(step, q_parts[1], kv_parts[1], &q_rot, &k_rot);
        vp_drop(sim, q_parts[1]);
        vp_drop(sim, kv_parts[1]);
    } else {
        q_rot = rotary(step, m, q_parts[1], "mla.rotary_q");
        vp_drop(sim, q_parts[1]);
        k_rot = rotary(step, m, kv_parts[1], "mla.rotary_k");
        vp_drop(sim, kv_parts[1]);
    }
    /* k_rot.expand(*k_pass.shape[:-1], -1): a view over every head */
    vp_t k_rot_heads = vp_expand(sim, k_rot, vp_numel4(sim, b, m->heads, n, m->qk_rope), "mla.k_rot_expand");
    vp_drop(sim, k_rot);

    /* torch.cat((pass, rot), dim=-1) */
    *q = vp_cat(sim, q_parts[0], q_rot, "mla.query_states");
    *k = vp_cat(sim, kv_heads[0], k_rot_heads, "mla.key_states");
    vp_drop(sim, kv_heads[0]); /* k_pass: a view of what value_states keeps */
    *v = kv_heads[1];
    locals[0] = q_parts[0]; /* q_pass, with q_states: q_b_proj's output */
    locals[2] = q_rot;
    locals[3] = k_rot_heads;
}
