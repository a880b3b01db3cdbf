/* moe.h — what the mixture-of-experts op's files share: its fields, where
 * its leaves sit, and the pieces every implementation runs (the router's
 * softmax, one expert's MLP, the shared experts). Internal to op_moe.c,
 * moe_hf.c and moe_megatron.c. */
#ifndef VRAMPLAN_MOE_H
#define VRAMPLAN_MOE_H

#include "ops.h"

enum {
    MOE_HIDDEN,
    MOE_INTERMEDIATE,
    MOE_EXPERTS,
    MOE_TOP_K,
    MOE_SHARED,
    MOE_SHARED_GATE,
    MOE_NORM_TOPK,
    MOE_CAPACITY,
    MOE_BLOCK,
    MOE_AUX_LOSS,
    MOE_GROUPS,
    MOE_TOPK_GROUPS,
    MOE_EXPERT_NAMES,
    MOE_ROUTER_LOGITS,
    MOE_GROUP_LIMITED,
    MOE_LIGER,
    MOE_FIELDS
};

/* The plain-PyTorch block: HF's token loop (Mixtral, Qwen2-MoE),
 * DeepSeekMoE's training path, DeepSeek-V3's sigmoid router with an fp32
 * accumulator, or DeepSeek-V2's own (DeepSeekMoE's path behind an fp32
 * gate), or transformers' DeepseekV2MoE (4.56-4.57: the assignments sorted
 * by expert). */
enum {
    MOE_BLOCK_MIXTRAL,
    MOE_BLOCK_DEEPSEEK,
    MOE_BLOCK_DEEPSEEK_V3,
    MOE_BLOCK_DEEPSEEK_V2,
    MOE_BLOCK_DEEPSEEK_V2_HF,
    MOE_BLOCK_GPT_OSS /* transformers' GptOssMLP: 3-D experts with biases in every release */
};

/* The experts' projections as the model names them: Mixtral's w1, w3, w2
 * or the gate_proj, up_proj, down_proj of Qwen-MoE's and DeepSeek's. */
enum { MOE_NAMES_W, MOE_NAMES_PROJ };

/* This rank's leaves of the op: the router, each local expert's three
 * matrices, the shared experts' up, gate, down and gate weight, and
 * GPT-OSS's biases (the router's, the 3-D experts' gate_up and down). */
struct moe_param_wrappers;

typedef struct {
    const vp_t *router, *w1, *w3, *w2, *shared, *score_bias;
    const vp_t *router_bias, *w1_bias, *w2_bias;
    /* PEFT's ParamWrappers around the 3-D experts while they run
     * (moe_fused.c), or NULL */
    struct moe_param_wrappers *wrapped;
} moe_slots;

static inline bool vp_moe_gpt_oss(const vp_op *op) { return vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_GPT_OSS; }

/* softmax(logits, dim=-1, dtype=torch.float32) */
vp_t vp_moe_softmax_fp32(vp_step *step, vp_t logits, const char *label);
/* weights /= weights.sum(dim=-1, keepdim=True) over n tokens' top-k
 * values (the in-place division keeps a copy for its backward: a new
 * tensor of their size); takes over the reference to weights. */
vp_t vp_moe_renormalize(vp_sim *sim, vp_t weights, uint64_t n);
/* A Python local rebound: the old value dropped once the new one is bound. */
static inline void vp_moe_rebind(vp_sim *sim, vp_t *name, vp_t value) {
    vp_t old = *name;
    *name = value;
    vp_drop(sim, old);
}
/* `*first, *second = torch.where(mask)` for an expert's `tokens` hits:
 * nonzero(as_tuple=True), one [tokens, 2] int64 tensor whose columns the
 * two names (rebound) view. */
void vp_moe_where(vp_sim *sim, uint64_t tokens, vp_t *first, vp_t *second);
/* The tokens expert e gets out of n assignments under an even routing. */
uint64_t vp_moe_share(uint64_t n, unsigned experts, unsigned e);
/* One expert's SwiGLU MLP as HF writes it: w2(act_fn(w1(x)) * w3(x)); with
 * liger_swiglu where Liger patches the op's experts, Liger's
 * (LigerBlockSparseTop2MLP, LigerQwen3MoeSwiGLUMLP): w2(LigerSiLUMulFunction(w1(x), w3(x))). */
vp_t vp_moe_expert(vp_step *step, const vp_op *op, vp_t x, vp_t w1, vp_t w3, vp_t w2, uint64_t f, uint64_t h);
/* The shared experts' gated MLP on x (SiLU(gate_proj(x)) * up_proj(x),
 * down_proj), and that output scaled by their sigmoid gate when the op has
 * one (Qwen2MoeSparseMoeBlock; taking over the reference to o). */
vp_t vp_moe_shared_mlp(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x);
vp_t vp_moe_shared_gated(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x, vp_t o);
/* routed plus the shared experts' output on x (routed as it is without
 * any); takes over the reference to routed. */
vp_t vp_moe_plus_shared(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x, vp_t routed);

vp_t vp_moe_mixtral(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
vp_t vp_moe_deepseek(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
vp_t vp_moe_deepseek_v3(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
vp_t vp_moe_deepseek_v2(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
vp_t vp_moe_deepseek_v2_hf(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
vp_t vp_moe_megatron(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);
/* transformers 5's DeepseekV3TopkRouter and route_tokens_to_experts (moe_hf.c):
 * returns the routing weights; *selected gets the choices, *logits the
 * router's fp32 logits, the block's local until it returns */
vp_t vp_moe_v5_deepseek_v3_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *selected,
                                 vp_t *logits);
/* transformers 5's DeepseekV2Moe router and route_tokens_to_experts (moe_hf.c),
 * alike */
vp_t vp_moe_v5_deepseek_v2_route(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x, vp_t *selected,
                                 vp_t *logits);
/* transformers 5's Mixtral, Qwen3-MoE, Qwen2-MoE, DeepSeek-V2, DeepSeek-V3 and GPT-OSS blocks:
 * the router, then the 3-D experts (s->w1 gate_up_proj, s->w2 down_proj)
 * by experts_implementation, beside Qwen2-MoE's and DeepSeek's shared
 * experts */
vp_t vp_moe_fused(vp_step *step, const vp_op *op, const moe_slots *s, vp_t x);

#endif
