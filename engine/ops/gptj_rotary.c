/* gptj_rotary.c — GPT-J's rotary embedding, line by line as
 * GPTJAttention.forward and apply_rotary_pos_emb compute it (transformers
 * models/gptj/modeling_gptj.py, commit 00b676f of the 4.5x line):
 *  - self.embed_positions (create_sinusoidal_positions: [n_positions,
 *    rotary_dim] fp32, a plain attribute that model.to(dtype) never casts)
 *    .repeat(b, 1, 1): a new fp32 [b, n_positions, rotary_dim] tensor;
 *  - position_ids.unsqueeze(-1).repeat(1, 1, rotary_dim): int64 [1, s, r];
 *  - torch.gather(table, 1, ids): fp32 [1, s, r], split into sin and cos
 *    (views); all three are locals until the module returns;
 *  - k_rot, k_pass, q_rot, q_pass = slices of key and query; the key is
 *    rotated first, then the query, then both joined with torch.cat;
 *  - apply_rotary_pos_emb: sin and cos repeat_interleave'd (new [1, s, 1, r]
 *    fp32 each, kept by the products' backward), tensor * cos, then
 *    rotate_every_two (x[..., ::2], x[..., 1::2]: strided views; -x2;
 *    torch.stack: a new tensor in the tensor's dtype, flattened as a view)
 *    * sin, and the sum: the products and the sum are fp32 (a 16-bit tensor
 *    times the fp32 table promotes).
 * The index tensors repeat_interleave makes (a few int64 per column) are
 * left out. */
#include "gptj_rotary.h"

#include "ops.h"

/* apply_rotary_pos_emb(tensor, sin, cos); returns a new reference */
static vp_t apply(vp_step *step, vp_t x, vp_t sin, vp_t cos, const char *label) {
    vp_sim *sim = &step->sim;
    /* [1, s, 1, r]: each column twice */
    vp_t sin_r = vp_new(sim, 2 * vp_at(sim, sin)->numel, VP_FP32, "gptj.repeat_interleave_sin");
    vp_t cos_r = vp_new(sim, 2 * vp_at(sim, cos)->numel, VP_FP32, "gptj.repeat_interleave_cos");
    vp_t y = vp_rotate_with(sim, x, cos_r, sin_r, label);
    vp_drop(sim, sin_r);
    vp_drop(sim, cos_r);
    return y;
}

void vp_gptj_rotary(vp_step *step, const vp_gptj_rotary_shape *shape, vp_t *q, vp_t *k,
                    void (*keep)(void *ctx, vp_t t), void *ctx) {
    vp_sim *sim = &step->sim;
    uint64_t r = shape->rotary_dim;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false; /* the table and the positions need no gradient */
    vp_t table = vp_new(sim, vp_numel3(sim, step->batch, shape->positions, r), VP_FP32, "gptj.embed_positions");
    vp_t ids = vp_new(sim, vp_numel(sim, step->seq, r), VP_INT64, "gptj.repeated_position_ids");
    vp_t sincos = vp_new(sim, vp_numel(sim, step->seq, r), VP_FP32, "gptj.sincos");
    sim->grad_mode = grad_mode;
    vp_t sin = vp_view(sim, sincos, vp_numel(sim, step->seq, r / 2), "gptj.sin");
    vp_t cos = vp_view(sim, sincos, vp_numel(sim, step->seq, r / 2), "gptj.cos");
    keep(ctx, table);
    keep(ctx, ids);
    keep(ctx, sincos);
    vp_drop(sim, table);
    vp_drop(sim, ids);
    vp_drop(sim, sincos);
    vp_t *in[2] = {k, q};
    vp_t rot[2], pass[2];
    for (unsigned i = 0; i < 2; i++) {
        uint64_t n = vp_at(sim, *in[i])->numel, rotated = n / shape->head_dim * shape->rotary_dim;
        rot[i] = vp_slice(sim, *in[i], rotated, "gptj.rot");
        pass[i] = vp_slice(sim, *in[i], n - rotated, "gptj.pass");
    }
    for (unsigned i = 0; i < 2; i++) {
        vp_t y = apply(step, rot[i], sin, cos, i ? "gptj.rotary_q" : "gptj.rotary_k");
        vp_drop(sim, rot[i]);
        rot[i] = y;
    }
    for (unsigned i = 0; i < 2; i++) {
        vp_t joined = vp_cat(sim, rot[i], pass[i], "gptj.cat");
        keep(ctx, rot[i]);
        keep(ctx, pass[i]);
        vp_drop(sim, rot[i]);
        vp_drop(sim, pass[i]);
        vp_drop(sim, *in[i]);
        *in[i] = joined;
    }
    vp_drop(sim, sin);
    vp_drop(sim, cos);
}
