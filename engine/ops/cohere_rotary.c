/* cohere_rotary.c — apply_rotary_pos_emb as CohereAttention calls it
 * (transformers, models/cohere/modeling_cohere.py, commit 015bfeb of the
 * 4.5x line), line by line:
 *   dtype = q.dtype; q = q.float(); k = k.float()
 *   q_embed = (q * cos) + (rotate_half(q) * sin), then k_embed likewise
 *   return q_embed.to(dtype=dtype), k_embed.to(dtype=dtype)
 * Its rotate_half takes interleaved pairs (x[..., ::2], x[..., 1::2],
 * torch.stack((-x2, x1), -1).flatten(-2)): GPT-J's rotate_every_two, which
 * allocates as LLaMA's rotate_half does (vp_rotate_with). The tables are
 * the model's shared ones (CohereRotaryEmbedding: repeat_interleave where
 * LLaMA's uses cat, the same sizes), in the embeddings' dtype; the fp32
 * copies of q and k are the function's locals until it returns. */
#include "cohere_rotary.h"

#include "ops.h"

void vp_cohere_rotary(vp_step *step, vp_t *q, vp_t *k) {
    vp_sim *sim = &step->sim;
    vp_t cos = vp_step_tensor(step, VP_TENSOR_COS), sin = vp_step_tensor(step, VP_TENSOR_SIN);
    vp_dtype dtype = (vp_dtype)vp_at(sim, *q)->dtype;
    vp_t qf = vp_to(sim, *q, VP_FP32, "cohere_rotary.q_float");
    vp_t kf = vp_to(sim, *k, VP_FP32, "cohere_rotary.k_float");
    vp_t q_embed = vp_rotate_with(sim, qf, cos, sin, "cohere_rotary.q");
    vp_t k_embed = vp_rotate_with(sim, kf, cos, sin, "cohere_rotary.k");
    vp_t q_out = vp_to(sim, q_embed, dtype, "cohere_rotary.q_cast");
    vp_t k_out = vp_to(sim, k_embed, dtype, "cohere_rotary.k_cast");
    vp_drop(sim, q_embed);
    vp_drop(sim, k_embed);
    vp_drop(sim, qf);
    vp_drop(sim, kf);
    vp_drop(sim, *q);
    vp_drop(sim, *k);
    *q = q_out;
    *k = k_out;
}
