/* mla.c — multi-head latent attention as transformers 4.51-4.52 writes it
 * (DeepseekV3Attention; DeepSeek-V2's is the same): queries through a
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
    vp_split_sizes(sim, q_states, 2, q_sizes, q_parts, "mla.q_split");
    vp_drop(sim, q_states);

    /* compressed_kv = kv_a_proj_with_mqa(hidden_states), split into the
     * latent and the rotary key */
    vp_t compressed = vp_project_column(step, x, leaves[MLA_KVA_W], leaves[MLA_KVA_B], m->kv_lora_rank + m->qk_rope,
                                        "mla.kv_a_proj_with_mqa");
    vp_t kv_parts[2];
    uint64_t kv_sizes[2] = {vp_numel(sim, rows, m->kv_lora_rank), vp_numel(sim, rows, m->qk_rope)};
    vp_split_sizes(sim, compressed, 2, kv_sizes, kv_parts, "mla.kv_split");
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
    vp_split_sizes(sim, expanded, 2, head_sizes, kv_heads, "mla.kv_b_split");
    vp_drop(sim, expanded);

    /* the rotary parts: q's per head, k's once ([b, 1, s, rope]) */
    vp_t q_rot = rotary(step, m, q_parts[1], "mla.rotary_q");
    vp_drop(sim, q_parts[1]);
    vp_t k_rot = rotary(step, m, kv_parts[1], "mla.rotary_k");
    vp_drop(sim, kv_parts[1]);
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
