/* sdpa.h — the attention op's core (op_attention.c: from q, k, v to the
 * merged heads) as a Lua block's F.sdpa calls it: the kernel the recipe's
 * `attention` picks (HF's eager_attention_forward, SDPA's flash or
 * memory-efficient kernel, FlashAttention-2; ring attention under context
 * parallelism; the eager core checkpointed under selective recompute), with
 * each kernel's saving rules, and the additive causal mask LLaMA's model
 * builds once per step for it. */
#ifndef VP_SDPA_H
#define VP_SDPA_H

#include "op_context.h"

typedef struct {
    uint64_t heads, kv_heads, head_dim; /* the whole model's: tensor parallelism divides the heads */
    double dropout;                     /* on the probabilities, while training */
    /* softmax(dtype=torch.float32).to(query.dtype) (LLaMA's eager path);
     * false: autocast's fp32 softmax, then .type(value.dtype) (GPT-2's) */
    bool upcast_softmax;
    /* the decoder layer keeps the probabilities the eager path returns
     * until it returns (HF 4.48+: hidden_states, self_attn_weights = ...) */
    bool keeps_weights;
    /* q, k, v as they lie: contiguous [b, heads, s, d], or views of
     * [b, s, heads, d] tensors (a projection viewed and transposed) */
    bool q_contiguous, k_contiguous, v_contiguous;
    /* views with gaps (every other head: F.select), which an autocast cast
     * makes contiguous */
    bool q_gaps, k_gaps, v_gaps;
} vp_sdpa_spec;

/* F.scaled_dot_product_attention as the recipe runs it: q [b, heads, s, d],
 * k and v [b, kv_heads, s, d] (borrowed); returns [b, s, heads, d]
 * (a new reference). */
vp_t vp_sdpa(vp_step *step, const vp_sdpa_spec *spec, vp_t q, vp_t k, vp_t v);

/* The per-step tensors it needs, made once before the first layer (the
 * causal mask of the eager path). */
void vp_sdpa_prepare(vp_step *step, const vp_sdpa_spec *spec);

/* The masks eager attention adds (a Lua block's F.mask), as the attention
 * op's `mask` kinds build them once per step: LLaMA's additive causal mask
 * (additive), Mistral's with a sliding window (additive-mistral), one made
 * from an all-ones padding mask and cloned to the batch (additive-padded),
 * a [b, 1, s, s] bool mask for masked_fill (bool); and PaliGemma's prefix-LM
 * mask, bidirectional over the tokens the batch's token_type_ids mark 0
 * (prefix: vp_attention_mask_prepare); an encoder's, BertModel's extended
 * mask over an all-ones attention mask, [b, 1, 1, s] (bidirectional). */
typedef enum {
    VP_MASK_CAUSAL,
    VP_MASK_SLIDING,
    VP_MASK_PADDED,
    VP_MASK_BOOL,
    VP_MASK_PREFIX,
    VP_MASK_BIDIRECTIONAL,
    VP_MASK_KINDS
} vp_attention_mask_kind;

/* Makes the step's mask of that kind (once per step, whatever the recipe's
 * kernel: the block computes attention eagerly itself). */
void vp_attention_mask_prepare(vp_step *step, vp_attention_mask_kind kind, uint64_t window);

/* The mask the running layer applies (borrowed). */
vp_t vp_attention_mask(const vp_step *step);

/* An operand of eager attention's torch.matmul: q, k (transposed: the keys
 * as key.transpose(2, 3)), the probabilities or v, [b, heads, s, d] as it
 * lies (contiguous, or a view of a [b, s, heads, d] tensor; with gaps, a
 * view an autocast cast makes dense), and its events' labels. */
typedef struct {
    vp_t t;
    bool contiguous, gaps, transposed;
    const char *cast_label, *reshape_label;
} vp_attention_operand;

/* torch.matmul(a, b) as eager_attention_forward runs it: autocast's casts,
 * matmul's batch fold (copies of operands it cannot view), bmm's saves. */
vp_t vp_attention_matmul(vp_step *step, const vp_attention_operand *a, const vp_attention_operand *b,
                         uint64_t out_numel, const char *label);

/* Whether the heads divide over `tp` ranks as the attention op splits them;
 * a message naming tp, or NULL. */
const char *vp_sdpa_check_tp(const vp_sdpa_spec *spec, unsigned tp);

#endif
