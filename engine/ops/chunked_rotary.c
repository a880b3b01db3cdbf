/* chunked_rotary.c — apply_rotary_pos_emb as GptOssAttention calls it
 * (transformers 5, models/gpt_oss/modular_gpt_oss.py), line by line:
 *   cos = cos.unsqueeze(1); sin = sin.unsqueeze(1)     (views)
 *   q_embed = _apply_rotary_emb(q, cos, sin), then k_embed likewise, where
 *   _apply_rotary_emb(x, cos, sin):
 *     first_half, second_half = torch.chunk(x, 2, dim=-1)
 *     first_ = first_half * cos - second_half * sin
 *     second_ = second_half * cos + first_half * sin
 *     return torch.cat((first_, second_), dim=-1)
 * The tables are the model's half-width ones ([s, d / 2]: GptOssRotaryEmbedding
 * takes emb = freqs, no cat), in the embeddings' dtype, which promotes the
 * products (fp32 tables under autocast: the rotated q and k are fp32, as
 * LLaMA's are). Each product keeps the table for its gradient (the table
 * needs none); the four go as the sum and difference are made, first_ and
 * second_ as the function returns; chunk's backward makes x-sized
 * gradients. */
#include "chunked_rotary.h"

#include "ops.h"

static vp_t apply_rotary_emb(vp_sim *sim, vp_t x, vp_t cos, vp_t sin, const char *label) {
    uint64_t half = vp_at(sim, x)->numel / 2;
    vp_t halves[2];
    vp_split_columns(sim, x, 2, halves, label);
    vp_t a = vp_mul(sim, halves[0], cos, half, label);
    vp_t b = vp_mul(sim, halves[1], sin, half, label);
    vp_t first = vp_sub(sim, a, b, half, label);
    vp_drop(sim, a);
    vp_drop(sim, b);
    vp_t c = vp_mul(sim, halves[1], cos, half, label);
    vp_t d = vp_mul(sim, halves[0], sin, half, label);
    vp_t second = vp_add(sim, c, d, half, label);
    vp_drop(sim, c);
    vp_drop(sim, d);
    vp_t y = vp_cat(sim, first, second, label);
    vp_drop(sim, first);
    vp_drop(sim, second);
    vp_drop(sim, halves[0]);
    vp_drop(sim, halves[1]);
    return y;
}

void vp_chunked_rotary(vp_step *step, vp_t *q, vp_t *k) {
    vp_sim *sim = &step->sim;
    vp_t cos = vp_step_tensor(step, VP_TENSOR_COS), sin = vp_step_tensor(step, VP_TENSOR_SIN);
    vp_t q_embed = apply_rotary_emb(sim, *q, cos, sin, "attention.rotary_q");
    vp_t k_embed = apply_rotary_emb(sim, *k, cos, sin, "attention.rotary_k");
    vp_drop(sim, *q);
    vp_drop(sim, *k);
    *q = q_embed;
    *k = k_embed;
}
