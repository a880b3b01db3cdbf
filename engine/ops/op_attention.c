/* op_attention.c — multi-head attention with GQA/MQA, rotary embeddings and
 * the kernels a recipe picks: eager (HF's eager_attention_forward), PyTorch
 * SDPA (flash or memory-efficient backend) and FlashAttention-2. */
#include "checkpoint.h"
#include "finetune_method.h"
#include "framework.h"
#include "ops.h"
#include "kv_cache.h"
#include "mla.h"
#include "falcon_qkv.h"
#include "gptj_rotary.h"
#include "mpt_alibi.h"
#include "cohere_rotary.h"
#include "chunked_rotary.h"
#include "ring_attention.h"
#include "sdpa.h"
#include "sdpa_math.h"

enum {
    ATT_HIDDEN,
    ATT_HEADS,
    ATT_KV_HEADS,
    ATT_HEAD_DIM,
    ATT_QKV_BIAS,
    ATT_OUT_BIAS,
    ATT_FUSED_QKV,
    ATT_ROTARY,
    ATT_DROPOUT,
    ATT_RESID_DROPOUT,
    ATT_MASK,
    ATT_POSITIONS,
    ATT_UPCAST_SOFTMAX,
    ATT_CAST_PROBS,
    ATT_CONV1D,
    ATT_CACHES,
    ATT_Q_LORA_RANK,
    ATT_KV_LORA_RANK,
    ATT_QK_NOPE_HEAD_DIM,
    ATT_QK_ROPE_HEAD_DIM,
    ATT_V_HEAD_DIM,
    ATT_ROPE_INTERLEAVE,
    ATT_QK_NORM,
    ATT_ALIBI,
    ATT_MODULE_NAMES,
    ATT_POSITION_BIAS,
    ATT_CROSS,
    ATT_ROTARY_CAT,
    ATT_SLIDING_WINDOW,
    ATT_QK_NORM_STYLE,
    ATT_ROTARY_DIM,
    ATT_PEFT_DEFAULTS,
    ATT_SOFTCAP,
    ATT_ROTARY_LOCALS,
    ATT_KEEPS_WEIGHTS,
    ATT_PROBS_LOCAL,
    ATT_HOLDS_CONTEXT,
    ATT_SCORES_LOCAL,
    ATT_RETURNS_BEFORE_OUT_PROJ,
    ATT_ALIBI_STYLE,
    ATT_RETURNS_KV,
    ATT_CACHE_TUPLES,
    ATT_LIGER_QK,
    ATT_LIGER_QK_INSTANCE,
    ATT_ROTARY_STYLE,
    ATT_SPLIT,
    ATT_SCALE_IN_PLACE,
    ATT_ROTARY_PATTERN,
    ATT_SINKS,
    ATT_FIELDS
};
_Static_assert((int)ATT_FIELDS <= (int)VP_OP_MAX_FIELDS, "an op holds every attention field");

enum {
    MASK_ADDITIVE,
    MASK_BOOL_BUFFER,
    MASK_PADDING,
    MASK_BOOL,
    MASK_NONE,
    MASK_ADDITIVE_MISTRAL,
    MASK_ADDITIVE_HYBRID,
    MASK_ADDITIVE_PADDED,
    MASK_BOOL_4D,
    MASK_ADDITIVE_KEYS,
    MASK_ADDITIVE_4D,
    MASK_ADDITIVE_4D_PAIR
};
static const char *const mask_names[] = {"additive", "bool-buffer", "padding", "bool", "none", "additive-mistral",
                                         "additive-hybrid", "additive-padded", "bool-4d", "additive-keys",
                                         "additive-4d", "additive-4d-pair", NULL};

enum { ROTARY_HALF, ROTARY_GPTJ, ROTARY_COHERE, ROTARY_DEEPSEEK, ROTARY_COMPLEX, ROTARY_CHUNKED };
static const char *const rotary_styles[] = {"half", "gptj", "cohere", "deepseek", "complex", "chunked", NULL};

enum { QK_NORM_HEAD, QK_NORM_OLMO2, QK_NORM_GEMMA, QK_NORM_COHERE };
static const char *const qk_norm_styles[] = {"head", "olmo2", "gemma", "cohere", NULL};

enum { NAMES_AUTO, NAMES_BLOOM, NAMES_T5, NAMES_PHI3, NAMES_PHI, NAMES_BERT, NAMES_MPT };
static const char *const module_name_sets[] = {"auto", "bloom", "t5", "phi3", "phi", "bert", "mpt", NULL};

enum { ALIBI_BLOOM, ALIBI_MPT };
/* how a fused projection is split: views (the default) or one of
 * FalconAttention._split_heads' layouts (vp_falcon_layout's order, after it) */
enum { SPLIT_VIEWS, SPLIT_FALCON_MULTI_QUERY, SPLIT_FALCON_GROUPED, SPLIT_FALCON_HEADS };
static const char *const split_names[] = {"views", "falcon-multi-query", "falcon-grouped", "falcon-heads", NULL};
static const char *const alibi_styles[] = {"bloom", "mpt", NULL};

static const vp_field attention_fields[ATT_FIELDS] = {
    [ATT_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width (input and output)"},
    [ATT_HEADS] = {"heads", VP_FIELD_INT, true, 0, 1, 1 << 14, NULL, "query heads"},
    [ATT_KV_HEADS] = {"kv_heads", VP_FIELD_INT, false, 0, 0, 1 << 14, NULL,
                      "key/value heads (GQA; 1 = MQA); 0 means as many as query heads"},
    [ATT_HEAD_DIM] = {"head_dim", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL, "width of a head; 0 means hidden / heads"},
    [ATT_QKV_BIAS] = {"qkv_bias", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "biases on the q, k, v projections"},
    [ATT_OUT_BIAS] = {"out_bias", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "bias on the output projection"},
    [ATT_FUSED_QKV] = {"fused_qkv", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                       "one q,k,v projection split afterwards (GPT-2's c_attn)"},
    [ATT_ROTARY] = {"rotary", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "rotary embeddings applied to q and k"},
    [ATT_DROPOUT] = {"dropout", VP_FIELD_NUMBER, false, 0, 0, 0.999999, NULL, "dropout on attention probabilities"},
    [ATT_RESID_DROPOUT] = {"resid_dropout", VP_FIELD_NUMBER, false, 0, 0, 0.999999, NULL,
                           "dropout on the output projection, inside the module (GPT-2's resid_dropout)"},
    [ATT_MASK] = {"mask", VP_FIELD_ENUM, false, MASK_ADDITIVE, 0, 0, mask_names,
                  "causal mask: one additive s x (s + 1) mask per step (LLaMA), a per-layer bool buffer with torch.where (GPT-2), "
                  "no causal mask, an additive [b, 1, 1, s] padding mask (BERT), or one [b, 1, s, s] bool mask per "
                  "step applied with masked_fill (BLOOM), none (the masks are in T5's position bias), or "
                  "additive-mistral: LLaMA's additive mask built as MistralModel builds it (Mistral, Phi-3: no "
                  "triu copy; the sliding window or-ed in place), or additive-hybrid: LLaMA's with exactly the keys' "
                  "columns, given to SDPA too (Gemma 2's _update_causal_mask), or additive-padded: LLaMA's made from the "
                  "model's own all-ones [b, s] mask (OPT): exactly the keys' columns, cloned to the batch and the "
                  "padding merged in, [b, 1, s, keys], or bool-4d: _prepare_4d_causal_attention_mask's "
                  "additive mask made bool (MPT): [b, 1, s, s] bool, applied with masked_fill, or additive-keys: "
                  "LLaMA's with exactly the keys' columns (FalconModel's _update_causal_mask: target_length = past "
                  "+ sequence), or additive-4d: transformers' masking_utils (4.53+) create_causal_mask for eager "
                  "attention, a [1, 1, s, keys] bool comparison expanded to the batch and made additive by "
                  "torch.where: [b, 1, s, keys] in the activations' dtype, or additive-4d-pair: two such masks "
                  "made one after the other, create_causal_mask's and create_sliding_window_causal_mask's, both "
                  "kept through the layers (GPT-OSS's causal_mask_mapping, transformers 5)"},
    [ATT_POSITIONS] = {"positions", VP_FIELD_INT, false, 0, 0, 1 << 20, NULL,
                       "size of the bool-buffer mask (GPT-2's n_positions), or the width of MPT's ALiBi table "
                       "(max_seq_len: the longest sequence it runs)"},
    [ATT_UPCAST_SOFTMAX] = {"upcast_softmax", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                            "softmax(dtype=torch.float32) then .to(query dtype), as LLaMA's eager path does"},
    [ATT_CAST_PROBS] = {"cast_probs", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                        "without upcast_softmax: probabilities cast to the value's dtype before dropout (GPT-2's .type); "
                        "false: dropout on them as they are, the matmul casting (BERT)"},
    [ATT_CONV1D] = {"conv1d", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                    "the projections are transformers' Conv1D (GPT-2), not nn.Linear: tools that act on "
                    "nn.Linear (apex ASP) pass them by"},
    [ATT_CACHES] = {"caches", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                    "with use_cache the model's outputs keep this layer's keys and values (LLaMA's DynamicCache: "
                    "after the rotary embedding; GPT-2's presents: views of the fused projection)"},
    [ATT_Q_LORA_RANK] = {"q_lora_rank", VP_FIELD_INT, false, 0, 0, 1 << 20, NULL,
                         "multi-head latent attention: the queries' low rank (0: one q_proj)"},
    [ATT_KV_LORA_RANK] = {"kv_lora_rank", VP_FIELD_INT, false, 0, 0, 1 << 20, NULL,
                          "multi-head latent attention (DeepSeek-V2/V3) when set: the keys' and values' latent width"},
    [ATT_QK_NOPE_HEAD_DIM] = {"qk_nope_head_dim", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL,
                              "MLA: each head's query/key width without rotary"},
    [ATT_QK_ROPE_HEAD_DIM] = {"qk_rope_head_dim", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL,
                              "MLA: each head's rotary query/key width (the key's shared by all heads)"},
    [ATT_V_HEAD_DIM] = {"v_head_dim", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL, "MLA: each head's value width"},
    [ATT_ROPE_INTERLEAVE] = {"rope_interleave", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                             "MLA: the rotary halves are interleaved in the weights (a regrouping copy per use)"},
    [ATT_QK_NORM] = {"qk_norm", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                     "an RMSNorm over each head of the queries and keys before the rotary embedding (Qwen3)"},
    [ATT_ALIBI] = {"alibi", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "ALiBi as BLOOM computes it: a [b x heads, 1, s] bias per step, the scores one baddbmm of "
                   "contiguous copies of q and k; transformers runs it eagerly only (see alibi_style)"},
    [ATT_MODULE_NAMES] = {"module_names", VP_FIELD_ENUM, false, NAMES_AUTO, 0, 0, module_name_sets,
                          "the projections' names for LoRA targets: auto (q_proj/k_proj/v_proj/o_proj, c_attn/c_proj "
                          "when fused), bloom (query_key_value, dense: BLOOM's, GPT-NeoX's), t5 (q, k, v, o), phi3 "
                          "(qkv_proj, o_proj), phi (q_proj, k_proj, v_proj, dense: Phi-1/Phi-2), bert (query, key, "
                          "value, dense) or mpt (Wqkv, out_proj)"},
    [ATT_POSITION_BIAS] = {"position_bias", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "T5Attention: unscaled scores, the stack's position bias (masks included) added in place, "
                           "softmax over scores.float(); the scores stay bound until the module returns; eager only"},
    [ATT_CROSS] = {"cross", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "encoder-decoder attention (T5's EncDecAttention): keys and values from the encoder's output, "
                   "the cross-attention bias; needs position_bias"},
    [ATT_ROTARY_CAT] = {"rotary_cat", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                        "the rotated queries and keys joined to their unrotated rest with torch.cat, a copy each "
                        "(Phi-3's apply_rotary_pos_emb, transformers 4.49+)"},
    [ATT_SLIDING_WINDOW] = {"sliding_window", VP_FIELD_INT, false, 0, 0, 1 << 30, NULL,
                            "keys a query sees at most (Mistral, Phi-3); 0: no window. A window longer than the keys "
                            "changes nothing; from there on SDPA gets the 4-D mask (its memory-efficient kernel)"},
    [ATT_QK_NORM_STYLE] = {"qk_norm_style", VP_FIELD_ENUM, false, QK_NORM_HEAD, 0, 0, qk_norm_styles,
                           "with qk_norm: head (Qwen3: LlamaRMSNorm over each head), olmo2 (OLMo-2: Olmo2RMSNorm "
                           "over the whole projection, before it is split into heads) or gemma (Gemma 3: "
                           "Gemma3RMSNorm over each head) or cohere (Cohere: CohereLayerNorm over each head, a "
                           "[heads, head_dim] weight, after all three projections)"},
    [ATT_ROTARY_DIM] = {"rotary_dim", VP_FIELD_INT, false, 0, 0, 1 << 16, NULL,
                        "with rotary_cat: the rotated width of each query and key head (Phi-4-mini's "
                        "partial_rotary_factor); 0 means all of it"},
    [ATT_PEFT_DEFAULTS] = {"peft_defaults", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                           "PEFT has default LoRA targets for this model type (its "
                           "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING); false: a recipe must name them"},
    [ATT_SOFTCAP] = {"softcap", VP_FIELD_NUMBER, false, 0, 0, 1e9, NULL,
                     "the scores capped as cap * tanh(scores / cap) before the mask (Gemma 2's "
                     "attn_logit_softcapping): under eager attention three more score-sized tensors, tanh's kept "
                     "for backward; 0: none"},
    [ATT_ROTARY_LOCALS] = {"rotary_locals", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "with rotary_cat: the rotated parts and the unrotated rests (views of the projections) "
                           "are locals of the module until it returns (PhiAttention.forward), not of a helper"},
    [ATT_KEEPS_WEIGHTS] = {"keeps_weights", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "eager attention returns its probabilities (after dropout), which the decoder layer "
                           "keeps until it returns (HF 4.48+: hidden_states, self_attn_weights = self.self_attn(...)); "
                           "false: they go once used (BERT, BLOOM and T5 return them only with output_attentions; "
                           "see probs_local)"},
    [ATT_PROBS_LOCAL] = {"probs_local", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                         "eager attention computed in the module's own forward (T5Attention, BloomAttention): its "
                         "probabilities (after dropout) are a local there through the output projection, on the GPU "
                         "under save_on_cpu"},
    [ATT_HOLDS_CONTEXT] = {"holds_context", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "the context (the output projection's input) stays a local of the block until the norm "
                           "after it returns (BertAttention: self_outputs while BertSelfOutput runs), whether or not "
                           "autograd saves it"},
    [ATT_SCORES_LOCAL] = {"scores_local", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                          "eager attention's masked scores keep their name past the softmax (BertSelfAttention: "
                          "attention_probs = softmax(attention_scores)), so they stay until the module returns; "
                          "false: the softmax's result takes the name (attn_weights = softmax(attn_weights))"},
    [ATT_RETURNS_BEFORE_OUT_PROJ] = {"returns_before_out_proj", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                                     "the module that computes the context returns it before the output "
                                     "projection, which another module runs (BertSelfAttention, then "
                                     "BertSelfOutput): its locals (the projections, kept scores and "
                                     "probabilities) go first"},
    [ATT_ALIBI_STYLE] = {"alibi_style", VP_FIELD_ENUM, false, ALIBI_BLOOM, 0, 0, alibi_styles,
                         "with alibi: bloom (above), or mpt: MptAttention's (transformers 4.50-4.52), an fp32 "
                         "[heads, 1, positions] table made once, the scores scaled, then added to it (an fp32 "
                         "sum whatever their dtype), views of one Wqkv output chunked in three"},
    [ATT_RETURNS_KV] = {"returns_kv", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                        "the module returns its keys and values whether or not the model caches them, and the "
                        "layer keeps them until it returns (MptBlock's past_key_value): views of a fused "
                        "projection keep all of it"},
    [ATT_CACHE_TUPLES] = {"cache_tuples", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                          "with caches: the model returns its cache as tuples of tensors (transformers 4.46-4.52's "
                          "GPT-2 and BLOOM presents), not a Cache object, so tools that walk the outputs "
                          "(accelerate's convert_outputs_to_fp32) reach the tensors"},
    [ATT_LIGER_QK] = {"liger_qk", VP_FIELD_ENUM, false, VP_LIGER_NORM_NONE, 0, 0, vp_liger_norm_names,
                      "with qk_norm: what Liger-Kernel's RMSNorm class swap (recipe key liger_rms_norm, "
                      "liger_before_load) puts on q_norm and k_norm: none, in_place (Qwen3's LigerRMSNorm) or "
                      "out_of_place (Gemma 3's, OLMo-2's)"},
    [ATT_LIGER_QK_INSTANCE] = {"liger_qk_instance", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                               "with liger_qk: Liger's patch of a built model reaches q_norm and k_norm too "
                               "(Gemma 3's), not only its class swap"},
    [ATT_ROTARY_STYLE] = {"rotary_style", VP_FIELD_ENUM, false, ROTARY_HALF, 0, 0, rotary_styles,
                          "with rotary: half (rotate_half on the model's shared tables), or gptj: GPTJAttention's "
                          "(transformers 4.5x), each layer's own fp32 table of positions rows repeated over the batch "
                          "and gathered, rotate_every_two on the first rotary_dim of each head (the key first), the "
                          "fp32 table promoting q and k to fp32, then torch.cat, or cohere: CohereAttention's "
                          "(transformers 4.5x), q and k made fp32, rotate_half on interleaved pairs (rotate_every_two) "
                          "with the model's shared tables, then cast back; or deepseek (multi-head latent attention only): "
                          "DeepseekV2Attention of DeepSeek's own modeling_deepseek.py (DeepSeek-V2), each layer's own "
                          "cos/sin caches ([seq_len, rope] buffers, remade at the first step's length) gathered at "
                          "the positions, the halves regrouped, the query and key states made by new_empty and slice "
                          "assignments; or complex (multi-head latent attention only): transformers' "
                          "DeepseekV2Attention (4.54+), q_pe and k_pe made fp32, viewed as complex pairs and multiplied "
                          "by the model's complex64 freqs_cis (rotary_embedding's complex tables), cast back; or "
                          "chunked: GPT-OSS's _apply_rotary_emb (transformers 5), each head chunked in halves, "
                          "first * cos - second * sin and second * cos + first * sin joined by torch.cat, with the "
                          "model's half-width tables (rotary_embedding's half_tables)"},
    [ATT_SPLIT] = {"split", VP_FIELD_ENUM, false, SPLIT_VIEWS, 0, 0, split_names,
                   "with fused_qkv: views (split, chunk or slices of the projection), or FalconAttention's "
                   "_split_heads (transformers 4.5x): falcon-multi-query (multi_query: the queries a view, the one "
                   "key and value head copies indexed with a list; kv_heads = 1), falcon-grouped "
                   "(new_decoder_architecture: keys and values indexed per group, broadcast to every query head "
                   "and, like the queries, copied by flatten unless a group has one head; kv_heads > 1), or "
                   "falcon-heads (neither: three select views; kv_heads = heads). The projection is a local of "
                   "the module until it returns"},
    [ATT_SCALE_IN_PLACE] = {"scale_in_place", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                            "FalconAttention's eager scores: divided by sqrt(head_dim) in place, then "
                            "softmax(scores + mask, dtype=the module input's dtype), the scores bound to their "
                            "name until the softmax returns; no dropout on the probabilities"},
    [ATT_ROTARY_PATTERN] = {"rotary_pattern", VP_FIELD_INT, false, 0, 0, 1 << 20, NULL,
                            "rotary on the sliding layers alone: layer i rotates unless (i + 1) is a multiple of "
                            "this (Cohere2Attention: apply_rotary_pos_emb only where sliding_window is set; the "
                            "global layers have no position embedding); 0: every layer rotates"},
    [ATT_SINKS] = {"sinks", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "a learned sink logit per head joined to every row of scores (GPT-OSS's attention, transformers "
                   "5): under eager attention the masked scores, their cat with the sinks, the row max taken off "
                   "and the softmax without upcast, the sink column sliced off (a view) and the probabilities cast "
                   "to the values' dtype; transformers has no SDPA path for it (sdpa runs eagerly), flash is the "
                   "hub's FlashAttention-3 with sinks"},
};

/* head_dim is the queries' and keys' width; v_dim the values' (they differ
 * under multi-head latent attention). */
typedef struct {
    uint64_t heads, kv_heads, head_dim, v_dim, hidden;
} shape;

static bool is_mla(const vp_op *op) { return vp_op_u64(op, ATT_KV_LORA_RANK) > 0; }

/* ALiBi as BLOOM computes it (baddbmm of the bias and copies of q and k)
 * or as MPT does (see alibi_style) */
static bool bloom_alibi(const vp_op *op) {
    return vp_op_flag(op, ATT_ALIBI) && vp_op_u64(op, ATT_ALIBI_STYLE) == ALIBI_BLOOM;
}
static bool gptj_rotary(const vp_op *op) {
    return vp_op_flag(op, ATT_ROTARY) && vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_GPTJ;
}
static bool cohere_rotary(const vp_op *op) {
    return vp_op_flag(op, ATT_ROTARY) && vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_COHERE;
}
static bool chunked_rotary(const vp_op *op) {
    return vp_op_flag(op, ATT_ROTARY) && vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_CHUNKED;
}

static vp_falcon_shape falcon_shape(const vp_op *op);

static bool falcon_split(const vp_op *op) { return vp_op_u64(op, ATT_SPLIT) != SPLIT_VIEWS; }

static bool mpt_alibi(const vp_op *op) {
    return vp_op_flag(op, ATT_ALIBI) && vp_op_u64(op, ATT_ALIBI_STYLE) == ALIBI_MPT;
}

/* DeepSeek's own MLA (DeepSeek-V2's modeling_deepseek.py) */
static bool deepseek_rotary(const vp_op *op) { return vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_DEEPSEEK; }

static vp_mla_shape mla_shape(const vp_op *op) {
    return (vp_mla_shape){vp_op_u64(op, ATT_HIDDEN),          vp_op_u64(op, ATT_HEADS),
                          vp_op_u64(op, ATT_Q_LORA_RANK),     vp_op_u64(op, ATT_KV_LORA_RANK),
                          vp_op_u64(op, ATT_QK_NOPE_HEAD_DIM), vp_op_u64(op, ATT_QK_ROPE_HEAD_DIM),
                          vp_op_u64(op, ATT_V_HEAD_DIM),      vp_op_flag(op, ATT_QKV_BIAS),
                          vp_op_flag(op, ATT_ROPE_INTERLEAVE), deepseek_rotary(op),
                          vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_COMPLEX};
}

static shape shape_of(const vp_op *op) {
    shape s;
    s.hidden = vp_op_u64(op, ATT_HIDDEN);
    s.heads = vp_op_u64(op, ATT_HEADS);
    s.kv_heads = vp_op_u64(op, ATT_KV_HEADS) ? vp_op_u64(op, ATT_KV_HEADS) : s.heads;
    s.head_dim = vp_op_u64(op, ATT_HEAD_DIM) ? vp_op_u64(op, ATT_HEAD_DIM) : s.hidden / s.heads;
    s.v_dim = s.head_dim;
    if (is_mla(op)) { /* every head its own keys and values */
        s.kv_heads = s.heads;
        s.head_dim = vp_op_u64(op, ATT_QK_NOPE_HEAD_DIM) + vp_op_u64(op, ATT_QK_ROPE_HEAD_DIM);
        s.v_dim = vp_op_u64(op, ATT_V_HEAD_DIM);
    }
    return s;
}

static vp_falcon_shape falcon_shape(const vp_op *op) {
    static const vp_falcon_layout layouts[] = {[SPLIT_FALCON_MULTI_QUERY] = VP_FALCON_MULTI_QUERY,
                                               [SPLIT_FALCON_GROUPED] = VP_FALCON_GROUPED,
                                               [SPLIT_FALCON_HEADS] = VP_FALCON_HEADS};
    shape s = shape_of(op);
    return (vp_falcon_shape){layouts[vp_op_u64(op, ATT_SPLIT)], s.heads, s.kv_heads, s.head_dim};
}

/* One tensor-parallel rank's heads (Megatron's ColumnParallelLinear for
 * q/k/v): heads / tp query heads; key/value groups split the same way, or
 * one group per rank, replicated, when there are fewer groups than ranks. */
static shape local_shape(const vp_op *op, unsigned tp) {
    shape s = shape_of(op);
    s.heads /= tp;
    s.kv_heads = s.kv_heads >= tp ? s.kv_heads / tp : 1;
    return s;
}

/* The layers' first attention speaks for the model's cache, PEFT's
 * defaults and prefix tuning's table. */
static void attention_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    if (section != VP_SECTION_LAYER) return;
    shape s = shape_of(op);
    facts->attention = true;
    facts->caches = vp_op_flag(op, ATT_CACHES);
    facts->cache_tuples = vp_op_flag(op, ATT_CACHE_TUPLES);
    facts->peft_defaults = vp_op_flag(op, ATT_PEFT_DEFAULTS);
    facts->kv_width = s.kv_heads * s.head_dim;
    facts->kv_heads = (unsigned)s.kv_heads;
    facts->splits_hidden = s.hidden % s.heads == 0 && s.hidden / s.heads == s.head_dim;
    /* layers unlike by their rotary fold by whole periods */
    vp_model_facts_add_period(facts, (unsigned)vp_op_u64(op, ATT_ROTARY_PATTERN));
}

/* Whether the running layer rotates q and k (rotary_pattern: its sliding
 * layers alone). */
static bool rotates_here(const vp_step *step, const vp_op *op) {
    uint64_t pattern = vp_op_u64(op, ATT_ROTARY_PATTERN);
    return vp_op_flag(op, ATT_ROTARY) && (!pattern || (step->layer_index + 1) % pattern != 0);
}

static const char *attention_check_tp(const vp_op *op, unsigned tp) {
    shape s = shape_of(op);
    if (is_mla(op)) return "tp: multi-head latent attention is modelled without tensor parallelism";
    if (falcon_split(op) && tp > 1) return "tp: Falcon's fused query_key_value is modelled without tensor parallelism";
    if (s.heads % tp) return "tp: must divide the attention heads";
    if (s.kv_heads % tp && tp % s.kv_heads) return "tp: the key/value heads and tp must divide one another";
    if (tp > 1 && vp_op_flag(op, ATT_QK_NORM) && vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_OLMO2)
        return "tp: OLMo-2's q_norm and k_norm span the whole projection; modelled without tensor parallelism";
    if (tp > 1 && (cohere_rotary(op) || (vp_op_flag(op, ATT_QK_NORM) && vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_COHERE)))
        return "tp: Cohere's attention is modelled without tensor parallelism";
    return NULL;
}

static const char *attention_check(const vp_op *op) {
    shape s = shape_of(op);
    if (is_mla(op)) {
        if (!vp_op_u64(op, ATT_QK_NOPE_HEAD_DIM) || !vp_op_u64(op, ATT_QK_ROPE_HEAD_DIM) || !s.v_dim)
            return "multi-head latent attention needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim";
        if (!vp_op_flag(op, ATT_ROTARY) || vp_op_u64(op, ATT_QK_ROPE_HEAD_DIM) % 2)
            return "multi-head latent attention needs rotary = true and an even qk_rope_head_dim";
        if (vp_op_flag(op, ATT_FUSED_QKV)) return "multi-head latent attention has no fused_qkv";
        if (vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_GPTJ) return "multi-head latent attention has no gptj rotary";
        return NULL;
    }
    if (deepseek_rotary(op)) return "rotary_style = \"deepseek\" is DeepSeek-V2's latent attention: needs kv_lora_rank";
    if (vp_op_u64(op, ATT_ROTARY_STYLE) == ROTARY_COMPLEX)
        return "rotary_style = \"complex\" is transformers' DeepSeek-V2 latent attention: needs kv_lora_rank";
    if (!vp_op_u64(op, ATT_HEAD_DIM) && s.hidden % s.heads) return "heads must divide hidden (or give head_dim)";
    if (s.heads % s.kv_heads) return "kv_heads must divide heads";
    bool phi3 = vp_op_u64(op, ATT_MODULE_NAMES) == NAMES_PHI3;
    if (falcon_split(op)) {
        unsigned split = (unsigned)vp_op_u64(op, ATT_SPLIT);
        if (!vp_op_flag(op, ATT_FUSED_QKV) || vp_op_u64(op, ATT_MODULE_NAMES) != NAMES_BLOOM || !vp_op_flag(op, ATT_ROTARY) ||
            vp_op_flag(op, ATT_ROTARY_CAT) || gptj_rotary(op))
            return "split = \"falcon-...\" is FalconAttention's rotary path: needs fused_qkv, module_names = \"bloom\" "
                   "and rotary (rotate_half, no rotary_cat)";
        if (split == SPLIT_FALCON_MULTI_QUERY && s.kv_heads != 1) return "split = \"falcon-multi-query\" needs kv_heads = 1";
        if (split == SPLIT_FALCON_HEADS && s.kv_heads != s.heads)
            return "split = \"falcon-heads\" needs kv_heads = heads";
        if (split == SPLIT_FALCON_GROUPED && s.kv_heads == 1 && s.heads > 1)
            return "split = \"falcon-grouped\" with one key/value group of several heads is not modelled (flatten "
                   "views the broadcast keys)";
    }
    if (vp_op_flag(op, ATT_SCALE_IN_PLACE) && (vp_op_flag(op, ATT_ALIBI) || vp_op_flag(op, ATT_POSITION_BIAS) ||
                                               vp_op_u64(op, ATT_MASK) != MASK_ADDITIVE_KEYS))
        return "scale_in_place is FalconAttention's eager path: needs mask = \"additive-keys\", no alibi or position_bias";
    if (vp_op_flag(op, ATT_FUSED_QKV) && s.kv_heads != s.heads && !phi3 && !falcon_split(op))
        return "fused_qkv with fewer kv_heads than heads is Phi-3's qkv_proj: needs module_names = \"phi3\"";
    if (phi3 && !vp_op_flag(op, ATT_FUSED_QKV)) return "module_names = \"phi3\" names a fused qkv_proj: needs fused_qkv";
    if (vp_op_u64(op, ATT_MODULE_NAMES) == NAMES_PHI && vp_op_flag(op, ATT_FUSED_QKV))
        return "module_names = \"phi\" names Phi-2's separate q_proj, k_proj, v_proj: no fused_qkv";
    if (vp_op_flag(op, ATT_ROTARY_CAT) && !vp_op_flag(op, ATT_ROTARY)) return "rotary_cat needs rotary";
    if (vp_op_u64(op, ATT_ROTARY_PATTERN) && (!vp_op_flag(op, ATT_ROTARY) || is_mla(op)))
        return "rotary_pattern needs rotary (and no latent attention)";
    if (gptj_rotary(op) && (vp_op_flag(op, ATT_ROTARY_CAT) || vp_op_flag(op, ATT_FUSED_QKV) ||
                            !vp_op_u64(op, ATT_POSITIONS) || !vp_op_u64(op, ATT_ROTARY_DIM) || s.kv_heads != s.heads))
        return "rotary_style = \"gptj\" is GPT-J's attention: needs rotary, positions (its table's rows), rotary_dim, "
               "separate q, k, v, kv_heads = heads and no rotary_cat";
    if (vp_op_flag(op, ATT_ROTARY_LOCALS) && !vp_op_flag(op, ATT_ROTARY_CAT)) return "rotary_locals needs rotary_cat";
    if (cohere_rotary(op) && (vp_op_flag(op, ATT_ROTARY_CAT) || vp_op_flag(op, ATT_FUSED_QKV)))
        return "rotary_style = \"cohere\" is CohereAttention's: separate q, k, v and no rotary_cat";
    uint64_t rotary_dim = vp_op_u64(op, ATT_ROTARY_DIM);
    if (rotary_dim && ((!vp_op_flag(op, ATT_ROTARY_CAT) && !gptj_rotary(op)) || rotary_dim % 2 || rotary_dim > s.head_dim))
        return "rotary_dim needs rotary_cat and an even width no wider than a head";
    if (vp_op_flag(op, ATT_ROTARY) && s.head_dim % 2) return "rotary attention needs an even head_dim";
    if (chunked_rotary(op) && (vp_op_flag(op, ATT_ROTARY_CAT) || vp_op_flag(op, ATT_FUSED_QKV)))
        return "rotary_style = \"chunked\" is GPT-OSS's attention: separate q, k, v and no rotary_cat";
    if (vp_op_flag(op, ATT_SINKS) && (vp_op_flag(op, ATT_ALIBI) || vp_op_flag(op, ATT_POSITION_BIAS) ||
                                      vp_op_flag(op, ATT_FUSED_QKV) || op->value[ATT_SOFTCAP] > 0 ||
                                      vp_op_flag(op, ATT_SCALE_IN_PLACE) || vp_op_flag(op, ATT_UPCAST_SOFTMAX)))
        return "sinks is GPT-OSS's attention: separate q, k, v, an additive mask, no alibi, position_bias, softcap "
               "or upcast_softmax (its softmax keeps the scores' dtype)";
    if (vp_op_u64(op, ATT_MASK) == MASK_BOOL_BUFFER && !vp_op_u64(op, ATT_POSITIONS))
        return "positions is required with mask = \"bool-buffer\"";
    if (vp_op_u64(op, ATT_MODULE_NAMES) == NAMES_BLOOM && !vp_op_flag(op, ATT_FUSED_QKV))
        return "module_names = \"bloom\" names a fused query_key_value: needs fused_qkv";
    if (vp_op_flag(op, ATT_ALIBI) && (!vp_op_flag(op, ATT_FUSED_QKV) || vp_op_flag(op, ATT_ROTARY)))
        return "alibi is BLOOM's and MPT's attention: needs fused_qkv and no rotary";
    if (vp_op_u64(op, ATT_ALIBI_STYLE) == ALIBI_MPT &&
        (!vp_op_flag(op, ATT_ALIBI) || vp_op_u64(op, ATT_MASK) != MASK_BOOL_4D || !vp_op_u64(op, ATT_POSITIONS)))
        return "alibi_style = \"mpt\" needs alibi, mask = \"bool-4d\" and positions (the table's width)";
    if (vp_op_u64(op, ATT_MASK) == MASK_BOOL_4D && !mpt_alibi(op))
        return "mask = \"bool-4d\" is MPT's: needs alibi_style = \"mpt\"";
    if (vp_op_u64(op, ATT_MODULE_NAMES) == NAMES_MPT && !vp_op_flag(op, ATT_FUSED_QKV))
        return "module_names = \"mpt\" names a fused Wqkv: needs fused_qkv";
    bool position_bias = vp_op_flag(op, ATT_POSITION_BIAS);
    if (position_bias && (vp_op_flag(op, ATT_FUSED_QKV) || vp_op_flag(op, ATT_ROTARY) || vp_op_flag(op, ATT_ALIBI) ||
                          vp_op_u64(op, ATT_MASK) != MASK_NONE || s.kv_heads != s.heads))
        return "position_bias is T5's attention: separate q, k, v, no rotary or alibi, mask = \"none\", kv_heads = heads";
    if (!position_bias && vp_op_u64(op, ATT_MASK) == MASK_NONE)
        return "mask = \"none\" needs position_bias (the masks are in the bias)";
    if (vp_op_flag(op, ATT_CROSS) && !position_bias) return "cross attention is T5's: needs position_bias";
    return NULL;
}

/* transformers has BLOOM's attention in eager form only (no SDPA or flash
 * implementation): "sdpa", the default, resolves to it. */
static const char *attention_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    const vp_op *op = vp_section_find(&model->section[VP_SECTION_LAYER], &vp_op_attention);
    /* T5 has no SDPA or flash implementation in transformers 4.46-4.52:
     * "sdpa" falls back to eager */
    if (op && vp_op_flag(op, ATT_POSITION_BIAS) &&
        (recipe->attention == VP_ATTN_FLASH || recipe->attention == VP_ATTN_MEM_EFFICIENT))
        return "attention: T5's position-biased attention runs eagerly in transformers (no flash or SDPA kernel)";
    /* a layer's own sliding-window mask is a Python local of HF's decoder layer */
    bool hybrid = (op && (vp_op_u64(op, ATT_MASK) == MASK_ADDITIVE_HYBRID || op->value[ATT_SOFTCAP] > 0)) ||
                  model->facts.sliding_mask;
    bool transformers = vp_framework_of(recipe)->hf_modeling;
    /* GptOssPreTrainedModel: _supports_sdpa = False (sdpa, the default,
     * runs eagerly: kernel_for); its flash path is the hub's
     * kernels-community/vllm-flash-attn3, FlashAttention-3 with sinks */
    if (op && vp_op_flag(op, ATT_SINKS)) {
        if (recipe->attention == VP_ATTN_MEM_EFFICIENT)
            return "attention: GPT-OSS's attention sinks have no SDPA kernel in transformers (eager, or flash: the "
                   "hub's FlashAttention-3 with sinks)";
        if (!transformers || recipe->cp > 1)
            return "framework: GPT-OSS's attention is modelled as transformers runs it (no megatron, no cp)";
        if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
            return "finetune: prefix tuning of GPT-OSS is not modelled";
        return NULL;
    }
    if (hybrid && (!transformers || recipe->cp > 1))
        return "framework: Gemma 2's and Gemma 3's attention (per-layer sliding masks, soft caps) is modelled as "
               "transformers runs it (no megatron, no cp)";
    if (hybrid && vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
        return "finetune: prefix tuning of Gemma 2 and Gemma 3 (PEFT's HybridCache path) is not modelled";
    if (op && is_mla(op) && deepseek_rotary(op)) {
        /* ATTENTION_CLASSES of modeling_deepseek.py: eager or
         * flash_attention_2 (DeepseekV2FlashAttention2, not modelled); no
         * SDPA class, so "sdpa" runs eagerly (kernel_for) */
        if (recipe->attention == VP_ATTN_FLASH || recipe->attention == VP_ATTN_MEM_EFFICIENT)
            return "attention: DeepSeek-V2's own attention is modelled eagerly (DeepseekV2FlashAttention2 is not "
                   "modelled; it has no SDPA path)";
        if (!transformers || recipe->cp > 1)
            return "framework: DeepSeek-V2's attention is modelled as its modeling code runs under transformers (no "
                   "megatron, no cp)";
        if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
            return "finetune: prefix tuning of DeepSeek-V2 is not modelled";
        return NULL;
    }
    if (op && falcon_split(op)) {
        if (!transformers || recipe->cp > 1)
            return "framework: Falcon's attention is modelled as transformers runs it (no megatron, no cp)";
        /* SDPA's fused kernels take one head count for q, k and v
         * (sdp_utils.cpp, check_batch_size_and_num_heads_dense) */
        if (vp_op_u64(op, ATT_SPLIT) == SPLIT_FALCON_MULTI_QUERY && recipe->attention == VP_ATTN_MEM_EFFICIENT)
            return "attention: SDPA's memory-efficient kernel refuses Falcon's one key head for all query heads "
                   "(SDPA runs its math backend: attention = sdpa)";
        if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
            return "finetune: prefix tuning of Falcon is not modelled";
        return NULL;
    }
    if (op && gptj_rotary(op)) {
        /* GPTJAttention: torch.gather of rows past n_positions fails */
        if (recipe->seq_len + recipe->virtual_tokens > vp_op_u64(op, ATT_POSITIONS))
            return "seq_len: longer than GPT-J's position table (n_positions): transformers cannot run it";
        if (recipe->attention == VP_ATTN_FLASH || recipe->attention == VP_ATTN_MEM_EFFICIENT)
            return "attention: GPT-J's attention is modelled eagerly (GPTJAttention: no SDPA path in transformers; "
                   "GPTJFlashAttention2 is not modelled)";
        if (!transformers || recipe->cp > 1)
            return "framework: GPT-J's attention is modelled as transformers runs it (no megatron, no cp)";
        if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
            return "finetune: prefix tuning of GPT-J is not modelled";
        return NULL;
    }
    if (!op || !vp_op_flag(op, ATT_ALIBI)) return NULL;
    bool mpt = mpt_alibi(op);
    if (recipe->attention == VP_ATTN_FLASH || recipe->attention == VP_ATTN_MEM_EFFICIENT)
        return mpt ? "attention: MPT's ALiBi attention runs eagerly in transformers (no flash or SDPA kernel)"
                   : "attention: BLOOM's ALiBi attention runs eagerly in transformers (no flash or SDPA kernel)";
    if (!transformers || recipe->cp > 1)
        return mpt ? "framework: MPT's ALiBi attention is modelled as transformers runs it (no megatron, no cp)"
                   : "framework: BLOOM's ALiBi attention is modelled as transformers runs it (no megatron, no cp)";
    if (!mpt) return NULL;
    /* position_bias[:, :, -keys:] of a max_seq_len-wide table no longer
     * broadcasts past it */
    if (recipe->seq_len + recipe->virtual_tokens > vp_op_u64(op, ATT_POSITIONS))
        return "seq_len: longer than MPT's ALiBi table (max_seq_len): transformers cannot run it";
    if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
        return "finetune: prefix tuning of MPT is not modelled";
    return NULL;
}

enum { Q_W, Q_B, K_W, K_B, V_W, V_B, O_W, O_B, MASK_BUFFER, Q_NORM, K_NORM, SINKS, ATT_SLOTS };

static unsigned attention_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    if (is_mla(op)) {
        vp_mla_shape m = mla_shape(op);
        return vp_mla_leaves(&m, out);
    }
    unsigned tp = split->tp;
    shape s = local_shape(op, tp);
    uint64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    bool qkv_bias = vp_op_flag(op, ATT_QKV_BIAS), fused = vp_op_flag(op, ATT_FUSED_QKV);
    /* GPT-2's names with its fused q/k/v, or BLOOM's */
    unsigned names = (unsigned)vp_op_u64(op, ATT_MODULE_NAMES);
    bool bloom = names == NAMES_BLOOM, t5 = names == NAMES_T5;
    bool phi3 = names == NAMES_PHI3, bert = names == NAMES_BERT, mpt = names == NAMES_MPT;
    vp_module out_module = bloom || names == NAMES_PHI || bert ? VP_MODULE_DENSE
                           : phi3 || mpt ? VP_MODULE_O_PROJ
                           : fused ? VP_MODULE_C_PROJ
                           : t5    ? VP_MODULE_O
                                   : VP_MODULE_O_PROJ;
    for (unsigned i = 0; i < ATT_SLOTS; i++) out[i] = vp_param(0, "attention", VP_MODULE_NONE, 0);
    if (fused) {
        vp_module m = bloom ? VP_MODULE_QUERY_KEY_VALUE : phi3 ? VP_MODULE_QKV_PROJ : mpt ? VP_MODULE_WQKV : VP_MODULE_C_ATTN;
        const char *w = bloom ? "query_key_value.weight" : phi3 ? "qkv_proj.weight" : mpt ? "Wqkv.weight" : "c_attn.weight";
        const char *b = bloom ? "query_key_value.bias" : phi3 ? "qkv_proj.bias" : mpt ? "Wqkv.bias" : "c_attn.bias";
        out[Q_W] = vp_param(s.hidden * (q + 2 * kv), w, m, q + 2 * kv);
        out[Q_B] = vp_param(qkv_bias ? q + 2 * kv : 0, b, m, 0);
    } else {
        vp_module qm = t5 ? VP_MODULE_Q : bert ? VP_MODULE_QUERY : VP_MODULE_Q_PROJ,
                  km = t5 ? VP_MODULE_K : bert ? VP_MODULE_KEY : VP_MODULE_K_PROJ,
                  vm = t5 ? VP_MODULE_V : bert ? VP_MODULE_VALUE : VP_MODULE_V_PROJ;
        out[Q_W] = vp_param(s.hidden * q, "q_proj.weight", qm, q);
        out[Q_B] = vp_param(qkv_bias ? q : 0, "q_proj.bias", qm, 0);
        out[K_W] = vp_param(s.hidden * kv, "k_proj.weight", km, kv);
        out[K_B] = vp_param(qkv_bias ? kv : 0, "k_proj.bias", km, 0);
        out[V_W] = vp_param(s.hidden * kv, "v_proj.weight", vm, kv);
        out[V_B] = vp_param(qkv_bias ? kv : 0, "v_proj.bias", vm, 0);
    }
    out[O_W] = vp_param(q * s.hidden, "o_proj.weight", out_module, s.hidden); /* row-parallel */
    out[O_B] = vp_param(vp_op_flag(op, ATT_OUT_BIAS) ? s.hidden : 0, "o_proj.bias", out_module, 0);
    for (unsigned i = 0; i < MASK_BUFFER; i++) out[i].conv1d = vp_op_flag(op, ATT_CONV1D);
    if (vp_op_flag(op, ATT_QK_NORM)) { /* Qwen3Attention's q_norm and k_norm, one head wide, or OLMo-2's, whole */
        bool whole = vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_OLMO2 || vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_COHERE;
        out[Q_NORM] = vp_param(whole ? q : s.head_dim, "q_norm.weight", VP_MODULE_NORM, 0);
        out[K_NORM] = vp_param(whole ? kv : s.head_dim, "k_norm.weight", VP_MODULE_NORM, 0);
    }
    /* GptOssAttention.sinks: nn.Parameter(torch.empty(num_attention_heads)) */
    if (vp_op_flag(op, ATT_SINKS)) out[SINKS] = vp_param(s.heads, "sinks", VP_MODULE_NONE, 0);
    if (vp_op_u64(op, ATT_MASK) == MASK_BOOL_BUFFER) {
        /* GPT2Attention registers torch.tril(ones(n, n, dtype=bool)) per layer */
        uint64_t n = vp_op_u64(op, ATT_POSITIONS);
        out[MASK_BUFFER] = (vp_leaf_spec){.numel = n * n, .dtype = VP_BOOL, .buffer = true,
                                          .label = "attn.bias (causal mask)", .count = 1};
    }
    return ATT_SLOTS;
}

/* The kernel a recipe asks for, resolved for this dtype: SDPA on CUDA picks
 * the flash backend for 16-bit inputs (cuDNN's attention where the stage
 * says PyTorch prefers it: compute capability 9.x and 10.x) and the
 * memory-efficient one for fp32 (torch/csrc/.../sdp_utils.cpp: flash and
 * cuDNN need fp16/bf16). */
typedef enum { KERNEL_EAGER, KERNEL_FLASH, KERNEL_SDPA_FLASH, KERNEL_MEM_EFFICIENT, KERNEL_SDPA_CUDNN } kernel;

/* SDPA's fused kernels for 16-bit inputs (flash or cuDNN's) */
static bool sdpa_16bit(kernel which) { return which == KERNEL_SDPA_FLASH || which == KERNEL_SDPA_CUDNN; }

static kernel kernel_for(const vp_step *step, const vp_op *op) {
    if (vp_op_flag(op, ATT_ALIBI) || vp_op_flag(op, ATT_POSITION_BIAS) || (is_mla(op) && deepseek_rotary(op)))
        return KERNEL_EAGER; /* see attention_recipe_problem */
    if (vp_op_flag(op, ATT_SINKS) && step->recipe->attention == VP_ATTN_SDPA) return KERNEL_EAGER;
    switch (step->recipe->attention) {
    case VP_ATTN_FLASH: return KERNEL_FLASH;
    case VP_ATTN_MEM_EFFICIENT: return KERNEL_MEM_EFFICIENT;
    case VP_ATTN_SDPA:
        switch (vp_sdpa_kernel_of(step->low, step->stage.sdpa_cudnn, step->stage.sdpa_no_flash)) {
        case VP_SDPA_KERNEL_EFFICIENT: return KERNEL_MEM_EFFICIENT;
        case VP_SDPA_KERNEL_CUDNN: return KERNEL_SDPA_CUDNN;
        default: return KERNEL_SDPA_FLASH;
        }
    default: return KERNEL_EAGER;
    }
}

/* SDPA behind a cached prefix (PEFT's prefix tuning), where keys outnumber
 * the queries, or with a sliding window no longer than the keys:
 * transformers' _ignore_causal_mask_sdpa keeps the 4-D mask and SDPA gets
 * it with is_causal=False: the flash backend takes no mask, the
 * memory-efficient one runs. */
static bool sdpa_masked(const vp_step *step, const vp_op *op) {
    kernel which = kernel_for(step, op);
    uint64_t window = vp_op_u64(op, ATT_SLIDING_WINDOW);
    bool windowed = window && step->seq + step->past_tokens >= window;
    /* Gemma 2's model hands SDPA its 4-D mask always */
    bool always = vp_op_u64(op, ATT_MASK) == MASK_ADDITIVE_HYBRID;
    return (step->past_tokens || windowed || always) && (sdpa_16bit(which) || which == KERNEL_MEM_EFFICIENT);
}

/* BloomModel.forward (transformers 4.26-4.27) without an attention mask:
 * attention_mask = torch.ones((b, s)) in fp32, a local of the forward; then
 * build_alibi_tensor: ((mask.cumsum(-1) - 1) * mask) and its product with
 * the per-head slopes, [b, heads, s] in fp32, reshaped to [b x heads, 1, s]
 * and cast to the hidden states' dtype (a copy unless fp32). The slopes
 * (one float per head) and two scalars are left out. */
static void prepare_alibi(vp_step *step, const vp_op *op) {
    vp_sim *sim = &step->sim;
    uint64_t bn = vp_numel(sim, step->batch, step->seq + step->past_tokens);
    vp_t ones = vp_new(sim, bn, VP_FP32, "attention_mask.ones");
    vp_step_keep_local(step, ones, VP_LOCAL_OF_BODY);
    vp_t cumsum = vp_new(sim, bn, VP_FP32, "alibi.cumsum");
    vp_t shifted = vp_new(sim, bn, VP_FP32, "alibi.cumsum_minus_one");
    vp_drop(sim, cumsum);
    vp_t positions = vp_new(sim, bn, VP_FP32, "alibi.positions");
    vp_drop(sim, shifted);
    vp_t alibi32 = vp_new(sim, vp_numel(sim, bn, shape_of(op).heads), VP_FP32, "alibi");
    vp_drop(sim, positions);
    vp_step_put_tensor(step, VP_TENSOR_ALIBI, vp_to(sim, alibi32, step->activation, "alibi.to"));
    vp_drop(sim, alibi32);
    vp_drop(sim, ones);
}

/* BloomModel._prepare_attn_mask: a [s, s] bool causal mask (torch.empty,
 * filled from an arange comparison), the padding mask inverted as bool
 * ([b, s], twice: .to(torch.bool) then ~), both expanded and or-ed into
 * one [b, 1, s, s] bool tensor, which every layer's masked_fill keeps. */
static void prepare_bool_mask(vp_step *step) {
    vp_sim *sim = &step->sim;
    uint64_t n = step->seq + step->past_tokens, bn = vp_numel(sim, step->batch, n);
    vp_t causal = vp_new(sim, vp_numel(sim, step->seq, n), VP_BOOL, "causal_mask.empty");
    vp_t seq_ids = vp_new(sim, step->seq, VP_INT64, "causal_mask.seq_ids");
    vp_t compare = vp_new(sim, vp_numel(sim, step->seq, step->seq), VP_BOOL, "causal_mask.compare");
    vp_drop(sim, compare);
    vp_t as_bool = vp_new(sim, bn, VP_BOOL, "attention_mask.to_bool");
    vp_t inverted = vp_new(sim, bn, VP_BOOL, "attention_mask.invert");
    vp_drop(sim, as_bool);
    vp_step_put_tensor(step, VP_TENSOR_CAUSAL_MASK,
                       vp_new(sim, vp_numel(sim, bn, step->seq), VP_BOOL, "causal_mask.combined"));
    vp_drop(sim, inverted);
    vp_drop(sim, seq_ids);
    vp_drop(sim, causal);
}

/* GPT-J's _prepare_4d_causal_attention_mask_with_cache_position (OPT's
 * copy, transformers 4.50-4.52) given the model's all-ones 2-D mask:
 * target_length is the keys; full() and triu() of s x keys in the
 * activations' dtype, the in-place multiply by a bool comparison, the
 * expanded mask cloned to the batch, the 2-D mask (fp32) added to it, the
 * sum compared with 0, masked_fill's result copied back in place.
 * `prefix`: PaliGemmaModel._update_causal_mask in training (is_training:
 * the batch has token_type_ids and labels; transformers 4.50-4.52
 * src/transformers/models/paligemma/modeling_paligemma.py), the same with
 * "First unmask prefix tokens" between the clone and the padding:
 * token_type_ids[:, None, None, :] == 0 (bool, b x keys) and masked_fill's
 * new mask, copied back in place; its padding mask is the batch's int64
 * attention_mask, so the sum is in the mask's dtype. */
static void prepare_padded_mask(vp_step *step, uint64_t keys, bool prefix) {
    vp_sim *sim = &step->sim;
    vp_step_set_tensor_columns(step, VP_TENSOR_CAUSAL_MASK, keys);
    uint64_t n = vp_numel(sim, step->seq, keys), bn = vp_numel(sim, step->batch, n);
    vp_t full = vp_new(sim, n, step->activation, "causal_mask.full");
    vp_t triu = vp_new(sim, n, step->activation, "causal_mask.triu");
    vp_drop(sim, full);
    vp_t keep = vp_new(sim, n, VP_BOOL, "causal_mask.compare");
    vp_drop(sim, keep);
    vp_t mask = vp_new(sim, bn, step->activation, "causal_mask.clone");
    vp_drop(sim, triu);
    if (prefix) {
        vp_t types = vp_new(sim, vp_numel(sim, step->batch, keys), VP_BOOL, "causal_mask.token_type_eq");
        vp_t unmasked = vp_new(sim, bn, step->activation, "causal_mask.prefix_fill");
        vp_drop(sim, types);
        vp_drop(sim, unmasked);
    }
    vp_t padding = vp_new(sim, bn, prefix ? step->activation : VP_FP32, "causal_mask.padding_add");
    vp_t zero = vp_new(sim, bn, VP_BOOL, "causal_mask.padding_eq");
    vp_drop(sim, padding);
    vp_t filled = vp_new(sim, bn, step->activation, "causal_mask.masked_fill");
    vp_drop(sim, zero);
    vp_drop(sim, filled);
    vp_step_put_tensor(step, VP_TENSOR_CAUSAL_MASK, mask);
}

/* create_causal_mask of transformers' masking_utils for eager attention
 * (4.53+; src/transformers/masking_utils.py at commit
 * 00c4411cbe15d4c56d54d3b56d4d171e9c289dac: sdpa_mask with
 * allow_is_causal_skip=False, then eager_mask): causal_mask_function
 * (kv_idx <= q_idx) broadcast over [1, 1, s, keys] bool and expanded to
 * the batch (a view), then torch.where(mask, 0, finfo.min), which
 * materializes [b, 1, s, keys] in the activations' dtype; the bool goes as
 * eager_mask rebinds the name. The aranges are a few int64 rows, left out. */
static void prepare_masking_utils_mask(vp_step *step, uint64_t keys, vp_tensor_slot slot) {
    vp_sim *sim = &step->sim;
    vp_step_set_tensor_columns(step, slot, keys);
    uint64_t rows = vp_numel(sim, step->seq, keys);
    vp_t allowed;
    if (slot == VP_TENSOR_SLIDING_MASK) {
        /* sliding_window_causal_mask_function: and_masks(sliding_window_overlay,
         * causal_mask_function), `result = result & mask(...)` for each from a
         * 0-dim True: the overlay's bool and the first conjunction, then the
         * causal bool and the second, the first going as the name is rebound */
        vp_t overlay = vp_new(sim, rows, VP_BOOL, "sliding_mask.overlay");
        vp_t first = vp_new(sim, rows, VP_BOOL, "sliding_mask.and");
        vp_drop(sim, overlay);
        vp_t causal = vp_new(sim, rows, VP_BOOL, "sliding_mask.causal");
        allowed = vp_new(sim, rows, VP_BOOL, "sliding_mask.and");
        vp_drop(sim, first);
        vp_drop(sim, causal);
    } else {
        allowed = vp_new(sim, rows, VP_BOOL, "causal_mask.sdpa_mask");
    }
    vp_step_put_tensor(step, slot, vp_new(sim, vp_numel(sim, step->batch, rows), step->activation, "causal_mask.where"));
    vp_drop(sim, allowed);
}

/* The additive causal mask LlamaModel builds once per forward for eager
 * attention (_prepare_4d_causal_attention_mask_with_cache_position): full()
 * then triu() of s x s in the activations' dtype, then an in-place multiply
 * by a bool comparison; expanded, not copied, to the batch. MistralModel's
 * (Mistral, Phi-3; transformers 4.49-4.52) has no triu and, with a sliding
 * window, ors a second comparison into the first in place. */
static void prepare_masks(vp_step *step, const vp_op *op, bool eager);

static void attention_prepare(vp_step *step, const vp_op *op) {
    prepare_masks(step, op, kernel_for(step, op) == KERNEL_EAGER);
}

/* The tensors the op's attention needs per step, `eager`: computed by
 * eager attention (a mask whatever the kernel's needs). */
static void prepare_masks(vp_step *step, const vp_op *op, bool eager) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    if (vp_op_flag(op, ATT_ALIBI) && !vp_step_tensor(step, VP_TENSOR_ALIBI)) {
        sim->grad_mode = false;
        if (mpt_alibi(op))
            vp_mpt_prepare_alibi(step, shape_of(op).heads, vp_op_u64(op, ATT_POSITIONS));
        else
            prepare_alibi(step, op);
        sim->grad_mode = grad_mode;
    }
    unsigned mask_kind = (unsigned)vp_op_u64(op, ATT_MASK);
    bool masked_sdpa = sdpa_masked(step, op);
    if (mask_kind == MASK_NONE || vp_step_tensor(step, VP_TENSOR_CAUSAL_MASK)) return;
    if (!eager && !masked_sdpa) return;
    /* GPT-2's eager path masks with its buffer; its SDPA path with a
     * prefix gets a 4-D additive mask like LLaMA's (to_causal_4d) */
    if (mask_kind == MASK_BOOL_BUFFER && !masked_sdpa) return;
    if (vp_op_u64(op, ATT_MASK) == MASK_BOOL || vp_op_u64(op, ATT_MASK) == MASK_BOOL_4D) {
        sim->grad_mode = false;
        if (vp_op_u64(op, ATT_MASK) == MASK_BOOL_4D)
            vp_mpt_prepare_mask(step);
        else
            prepare_bool_mask(step);
        sim->grad_mode = grad_mode;
        return;
    }
    if (vp_op_u64(op, ATT_MASK) == MASK_PADDING) {
        /* BertModel.forward without an attention mask: torch.ones((b, s)) in
         * fp32, a local until it returns; get_extended_attention_mask:
         * mask[:, None, None, :].to(dtype) (a copy unless fp32), 1.0 - it,
         * times finfo.min: [b, 1, 1, s] in the model's dtype */
        vp_t ones = vp_new(sim, step->tokens, VP_FP32, "attention_mask.ones");
        vp_step_keep_local(step, ones, VP_LOCAL_OF_BODY);
        vp_t cast = step->activation == VP_FP32 ? (vp_hold(sim, ones), ones)
                                                : vp_to(sim, ones, step->activation, "attention_mask.to");
        vp_t inverted = vp_new(sim, step->tokens, step->activation, "attention_mask.invert");
        vp_drop(sim, cast);
        vp_step_put_tensor(step, VP_TENSOR_CAUSAL_MASK,
                           vp_new(sim, step->tokens, step->activation, "attention_mask.extended"));
        vp_drop(sim, inverted);
        vp_drop(sim, ones);
        return;
    }
    /* target_length: the cached prefix's keys and the sequence's, and for
     * LLaMA's and Mistral's _update_causal_mask, called without an
     * attention mask, one more (past_seen_tokens + sequence_length + 1); the
     * attention slices the keys' columns off each row (a view). GPT-2's
     * SDPA path (to_causal_4d) builds exactly the keys' columns. */
    uint64_t keys = step->seq + step->past_tokens;
    if (mask_kind == MASK_ADDITIVE_PADDED) {
        sim->grad_mode = false;
        prepare_padded_mask(step, keys, false);
        sim->grad_mode = grad_mode;
        return;
    }
    if (mask_kind == MASK_ADDITIVE_4D || mask_kind == MASK_ADDITIVE_4D_PAIR) {
        sim->grad_mode = false;
        prepare_masking_utils_mask(step, keys, VP_TENSOR_CAUSAL_MASK);
        /* create_sliding_window_causal_mask: the same calls with the window
         * and-ed into the mask function */
        if (mask_kind == MASK_ADDITIVE_4D_PAIR) prepare_masking_utils_mask(step, keys, VP_TENSOR_SLIDING_MASK);
        sim->grad_mode = grad_mode;
        return;
    }
    /* Gemma2Model's target_length without an attention mask or a
     * HybridCache: the sequence's length */
    uint64_t columns =
        keys + (mask_kind == MASK_BOOL_BUFFER || mask_kind == MASK_ADDITIVE_HYBRID || mask_kind == MASK_ADDITIVE_KEYS ? 0 : 1);
    vp_step_set_tensor_columns(step, VP_TENSOR_CAUSAL_MASK, columns);
    uint64_t n = vp_numel(sim, step->seq, columns);
    sim->grad_mode = false;
    vp_t mask = vp_new(sim, n, step->activation, "causal_mask.full");
    if (mask_kind == MASK_ADDITIVE || mask_kind == MASK_ADDITIVE_HYBRID || mask_kind == MASK_ADDITIVE_KEYS) {
        vp_t triu = vp_new(sim, n, step->activation, "causal_mask.triu");
        vp_drop(sim, mask);
        mask = triu;
    }
    vp_t keep = vp_new(sim, n, VP_BOOL, "causal_mask.compare");
    if (mask_kind == MASK_ADDITIVE_MISTRAL && vp_op_u64(op, ATT_SLIDING_WINDOW)) {
        /* diagonal_attend_mask.bitwise_or_(arange <= cache_position - sliding_window) */
        vp_t outside = vp_new(sim, n, VP_BOOL, "causal_mask.sliding_window");
        vp_drop(sim, outside);
    }
    vp_drop(sim, keep);
    /* causal_mask[None, None, :, :].expand(batch, 1, -1, -1): a view, whole
     * batch-sized where something copies it (save_on_cpu's pack) */
    vp_step_put_tensor(step, VP_TENSOR_CAUSAL_MASK,
                       vp_view(sim, mask, vp_numel(sim, step->batch, n), "causal_mask.expand"));
    vp_drop(sim, mask);
    sim->grad_mode = grad_mode;
}

/* The mask the running layer's attention applies: its own (Gemma 2's
 * sliding layers) or the model's one for this layer (GPT-OSS's even
 * layers: the sliding-window one, where a checkpointed layer's rerun finds
 * it too). */
static vp_tensor_slot current_mask_slot(const vp_step *step) {
    if (vp_step_tensor(step, VP_TENSOR_LAYER_MASK)) return VP_TENSOR_LAYER_MASK;
    return vp_step_model_mask_slot(step, step->layer_index);
}

static vp_t current_mask(const vp_step *step) { return vp_step_tensor(step, current_mask_slot(step)); }

/* matmul's batched path reshapes each operand to 3-d; an operand whose heads
 * are a transposed view (strides of a [b, s, heads, d] tensor) cannot be
 * viewed that way and is copied, and the copy is what bmm saves. With one
 * sequence the batch dimension has size 1 and folds into the heads as a
 * view (each head's rows keep their stride, which bmm and cuBLAS take):
 * nothing is copied, and bmm saves the view, which keeps its base. */
static vp_t batched_operand(vp_step *step, vp_t x, bool contiguous, const char *label) {
    return vp_contiguous(&step->sim, x, contiguous || step->batch == 1, label);
}

/* q, k, v as [b, heads, s, d]: views of [b, s, heads, d] projections
 * (after rotary: results that keep that layout), not contiguous, unless
 * said (multi-head latent attention's cat results). */
typedef struct {
    vp_t q, k, v;
    bool q_contiguous, k_contiguous, v_contiguous;
    /* views with gaps (a Lua block's F.select of every other head): an
     * autocast cast of one is contiguous (Tensor.to keeps the strides of
     * dense tensors only) */
    bool q_gaps, k_gaps, v_gaps;
    uint64_t kv_len;  /* keys per query row: the encoder's length for cross-attention; 0: seq + past */
    bool cross;       /* T5: cross-attention (its bias is the stack's cross bias) */
    vp_dtype input_dtype; /* the module's input's (Falcon's softmax takes it) */
    vp_t locals[8]; /* other tensors the module's Python locals keep until it returns */
    unsigned n_locals;
    /* GPT-OSS's eager_attention_forward: attn_weights' masked scores, until
     * the name is rebound to the probabilities; combined_logits and probs,
     * until the function returns */
    vp_t masked_scores, combined, probs;
} qkv;

/* The module returns: its projections and other locals go. */
static void release_locals(vp_sim *sim, qkv *in) {
    vp_drop(sim, in->q);
    vp_drop(sim, in->k);
    vp_drop(sim, in->v);
    for (unsigned i = 0; i < in->n_locals; i++) vp_drop(sim, in->locals[i]);
    in->q = in->k = in->v = 0;
    in->n_locals = 0;
}

static void keep_local(vp_sim *sim, qkv *in, vp_t t) {
    if (in->n_locals == sizeof in->locals / sizeof *in->locals) {
        sim->status = VP_SIM_LIMIT; /* more locals than room: an op bug */
        return;
    }
    vp_hold(sim, t);
    in->locals[in->n_locals++] = t;
}

/* keep_local as vp_gptj_rotary calls it back */
typedef struct {
    vp_sim *sim;
    qkv *in;
} local_keeper;

static void keep_local_of(void *ctx, vp_t t) {
    local_keeper *k = ctx;
    keep_local(k->sim, k->in, t);
}

/* T5Attention (transformers 4.46-4.52): the stack's first layer makes the
 * position bias; `scores += position_bias_masked` in place, unscaled; the
 * local `scores` keeps them until the module returns;
 * softmax(scores.float(), dim=-1).type_as(scores), the fp32 copy made even
 * for 16-bit scores. Takes over the reference to scores. */
static vp_t t5_normalize(vp_step *step, vp_t scores, qkv *in, uint64_t heads) {
    vp_sim *sim = &step->sim;
    vp_tensor_slot slot = in->cross ? VP_TENSOR_CROSS_BIAS : VP_TENSOR_POSITION_BIAS;
    vp_dtype dtype = (vp_dtype)vp_at(sim, scores)->dtype;
    if (!vp_step_tensor(step, slot))
        vp_step_put_tensor(step, slot, vp_t5_position_bias(step, in->cross, heads, in->kv_len, dtype));
    vp_t biased = vp_add_(sim, scores, vp_step_tensor(step, slot), "attention.position_bias");
    vp_drop(sim, scores);
    keep_local(sim, in, biased);
    vp_t up = vp_to(sim, biased, VP_FP32, "attention.scores_float");
    vp_drop(sim, biased);
    vp_t p32 = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, "attention.softmax");
    vp_drop(sim, up);
    vp_t probs = vp_to(sim, p32, (vp_dtype)vp_at(sim, biased)->dtype, "attention.softmax_type_as");
    vp_drop(sim, p32);
    return probs;
}

/* FalconAttention's eager path (rotary): attention_scores /= sqrt(d) in
 * place; attention_scores = F.softmax(attention_scores + attention_mask,
 * dim=-1, dtype=hidden_states.dtype): the sum a temporary, the scores
 * bound to their name until the softmax's result takes it. With a dtype
 * argument autocast leaves softmax alone and ATen converts the input first
 * (a no-op in the input's dtype; SoftMax.cpp). Takes over the reference to
 * scores. */
static vp_t falcon_normalize(vp_step *step, vp_t scores, qkv *in) {
    vp_sim *sim = &step->sim;
    vp_t scaled = vp_scale_(sim, scores, "attention.scale_");
    vp_drop(sim, scores);
    vp_t mask = current_mask(step);
    vp_dtype sum_dtype = vp_dtype_promote((vp_dtype)vp_at(sim, scaled)->dtype, (vp_dtype)vp_at(sim, mask)->dtype);
    vp_t masked = vp_shift(sim, scaled, sum_dtype, vp_at(sim, scaled)->numel, "attention.mask");
    vp_t converted = vp_to(sim, masked, in->input_dtype, "attention.softmax_convert");
    vp_t probs = vp_unary(sim, converted, VP_SAVES_OUTPUT, 0, in->input_dtype, "attention.softmax");
    vp_drop(sim, converted);
    vp_drop(sim, masked);
    vp_drop(sim, scaled);
    return probs;
}

/* GPT-OSS's eager_attention_forward (transformers 5, models/gpt_oss) from
 * the masked scores on: each head's sink logit (module.sinks reshaped and
 * expanded over the rows: a view) joined to every row by torch.cat (the
 * promoted dtype), the row max (max(dim=-1, keepdim=True): values and the
 * int64 indices MaxBackward keeps) taken off, softmax with the logits' own
 * dtype (autocast leaves a softmax with a dtype alone), the sink column
 * sliced off, a view whose backward makes a zero-filled gradient of all of
 * probs. The masked scores stay bound to attn_weights until eager()
 * rebinds it, combined_logits and probs until the function returns.
 * Takes over the reference to masked; returns the scores' view. */
static vp_t sink_softmax(vp_step *step, const vp_t *leaves, vp_t masked, qkv *in) {
    vp_sim *sim = &step->sim;
    uint64_t numel = vp_at(sim, masked)->numel, keys = in->kv_len ? in->kv_len : step->seq + step->past_tokens;
    uint64_t rows = numel / keys;
    vp_t sinks = vp_expand(sim, leaves[SINKS], rows, "attention.sinks");
    vp_t combined = vp_cat(sim, masked, sinks, "attention.sinks_cat");
    vp_drop(sim, sinks);
    in->masked_scores = masked;
    vp_t max_indices;
    vp_t max = vp_topk(sim, combined, rows, &max_indices, "attention.row_max");
    vp_drop(sim, max_indices); /* `.values` of the returned pair: the indices live in MaxBackward */
    vp_t shifted = vp_sub(sim, combined, max, vp_at(sim, combined)->numel, "attention.minus_max");
    vp_drop(sim, max);
    vp_drop(sim, combined); /* the name rebound to the difference */
    in->combined = shifted;
    in->probs = vp_unary(sim, shifted, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, shifted)->dtype, "attention.softmax");
    return vp_slice(sim, in->probs, numel, "attention.drop_sink");
}

/* Scores to probabilities: scale, causal mask and softmax as the model's
 * code does them (HF: separate ops, LLaMA's softmax upcast to fp32 and cast
 * back; Megatron: FusedScaleMaskSoftmax, one kernel that keeps its 16-bit
 * output). Takes over the reference to scores; returns a new one. */
static vp_t normalize(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t scores, qkv *in) {
    vp_sim *sim = &step->sim;
    vp_t probs;
    if (vp_op_flag(op, ATT_POSITION_BIAS)) return t5_normalize(step, scores, in, shape_of(op).heads);
    if (vp_op_flag(op, ATT_SCALE_IN_PLACE)) return falcon_normalize(step, scores, in);
    if (vp_framework_of(step->recipe)->fused_softmax) {
        probs = vp_unary(sim, scores, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, scores)->dtype, "attention.softmax");
        vp_drop(sim, scores);
        return probs;
    }
    uint64_t scores_numel = vp_at(sim, scores)->numel;
    vp_t scaled;
    if (bloom_alibi(op)) {
        /* BLOOM: baddbmm scaled and biased the scores already; fp16 ones
         * are cast to fp32 first (attention_scores.to(torch.float)). The
         * scores, their fp32 copy and the masked scores stay bound to
         * locals (matmul_result, attention_scores, attn_weights) until
         * the module returns. */
        keep_local(sim, in, scores);
        scaled = vp_at(sim, scores)->dtype == VP_FP16 ? vp_to(sim, scores, VP_FP32, "attention.scores_float")
                                                      : (vp_hold(sim, scores), scores);
        if (scaled != scores) keep_local(sim, in, scaled);
    } else {
        /* * scaling (LLaMA) or / torch.full([], sqrt(d)) (GPT-2) */
        scaled = vp_scale(sim, scores, "attention.scale");
    }
    vp_drop(sim, scores);
    if (mpt_alibi(op)) {
        /* MptAttention: attention_scores + position_bias, the table's last
         * columns (a view) broadcast over the batch: the sum in fp32 */
        vp_t biased = vp_shift(sim, scaled, vp_dtype_promote((vp_dtype)vp_at(sim, scaled)->dtype, VP_FP32),
                               scores_numel, "attention.alibi");
        vp_drop(sim, scaled);
        scaled = biased;
    }
    /* attn_weights / softcap, torch.tanh, * softcap (Gemma 2) */
    if (op->value[ATT_SOFTCAP] > 0) scaled = vp_softcap(sim, scaled, "attention.softcap");
    vp_t mask = current_mask(step);

    vp_t masked;
    if (vp_op_u64(op, ATT_MASK) == MASK_BOOL || vp_op_u64(op, ATT_MASK) == MASK_BOOL_4D) {
        /* torch.masked_fill(attention_scores, attention_mask, finfo.min), or
         * MPT's attention_scores.masked_fill(...): a local until it returns */
        masked = vp_where(sim, scaled, mask, "attention.masked_fill");
        keep_local(sim, in, masked);
    } else if (vp_op_u64(op, ATT_MASK) == MASK_BOOL_BUFFER) {
        /* self.bias[:, :, key_length - query_length : key_length, :key_length] */
        vp_t window = vp_view(sim, leaves[MASK_BUFFER], vp_numel(sim, step->seq, step->seq + step->past_tokens),
                              "attn.bias[window]");
        masked = vp_where(sim, scaled, window, "attention.mask");
        vp_drop(sim, window);
    } else {
        vp_dtype dt = vp_dtype_promote((vp_dtype)vp_at(sim, scaled)->dtype, (vp_dtype)vp_at(sim, mask)->dtype);
        masked = vp_shift(sim, scaled, dt, scores_numel, "attention.mask");
        if (vp_op_flag(op, ATT_SCORES_LOCAL)) keep_local(sim, in, masked);
    }
    vp_drop(sim, scaled);
    if (vp_op_flag(op, ATT_SINKS)) return sink_softmax(step, leaves, masked, in);

    if (vp_op_flag(op, ATT_UPCAST_SOFTMAX)) {
        /* softmax(x, dim=-1, dtype=torch.float32).to(query.dtype): with a dtype
         * argument autocast leaves it alone; ATen converts the input first,
         * except for fp16 on CUDA, which has a half-to-float kernel
         * (aten/src/ATen/native/SoftMax.cpp). */
        vp_dtype in_dtype = (vp_dtype)vp_at(sim, masked)->dtype;
        vp_t p32;
        if (in_dtype == VP_FP32 || (in_dtype == VP_FP16 && step->recipe->device == VP_DEVICE_CUDA)) {
            p32 = vp_unary(sim, masked, VP_SAVES_OUTPUT, 0, VP_FP32, "attention.softmax");
        } else {
            vp_t up = vp_to(sim, masked, VP_FP32, "attention.softmax_upcast");
            p32 = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, "attention.softmax");
            vp_drop(sim, up);
        }
        probs = vp_to(sim, p32, (vp_dtype)vp_at(sim, in->q)->dtype, "attention.softmax_downcast");
        vp_drop(sim, p32);
    } else {
        /* softmax(x, dim=-1) is on autocast's fp32 list; then
         * .type(value.dtype) */
        vp_t up = vp_autocast_fp32(step, masked, "attention.softmax_upcast");
        vp_t p = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, up)->dtype, "attention.softmax");
        vp_drop(sim, up);
        if (vp_op_flag(op, ATT_CAST_PROBS)) {
            probs = vp_to(sim, p, (vp_dtype)vp_at(sim, in->v)->dtype, "attention.softmax_downcast");
            vp_drop(sim, p);
        } else {
            probs = p;
        }
    }
    vp_drop(sim, masked);

    return probs;
}

/* repeat_kv's result: the keys or values themselves (one head each), a
 * contiguous copy, or a view whose gradient is summed back to their size. */
static vp_t repeat_kv(vp_sim *sim, vp_t x, unsigned rep, bool copies) {
    if (copies) return vp_repeat(sim, x, rep, "attention.repeat_kv");
    if (rep > 1) return vp_expand(sim, x, vp_numel(sim, vp_at(sim, x)->numel, rep), "attention.repeat_kv");
    vp_hold(sim, x);
    return x;
}

/* matmul's broadcast of one key/value head over `rep` query heads: an
 * expanded view (summed back in backward). Takes over the reference. */
static vp_t broadcast_heads(vp_sim *sim, vp_t x, unsigned rep) {
    vp_t wide = vp_expand(sim, x, vp_numel(sim, vp_at(sim, x)->numel, rep), "attention.broadcast");
    vp_drop(sim, x);
    return wide;
}

/* HF's eager_attention_forward (LLaMA) and GPT-2's eager path. Returns the
 * [b*s, heads*d] input of the output projection. */
static vp_t eager(vp_step *step, const vp_op *op, const vp_t *leaves, qkv *in, shape s) {
    vp_sim *sim = &step->sim;
    uint64_t b = step->batch, n = step->seq;
    unsigned rep = (unsigned)(s.heads / s.kv_heads);
    uint64_t scores_numel = vp_numel4(sim, b, s.heads, n, in->kv_len ? in->kv_len : n + step->past_tokens);

    /* key_states = repeat_kv(key, n_rep): expand + reshape, a contiguous copy;
     * keys joined to a cached prefix are a cat's contiguous result already.
     * With one key/value head the reshape merges a size-1 dimension: a
     * zero-stride view of the (contiguous) keys, which matmul's batch fold
     * copies (when b > 1) inside the call, and an autocast cast writes out
     * whole (a dense copy of every repeated element) */
    bool expanded = rep > 1 && s.kv_heads == 1;
    bool copies = rep > 1 && !expanded;
    /* Falcon's multi-query keys and values go to matmul as they are, one
     * head, which its batch fold expands after autocast has cast them */
    bool late = expanded && falcon_split(op);
    vp_t k = late ? (vp_hold(sim, in->k), in->k) : repeat_kv(sim, in->k, rep, copies);
    vp_t v = late ? (vp_hold(sim, in->v), in->v) : repeat_kv(sim, in->v, rep, copies);
    /* (a decoder's cross-attention keys are the encoder's, no prefix joined) */
    bool joined = step->past_tokens && !in->cross;
    /* (contiguous keys repeated over one head are a zero-stride view all
     * the same: GPT-OSS's chunked rotary's cat results under MQA) */
    bool k_contiguous = copies || joined || (in->k_contiguous && !expanded);
    bool v_contiguous = copies || joined || (in->v_contiguous && !expanded);

    /* attn_weights = torch.matmul(query, key.transpose(2, 3)) */
    vp_t qa = vp_autocast_low(step, in->q, "attention.q_cast");
    vp_t ka = vp_autocast_low(step, k, "attention.k_cast");
    if (late) ka = broadcast_heads(sim, ka, rep);
    else if ((expanded || in->k_gaps) && ka != k) k_contiguous = true;
    bool q_contiguous = in->q_contiguous || (in->q_gaps && qa != in->q);
    vp_t qm = batched_operand(step, qa, q_contiguous, "attention.q_reshape");
    vp_t km = batched_operand(step, ka, k_contiguous, "attention.k_reshape");
    /* BLOOM: alibi.baddbmm(q, k): on autocast's lower-precision list, the
     * bias is cast with the operands (a copy per layer) */
    vp_t alibi = vp_step_tensor(step, VP_TENSOR_ALIBI);
    vp_t bias = bloom_alibi(op) ? vp_autocast_low(step, alibi, "attention.alibi_cast") : 0;
    /* the keys' batched view is key.transpose(2, 3), of contiguous keys or
     * (one sequence) of heads in the projection's layout; their copy, if
     * batched_operand made one, is contiguous as it lies; so are the
     * queries' */
    vp_t scores = vp_matmul_views(sim, qm, km, scores_numel, qm == qa && !q_contiguous, km == ka,
                                  "attention.scores");
    /* autocast's casts are the op's arguments until it returns, beside the
     * copies its batch fold made of them */
    vp_drop(sim, qa);
    vp_drop(sim, ka);
    vp_drop(sim, bias);
    vp_drop(sim, qm);
    vp_drop(sim, km);
    vp_t probs = normalize(step, op, leaves, scores, in);

    vp_t dropped = vp_train_dropout(step, probs, op->value[ATT_DROPOUT], "attention.dropout");
    vp_drop(sim, probs);
    if (in->masked_scores) { /* GPT-OSS: attn_weights = dropout(scores).to(value_states.dtype) */
        vp_t cast = vp_to(sim, dropped, (vp_dtype)vp_at(sim, v)->dtype, "attention.probs_to");
        vp_drop(sim, dropped);
        dropped = cast;
        vp_drop(sim, in->masked_scores);
        in->masked_scores = 0;
    }
    if (vp_op_flag(op, ATT_KEEPS_WEIGHTS)) vp_step_keep_local(step, dropped, VP_LOCAL_OF_LAYER);
    if (vp_op_flag(op, ATT_PROBS_LOCAL)) keep_local(sim, in, dropped);

    /* attn_output = torch.matmul(attn_weights, value_states) */
    vp_t pa = vp_autocast_low(step, dropped, "attention.probs_cast");
    vp_t va = vp_autocast_low(step, v, "attention.v_cast");
    if (late) va = broadcast_heads(sim, va, rep);
    else if ((expanded || in->v_gaps) && va != v) v_contiguous = true;
    vp_t vm = batched_operand(step, va, v_contiguous, "attention.v_reshape");
    vp_t context = vp_matmul_views(sim, pa, vm, vp_numel4(sim, b, s.heads, n, s.v_dim), false,
                                   vm == va && !v_contiguous, "attention.context");
    vp_drop(sim, va);
    vp_drop(sim, pa);
    vp_drop(sim, vm);
    vp_drop(sim, dropped);
    /* attn_output.transpose(1, 2).contiguous(): [b, s, heads, d], made
     * inside eager_attention_forward, whose repeated keys and values
     * (locals) go when it returns */
    vp_t merged = vp_copy(sim, context, "attention.merge_heads");
    vp_drop(sim, context);
    vp_drop(sim, k);
    vp_drop(sim, v);
    vp_drop(sim, in->combined);
    vp_drop(sim, in->probs);
    in->combined = in->probs = 0;
    return merged;
}

/* Flash-style kernels save q, k, v, the output and a per-row fp32
 * log-sum-exp, never the s x s scores; dropout regenerates its mask from
 * the saved RNG state. Backward allocates dq, dk, dv (empty_like) and
 * kernel workspaces:
 *  - FlashAttention-2 (csrc/flash_attn/flash_api.cpp, mha_bwd): softmax_d
 *    [b, heads, s rounded to 128] fp32 and dq_accum [b, s rounded to 128,
 *    heads, d rounded to 32 (64 above 128)] fp32; with GQA, dk and dv are
 *    first computed for every query head ([b, s, heads, d]) and summed.
 *  - PyTorch's memory-efficient kernel (aten/src/ATen/native/transformers/
 *    cuda/attention_backward.cu): delta [b, heads, s] fp32 and, for head
 *    widths it must accumulate, an fp32 grad_q workspace; its log-sum-exp
 *    is padded to a multiple of 32 rows. */
typedef struct {
    kernel which;
    uint64_t batch, seq, heads, kv_heads, head_dim;
    uint64_t seq_k; /* keys: seq, or more behind a cached prefix */
} flash_shape;

static uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

static void backward_flash(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    flash_shape shape_of_node = {(kernel)node->aux[0], node->aux[1], node->aux[2], node->aux[3], node->aux[4],
                                 node->aux[5], 0};
    /* the saved keys tell their length */
    shape_of_node.seq_k = vp_at(sim, node->saved[1])->numel / (node->aux[1] * node->aux[4] * node->aux[5]);
    const flash_shape *f = &shape_of_node;
    vp_t grads[3] = {0};
    for (unsigned i = 0; i < 3; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) grads[i] = vp_grad_like(sim, node->in[i], "attention.flash_backward");
    }
    uint64_t rows, d;
    switch (f->which) {
    case KERNEL_MEM_EFFICIENT: rows = round_up(f->seq, 32), d = f->head_dim; break;
    /* cuDNN's dQ accumulator and row sums have the shapes themselves (the
     * H200 check's probe, tests/reference/gpu_h200.json) */
    case KERNEL_SDPA_CUDNN: rows = f->seq, d = f->head_dim; break;
    default: rows = round_up(f->seq, 128), d = round_up(f->head_dim, f->head_dim <= 128 ? 32 : 64);
    }
    vp_t softmax_d = vp_grad_sized(sim, vp_numel3(sim, f->batch, f->heads, rows), VP_FP32, "attention.flash_backward");
    vp_t dq_accum = vp_grad_sized(sim, vp_numel4(sim, f->batch, rows, f->heads, d), VP_FP32, "attention.flash_backward");
    vp_t expanded[2] = {0};
    if (f->which != KERNEL_SDPA_CUDNN && f->kv_heads != f->heads) {
        node = vp_node_at(sim, index);
        for (unsigned i = 0; i < 2; i++)
            expanded[i] = vp_grad_sized(sim, vp_numel4(sim, f->batch, f->seq_k, f->heads, f->head_dim),
                                        (vp_dtype)vp_at(sim, node->in[1 + i] ? node->in[1 + i] : node->out[0])->dtype,
                                        "attention.flash_backward");
    }
    vp_drop(sim, expanded[0]);
    vp_drop(sim, expanded[1]);
    vp_drop(sim, dq_accum);
    vp_drop(sim, softmax_d);
    for (unsigned i = 0; i < 3; i++) vp_give_grad(sim, vp_node_at(sim, index), i, grads[i]);
}

/* The attention bias SDPA's memory-efficient kernel gets and saves:
 * autocast casts the mask (a materialized copy of the keys' columns), and
 * preprocess_mask (aten/.../transformers/attention.cpp) pads a mask whose
 * row stride is not a multiple of 8 elements (pad_bias: at::pad by 8 - keys
 * % 8, or a whole 8, a copy, then sliced and expanded over the heads:
 * views). Uncast, the rows keep the mask's own stride. Returns a new
 * reference. */
static vp_t attention_bias(vp_step *step, vp_t mask, uint64_t keys) {
    vp_sim *sim = &step->sim;
    uint64_t rows = vp_numel(sim, step->batch, step->seq);
    /* causal_mask[:, :, :, :key_states.shape[-2]] */
    vp_t sliced = vp_view(sim, mask, vp_numel(sim, rows, keys), "attention.mask_keys");
    vp_t cast = vp_autocast_low(step, sliced, "attention.mask_cast");
    uint64_t stride = cast != sliced ? keys : vp_step_tensor_columns(step, VP_TENSOR_CAUSAL_MASK);
    vp_drop(sim, sliced);
    if (stride % 8 == 0) return cast;
    vp_t padded = vp_new(sim, vp_numel(sim, rows, keys + 8 - keys % 8), (vp_dtype)vp_at(sim, cast)->dtype,
                         "attention.mask_pad");
    vp_drop(sim, cast);
    return padded;
}

/* SDPA under PyTorch's context parallelism: HF's sdpa path repeats K/V
 * first, as for fused_kernel; the ring copies them contiguous unless they
 * are (repeat_kv's are) */
static vp_t sdpa_ring(vp_step *step, const qkv *in, shape s) {
    vp_sim *sim = &step->sim;
    bool repeat = s.kv_heads != s.heads;
    unsigned rep = (unsigned)(s.heads / s.kv_heads);
    vp_t k = repeat ? vp_repeat(sim, in->k, rep, "attention.repeat_kv") : (vp_hold(sim, in->k), in->k);
    vp_t v = repeat ? vp_repeat(sim, in->v, rep, "attention.repeat_kv") : (vp_hold(sim, in->v), in->v);
    bool contiguous = repeat || (in->k_contiguous && in->v_contiguous);
    vp_t out = vp_sdpa_ring_attention(step, in->q, k, v, contiguous, s.heads, s.heads, s.head_dim);
    vp_drop(sim, k);
    vp_drop(sim, v);
    return out;
}

/* How SDPA gets a model's fewer key/value heads. transformers' sdpa path
 * with enable_gqa=True (use_gqa_in_sdpa: no mask, PyTorch 2.5+, 4.54+;
 * vp_recipe_sdpa_enable_gqa) hands them over as they are: the flash
 * backend takes them (can_use_flash_attention: check_batch_size_and_num_
 * heads_dense<true>; its backward expands their gradients,
 * backward_flash), and cuDNN's (from PyTorch 2.8, before which PyTorch did
 * not prefer it: sdpa_backend's doc). The memory-efficient backend (32-bit
 * inputs; 16-bit ones before Ampere) takes them only from pytorch#191085
 * (July 2026: torch_version 2.x, the newest), its backward reducing
 * expanded gradients as flash's does; before, SDPA falls back to its math
 * backend (huggingface/transformers#48633, PyTorch 2.10 on a T4). Heads
 * wider than 256 are repeated again (huggingface/transformers#46960). */
typedef enum { GQA_REPEAT, GQA_NATIVE, GQA_MATH } gqa_path;

static gqa_path gqa_path_of(const vp_step *step, shape s, kernel which, bool masked) {
    const vp_recipe *r = step->recipe;
    if (s.kv_heads == s.heads || masked || s.head_dim > 256) return GQA_REPEAT;
    if (!vp_recipe_sdpa_enable_gqa(r) || vp_recipe_model_code(r) != VP_CODE_TRANSFORMERS) return GQA_REPEAT;
    if (sdpa_16bit(which)) return GQA_NATIVE;
    if (which != KERNEL_MEM_EFFICIENT) return GQA_REPEAT;
    return r->torch_version == VP_TORCH_2 ? GQA_NATIVE : GQA_MATH;
}

/* `gqa`: the kernel takes the key/value heads as they are (gqa_path_of) */
static vp_t fused_kernel(vp_step *step, const qkv *in, shape s, kernel which, vp_t mask, bool gqa) {
    vp_sim *sim = &step->sim;
    uint64_t b = step->batch, n = step->seq;
    vp_t k, v;
    if (which == KERNEL_FLASH || s.kv_heads == s.heads || gqa) {
        vp_hold(sim, in->k);
        vp_hold(sim, in->v);
        k = in->k;
        v = in->v;
    } else { /* HF's sdpa path repeats K/V for SDPA (sdpa_attention.py) */
        unsigned rep = (unsigned)(s.heads / s.kv_heads);
        k = vp_repeat(sim, in->k, rep, "attention.repeat_kv");
        v = vp_repeat(sim, in->v, rep, "attention.repeat_kv");
    }
    /* SDPA is on autocast's lower-precision list; HF's flash path casts
     * fp32 inputs to the autocast dtype itself */
    vp_t qa = vp_autocast_low(step, in->q, "attention.q_cast");
    vp_t ka = vp_autocast_low(step, k, "attention.k_cast");
    vp_t va = vp_autocast_low(step, v, "attention.v_cast");
    vp_drop(sim, k);
    vp_drop(sim, v);
    /* FlashAttention-2 wants one head width: HF pads narrower values with
     * F.pad (multi-head latent attention); SDPA's memory-efficient kernel
     * takes them as they are */
    uint64_t out_dim = s.v_dim;
    if (which == KERNEL_FLASH && s.v_dim != s.head_dim) {
        vp_t padded = vp_pad(sim, va, vp_numel4(sim, b, s.heads, n, s.head_dim), "attention.v_pad");
        vp_drop(sim, va);
        va = padded;
        out_dim = s.head_dim;
    }
    vp_t bias = mask ? attention_bias(step, mask, n + step->past_tokens) : 0;
    /* the ATen op a selective checkpoint's policy sees: SDPA's kernels (the
     * flash_attn library's FlashAttention-2 is none of them) */
    vp_aten_op aten = which == KERNEL_SDPA_FLASH     ? VP_ATEN_SDPA_FLASH
                      : which == KERNEL_SDPA_CUDNN    ? VP_ATEN_SDPA_CUDNN
                      : which == KERNEL_MEM_EFFICIENT ? VP_ATEN_SDPA_EFFICIENT
                                                      : VP_ATEN_OTHER;
    vp_t out = vp_sac_new(sim, aten, vp_numel4(sim, b, n, s.heads, out_dim), (vp_dtype)vp_at(sim, qa)->dtype,
                          "attention.flash");
    uint64_t lse_rows = which == KERNEL_MEM_EFFICIENT ? round_up(n, 32) : n;
    vp_t lse = vp_sac_new(sim, aten, vp_numel3(sim, b, s.heads, lse_rows), VP_FP32, "attention.flash_lse");
    /* cuDNN's philox seed and offset: two one-element tensors, kept for
     * backward (the H200 check's trace: two 8-byte blocks a layer) */
    bool cudnn = which == KERNEL_SDPA_CUDNN;
    vp_t rng = vp_sac_new(sim, aten, cudnn ? 1 : 2, VP_INT64, "attention.flash_rng");
    vp_t rng_offset = cudnn ? vp_sac_new(sim, aten, 1, VP_INT64, "attention.flash_rng") : 0;
    bool transformers = vp_recipe_model_code(step->recipe) == VP_CODE_TRANSFORMERS;
    bool contiguous_inputs =
        which == KERNEL_FLASH || (transformers && !vp_recipe_transformers_since(step->recipe, 4, 56));
    /* SDPA saves its output as it returns it: [b, s, heads, d] seen as [b,
     * heads, s, d] (flash, memory-efficient) or laid out like the query
     * (cuDNN); FlashAttention-2's is [b, s, heads, d]. The tensor stands
     * for the merged heads after it too (attn_output.transpose(1, 2):
     * contiguous, the view o_proj saves), so the save says it. */
    bool like_query = which == KERNEL_SDPA_CUDNN && !contiguous_inputs && vp_at(sim, qa)->permuted;
    bool out_permuted = which != KERNEL_FLASH && (which != KERNEL_SDPA_CUDNN || like_query) && n > 1 && s.heads > 1;
    vp_t inputs[3] = {qa, ka, va};
    vp_node *node = vp_record(sim, backward_flash, "attention.flash", inputs, 3, &out, 1);
    if (node) {
        /* flash_attn's FlashAttnFunc packs after computing; SDPA's kernels
         * save their outputs last */
        node->late_saves = true;
        /* the rule's shape: kernel, batch, seq, heads, kv heads as the kernel sees them, head width */
        node->aux[0] = which;
        node->aux[1] = b;
        node->aux[2] = n;
        node->aux[3] = s.heads;
        node->aux[4] = which == KERNEL_FLASH || gqa ? s.kv_heads : s.heads;
        node->aux[5] = s.head_dim;
        /* q, k and v as SDPA gets them: transformers' sdpa path before
         * 4.56 made them contiguous (copies the sim leaves out), and
         * FlashAttention-2 gets q.transpose(1, 2), the projections' rows */
        if (contiguous_inputs) {
            vp_save_contiguous(sim, node, qa);
            vp_save_contiguous(sim, node, ka);
            vp_save_contiguous(sim, node, va);
        } else {
            vp_save(sim, node, qa);
            vp_save(sim, node, ka);
            vp_save(sim, node, va);
        }
        vp_save_view(sim, node, out, out_permuted);
        vp_save(sim, node, lse);
        if (bias) vp_save(sim, node, bias);
        if (cudnn) {
            vp_save(sim, node, rng);
            vp_save(sim, node, rng_offset);
        }
    }
    vp_drop(sim, bias);
    vp_drop(sim, lse);
    vp_drop(sim, rng);
    vp_drop(sim, rng_offset);
    vp_drop(sim, qa);
    vp_drop(sim, ka);
    vp_drop(sim, va);
    /* cuDNN lays its output out like the query; transformers before 4.56
     * made that contiguous ([b, heads, s, d]), so its attn_output
     * .transpose(1, 2).contiguous() is a copy, kept for o_proj (the H200
     * check: one per layer). From 4.56 (huggingface/transformers#40315) its
     * query is the transposed view the rotary embedding keeps, as
     * torchtune's and torchtitan's is: the output is [b, s, heads, d]
     * already, as the flash kernel's always is. */
    if (cudnn && vp_recipe_model_code(step->recipe) == VP_CODE_TRANSFORMERS &&
        !vp_recipe_transformers_since(step->recipe, 4, 56)) {
        vp_t merged = vp_copy(sim, out, "attention.merge_heads");
        vp_drop(sim, out);
        return merged;
    }
    if (out_dim == s.v_dim) return out;
    /* attn_output[:, :, :, :v_head_dim].reshape(b, s, -1).contiguous() */
    vp_t sliced = vp_slice(sim, out, vp_numel4(sim, b, n, s.heads, s.v_dim), "attention.v_unpad");
    vp_drop(sim, out);
    vp_t merged = vp_copy(sim, sliced, "attention.merge_heads");
    vp_drop(sim, sliced);
    return merged;
}

/* The attention core as a checkpointed function (Megatron's selective
 * recompute, Korthikanti et al. 2022, section 4.1): q, k, v in, the merged
 * heads out. */
typedef struct {
    const vp_op *op;
    const vp_t *leaves;
    shape s;
    bool q_contiguous, k_contiguous, v_contiguous, q_gaps, k_gaps, v_gaps;
} core_call;

static vp_t recompute_core(vp_step *step, void *ctx, const vp_t *inputs) {
    const core_call *c = ctx;
    qkv in = {.q = inputs[0], .k = inputs[1], .v = inputs[2],
              .q_contiguous = c->q_contiguous, .k_contiguous = c->k_contiguous, .v_contiguous = c->v_contiguous,
              .q_gaps = c->q_gaps, .k_gaps = c->k_gaps, .v_gaps = c->v_gaps};
    vp_t context = eager(step, c->op, c->leaves, &in, c->s);
    for (unsigned i = 0; i < in.n_locals; i++) vp_drop(&step->sim, in.locals[i]);
    return context;
}

/* Whether Liger-Kernel's RMSNorm is the q and k norms: its class swap
 * reaches every norm of the class, its patch of a built model only those
 * it names (monkey_patch.py: Gemma 3's q_norm and k_norm, not Qwen3's or
 * OLMo-2's). */
static bool liger_qk_norm(const vp_step *step, const vp_op *op) {
    if (!step->recipe->liger_rms_norm || vp_op_u64(op, ATT_LIGER_QK) == VP_LIGER_NORM_NONE) return false;
    return step->recipe->liger_before_load || vp_op_flag(op, ATT_LIGER_QK_INSTANCE);
}

/* LigerRMSNormFunction over the heads' rows: its forward takes its input
 * made contiguous (ensure_contiguous: a transposed view, Gemma 3's, copied
 * unless it has one head; the copy is what it saves), and its output is
 * contiguous in the shape it was given. */
static vp_t liger_head_norm(vp_step *step, const vp_op *op, vp_t x, vp_t weight, uint64_t rows, bool transposed,
                            uint64_t heads) {
    vp_sim *sim = &step->sim;
    vp_t input = vp_contiguous(sim, x, !transposed || heads == 1, "attention.qk_norm.liger_contiguous");
    bool in_place = vp_op_u64(op, ATT_LIGER_QK) == VP_LIGER_NORM_IN_PLACE;
    vp_t y = vp_liger_rms_norm_op(step, input, weight, rows, in_place, "attention.qk_norm.liger");
    vp_drop(sim, input);
    return y;
}

/* An RMSNorm over every head of every token (the weight one head wide):
 * HF's, Liger's, or Megatron's fused one (its qk_layernorm). `contiguous`,
 * when not NULL: x is [b, heads, s, d], a view of [b, s, heads, d] rows
 * unless *contiguous, which Liger's output becomes. */
static vp_t head_norm(vp_step *step, const vp_op *op, vp_t x, vp_t weight, bool *contiguous, uint64_t heads) {
    uint64_t rows = vp_at(&step->sim, x)->numel / vp_at(&step->sim, weight)->numel;
    if (vp_framework_of(step->recipe)->fused_rmsnorm) return vp_rms_norm(&step->sim, x, weight, rows, "attention.qk_norm");
    if (liger_qk_norm(step, op)) {
        bool transposed = contiguous && !*contiguous;
        if (contiguous) *contiguous = true;
        return liger_head_norm(step, op, x, weight, rows, transposed, heads);
    }
    if (vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_OLMO2) return vp_olmo2_rms_norm(step, x, weight, rows);
    /* Gemma 3: Gemma3RMSNorm over each head (of the transposed view: the
     * same tensors) */
    if (vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_GEMMA) return vp_gemma_rms_norm(step, x, weight, rows);
    /* Cohere: over each head's head_dim, the weight [heads, head_dim] */
    if (vp_op_u64(op, ATT_QK_NORM_STYLE) == QK_NORM_COHERE)
        return vp_cohere_layer_norm(step, x, weight, vp_at(&step->sim, x)->numel / shape_of(op).head_dim);
    return vp_hf_rms_norm(step, x, weight, rows);
}

/* *t = norm(*t): the name rebound, the projection gone unless kept
 * (`contiguous`, `heads`: head_norm's, after the transpose) */
static void normalize_in_place(vp_step *step, const vp_op *op, vp_t *t, vp_t weight, bool *contiguous,
                               uint64_t heads) {
    vp_t normed = head_norm(step, op, *t, weight, contiguous, heads);
    vp_drop(&step->sim, *t);
    *t = normed;
}

/* BloomAttention (4.26-4.27): fused_qkv viewed as [b, s, heads, 3, d] and
 * indexed ([..., 0, :] and so on: views whose backward each allocates a
 * zero-filled gradient of the whole projection), then
 * query.transpose(1, 2).reshape(b * heads, s, d) and likewise for the key
 * and value: copies, as those views cannot be reshaped in place. The
 * copies are what baddbmm and bmm save and what use_cache's presents
 * keep; fused_qkv stays a local until the module returns. */
static void bloom_project(vp_step *step, const vp_t *leaves, vp_t x, uint64_t q_out, qkv *in) {
    vp_sim *sim = &step->sim;
    vp_t fused = vp_project_column(step, x, leaves[Q_W], leaves[Q_B], 3 * q_out, "attention.query_key_value");
    uint64_t part = vp_at(sim, fused)->numel / 3;
    vp_t *dest[3] = {&in->q, &in->k, &in->v};
    static const char *const labels[3] = {"attention.query_layer", "attention.key_layer", "attention.value_layer"};
    for (unsigned i = 0; i < 3; i++) {
        vp_t view = vp_slice(sim, fused, part, "attention.split_heads");
        /* transpose(1, 2).reshape(b * heads, ...): matmul's batch fold by hand */
        *dest[i] = batched_operand(step, view, false, labels[i]);
        vp_drop(sim, view);
    }
    keep_local(sim, in, fused); /* fused_qkv */
    vp_drop(sim, fused);
    in->q_contiguous = in->k_contiguous = in->v_contiguous = true;
}

/* Phi-3's apply_rotary_pos_emb: x[..., :rotary_dim] (x itself when it
 * spans the head: a full slice is no op) and x[..., rotary_dim:] (empty
 * then, and its backward still makes a zero-filled gradient of x's size);
 * the rotated part is joined to the rest with torch.cat: a copy. */
static vp_t rotate(vp_step *step, const vp_op *op, vp_t x, qkv *in, const char *label) {
    if (!vp_op_flag(op, ATT_ROTARY_CAT)) return vp_apply_rotary(step, x, label);
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel, head_dim = shape_of(op).head_dim;
    uint64_t rotary_dim = vp_op_u64(op, ATT_ROTARY_DIM) ? vp_op_u64(op, ATT_ROTARY_DIM) : head_dim;
    uint64_t rotated_numel = n / head_dim * rotary_dim;
    vp_t part = rotary_dim < head_dim ? vp_slice(sim, x, rotated_numel, label) : (vp_hold(sim, x), x);
    vp_t pass = vp_slice(sim, x, n - rotated_numel, label);
    vp_t rotated = vp_apply_rotary(step, part, label);
    vp_drop(sim, part);
    vp_t y = vp_cat(sim, rotated, pass, label);
    /* PhiAttention binds query_rot (rebound to its rotation) and
     * query_pass, and likewise the key's, in its own frame */
    if (vp_op_flag(op, ATT_ROTARY_LOCALS)) {
        keep_local(sim, in, rotated);
        keep_local(sim, in, pass);
    }
    vp_drop(sim, rotated);
    vp_drop(sim, pass);
    return y;
}

/* From q, k, v (and the module's locals) to the merged heads, by the
 * kernel the recipe picks: HF's eager path (under selective recompute, a
 * checkpointed function), ring attention under context parallelism, or
 * SDPA's and FlashAttention-2's kernels. */
static vp_t attend(vp_step *step, const vp_op *op, const vp_t *leaves, qkv *in, shape s) {
    kernel which = kernel_for(step, op);
    /* SDPA's flash backend takes one head width for q, k and v
     * (sdp_utils.cpp, check_head_dim_size_flash): the memory-efficient one runs */
    if (sdpa_16bit(which) && s.v_dim != s.head_dim) which = KERNEL_MEM_EFFICIENT;
    bool masked = sdpa_masked(step, op);
    /* cuDNN's attention takes the mask as a bias (the H200 check's Phi-3
     * past its window ran it); the flash kernel takes none */
    if (masked && which != KERNEL_SDPA_CUDNN) which = KERNEL_MEM_EFFICIENT;
    if (which == KERNEL_EAGER && step->recipe->selective) {
        core_call *c = vp_step_scratch(step, sizeof *c);
        if (!c) return 0;
        *c = (core_call){op,           leaves,    s,         in->q_contiguous, in->k_contiguous,
                         in->v_contiguous, in->q_gaps, in->k_gaps, in->v_gaps};
        vp_t inputs[3] = {in->q, in->k, in->v};
        vp_t *const saved[1] = {vp_step_tensor_field(step, current_mask_slot(step))};
        vp_checkpoint_args args = {.saved = saved, .n_saved = 1};
        return vp_checkpoint(step, recompute_core, c, inputs, 3, &args);
    }
    if (which == KERNEL_EAGER) return eager(step, op, leaves, in, s);
    if ((sdpa_16bit(which) || which == KERNEL_MEM_EFFICIENT) && falcon_split(op) && s.kv_heads != s.heads) {
        /* SDPA's fused kernels refuse one key head for several query heads
         * (sdp_utils.cpp, check_batch_size_and_num_heads_dense): its math
         * backend runs; FalconAttention then transposes and reshapes the
         * output (a copy) */
        vp_sdpa_math_shape m = {s.heads, s.kv_heads, s.head_dim, in->q_contiguous, false};
        vp_t out = vp_sdpa_math(step, &m, in->q, in->k, in->v);
        vp_t merged = vp_copy(&step->sim, out, "attention.merge_heads");
        vp_drop(&step->sim, out);
        return merged;
    }
    if (step->cp > 1 && vp_framework_of(step->recipe)->sdpa_ring) return sdpa_ring(step, in, s);
    if (step->cp > 1) return vp_ring_attention(step, in->q, in->k, in->v, s.heads, s.kv_heads, s.head_dim);
    gqa_path gqa = gqa_path_of(step, s, which, masked);
    if (gqa == GQA_MATH) {
        /* SDPA's math backend with enable_gqa; the query as transformers
         * handed it over (contiguous before 4.56) */
        bool q_contiguous = in->q_contiguous || !vp_recipe_transformers_since(step->recipe, 4, 56);
        vp_sdpa_math_shape m = {s.heads, s.kv_heads, s.head_dim, q_contiguous, true};
        vp_t out = vp_sdpa_math(step, &m, in->q, in->k, in->v);
        vp_t merged = vp_copy(&step->sim, out, "attention.merge_heads"); /* transpose(1, 2).contiguous() */
        vp_drop(&step->sim, out);
        return merged;
    }
    return fused_kernel(step, in, s, which, masked ? current_mask(step) : 0, gqa == GQA_NATIVE);
}

/* The heads' view of a projection's rows, x.view(b, s, heads, d)
 * .transpose(1, 2): not contiguous with more than one head and one
 * position (what element-wise ops make of it keeps that layout: Gemma 3's
 * and Cohere's q/k norms, the rotary embedding's q * cos + ...), which
 * OffloadActivations' and save_on_cpu's hooks see. */
static void permute_heads(vp_step *step, qkv *in, shape s) {
    vp_sim *sim = &step->sim;
    bool rows = step->seq > 1;
    if (in->q && !in->q_contiguous) vp_at(sim, in->q)->permuted = rows && s.heads > 1;
    if (in->k && !in->k_contiguous) vp_at(sim, in->k)->permuted = rows && s.kv_heads > 1;
    if (in->v && !in->v_contiguous) vp_at(sim, in->v)->permuted = rows && s.kv_heads > 1;
}

static vp_t attention_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t given) {
    vp_sim *sim = &step->sim;
    /* DTensor's PrepareModuleInput: the input gathered once for q, k and v */
    vp_t gathered = vp_module_input(step, given, leaves[Q_W], vp_op_flag(op, ATT_FUSED_QKV) ? 1 : 3),
         x = gathered ? gathered : given;
    shape s = local_shape(op, step->tp);
    uint64_t q_out = s.heads * s.head_dim, kv_out = s.kv_heads * s.head_dim;
    qkv in = {.input_dtype = (vp_dtype)vp_at(sim, given)->dtype};
    bool mla = is_mla(op), cross = vp_op_flag(op, ATT_CROSS), normalized = false;
    if (mla) {
        vp_mla_shape m = mla_shape(op);
        vp_t locals[MLA_LOCALS];
        vp_mla_project(step, &m, leaves, x, &in.q, &in.k, &in.v, locals);
        for (unsigned i = 0; i < MLA_LOCALS; i++) {
            keep_local(sim, &in, locals[i]);
            vp_drop(sim, locals[i]);
        }
        in.q_contiguous = in.k_contiguous = true; /* torch.cat's results */
    } else if (bloom_alibi(op)) {
        bloom_project(step, leaves, x, q_out, &in);
    } else if (falcon_split(op)) {
        /* fused_qkv = self.query_key_value(hidden_states), a local of
         * FalconAttention.forward until it returns */
        vp_falcon_shape f = falcon_shape(op);
        vp_t fused = vp_project_column(step, x, leaves[Q_W], leaves[Q_B], q_out + 2 * kv_out, "attention.query_key_value");
        vp_falcon_split(step, &f, fused, &in.q, &in.k, &in.v);
        keep_local(sim, &in, fused);
        vp_drop(sim, fused);
        s.kv_heads = vp_falcon_kv_heads(&f);
    } else if (vp_op_flag(op, ATT_FUSED_QKV)) {
        /* self.c_attn(hidden_states).split(split_size, dim=2), MPT's
         * mixed_qkv.chunk(3, dim=2), or Phi-3's
         * qkv[..., :query_pos] and the keys' and values' slices after it:
         * views, which keep the whole projection for as long as any of
         * them is kept */
        vp_t fused = vp_project_column(step, x, leaves[Q_W], leaves[Q_B], q_out + 2 * kv_out, "attention.c_attn");
        vp_t parts[3];
        uint64_t rows = vp_at(sim, fused)->numel / (q_out + 2 * kv_out);
        const uint64_t sizes[3] = {rows * q_out, rows * kv_out, rows * kv_out};
        vp_split_columns_sizes(sim, fused, 3, sizes, parts, "attention.split");
        vp_drop(sim, fused);
        in.q = parts[0];
        in.k = parts[1];
        in.v = parts[2];
    } else {
        /* cross-attention's keys and values come from the encoder's output */
        vp_t source = cross ? vp_step_tensor(step, VP_TENSOR_MEMORY) : x;
        /* Qwen3 and OLMo-2 normalize each projection as it is made
         * (self.q_norm(self.q_proj(x)...), then k, then v); Gemma 3 and Cohere after all three */
        bool early = vp_op_flag(op, ATT_QK_NORM) && vp_op_u64(op, ATT_QK_NORM_STYLE) != QK_NORM_GEMMA &&
                     vp_op_u64(op, ATT_QK_NORM_STYLE) != QK_NORM_COHERE;
        in.q = vp_project_column(step, x, leaves[Q_W], leaves[Q_B], q_out, "attention.q_proj");
        if (early) normalize_in_place(step, op, &in.q, leaves[Q_NORM], NULL, 0);
        in.k = vp_project_column(step, source, leaves[K_W], leaves[K_B], kv_out, "attention.k_proj");
        if (early) normalize_in_place(step, op, &in.k, leaves[K_NORM], NULL, 0);
        in.v = vp_project_column(step, source, leaves[V_W], leaves[V_B], kv_out, "attention.v_proj");
        normalized = early;
    }
    if (!mla) permute_heads(step, &in, s);
    if (vp_op_flag(op, ATT_POSITION_BIAS)) {
        in.cross = cross;
        in.kv_len = cross ? step->source_seq : step->seq + step->past_tokens;
    }
    if (vp_op_flag(op, ATT_QK_NORM) && !mla && !normalized) {
        /* self.q_norm(query_states), likewise k: over head_dim */
        normalize_in_place(step, op, &in.q, leaves[Q_NORM], &in.q_contiguous, s.heads);
        normalize_in_place(step, op, &in.k, leaves[K_NORM], &in.k_contiguous, s.kv_heads);
    }
    bool rotates = rotates_here(step, op);
    if (rotates && gptj_rotary(op)) {
        vp_gptj_rotary_shape g = {s.head_dim, vp_op_u64(op, ATT_ROTARY_DIM), vp_op_u64(op, ATT_POSITIONS)};
        local_keeper keeper = {sim, &in};
        vp_gptj_rotary(step, &g, &in.q, &in.k, keep_local_of, &keeper);
    } else if (rotates && cohere_rotary(op)) {
        vp_cohere_rotary(step, &in.q, &in.k);
    } else if (rotates && chunked_rotary(op)) {
        vp_chunked_rotary(step, &in.q, &in.k);
        in.q_contiguous = in.k_contiguous = true; /* torch.cat's results */
    } else if (rotates && !mla) {
        vp_t q = rotate(step, op, in.q, &in, "attention.rotary_q");
        vp_t k = rotate(step, op, in.k, &in, "attention.rotary_k");
        vp_drop(sim, in.q);
        vp_drop(sim, in.k);
        in.q = q;
        in.k = k;
        /* torch.cat's results are contiguous [b, heads, s, d] */
        if (vp_op_flag(op, ATT_ROTARY_CAT)) in.q_contiguous = in.k_contiguous = true;
    }
    /* past_key_value.update(key_states, value_states, layer_idx), or GPT-2's
     * present = (key, value) */
    if (cross && vp_op_flag(op, ATT_CACHES))
        vp_kv_cache_update_cross(step, in.k, in.v);
    else if (vp_op_flag(op, ATT_CACHES) || step->past_tokens)
        vp_kv_cache_update(step, &in.k, &in.v);
    if (vp_op_flag(op, ATT_RETURNS_KV)) {
        vp_step_keep_local(step, in.k, VP_LOCAL_OF_LAYER);
        vp_step_keep_local(step, in.v, VP_LOCAL_OF_LAYER);
    }
    vp_t context = attend(step, op, leaves, &in, s);
    if (vp_op_flag(op, ATT_HOLDS_CONTEXT)) vp_step_keep_local(step, context, VP_LOCAL_OF_POST_NORM_BLOCK);
    bool returned = vp_op_flag(op, ATT_RETURNS_BEFORE_OUT_PROJ);
    if (returned) release_locals(sim, &in);
    if (returned) vp_drop(sim, gathered);
    vp_t out = vp_project_row(step, context, leaves[mla ? MLA_O_W : O_W], leaves[mla ? MLA_O_B : O_B], s.hidden,
                              "attention.o_proj");
    vp_drop(sim, context);
    vp_t dropped = vp_train_dropout(step, out, op->value[ATT_RESID_DROPOUT], "attention.resid_dropout");
    vp_drop(sim, out);
    /* query/key/value locals live until the module returns, and the
     * gathered input with them: PrepareModuleInput's forward pre-hook
     * hands it to forward as its argument (nn.Module._call_impl's `args`,
     * held until forward returns) */
    if (!returned) release_locals(sim, &in);
    if (!returned) vp_drop(sim, gathered);
    return dropped;
}

const vp_op_kind vp_op_attention = {
    .name = "attention",
    .doc = "causal self-attention with q/k/v/o projections; GQA/MQA, rotary, and the recipe's kernel",
    .fields = attention_fields,
    .n_fields = ATT_FIELDS,
    .cost = VP_COST_ATTENTION,
    .check = attention_check,
    .check_tp = attention_check_tp,
    .facts = attention_facts,
    .recipe_problem = attention_recipe_problem,
    .leaves = attention_leaves,
    .prepare = attention_prepare,
    .forward = attention_forward,
};

/* ---- the core for a Lua block's F.sdpa (sdpa.h) ---- */

/* The attention op a block's F.sdpa stands for: LLaMA's flags, the
 * spec's shape and options. */
static vp_op sdpa_op(const vp_sdpa_spec *spec) {
    vp_op op = {.kind = &vp_op_attention};
    for (unsigned f = 0; f < ATT_FIELDS; f++) op.value[f] = attention_fields[f].fallback;
    op.value[ATT_HIDDEN] = (double)(spec->heads * spec->head_dim);
    op.value[ATT_HEADS] = (double)spec->heads;
    op.value[ATT_KV_HEADS] = (double)spec->kv_heads;
    op.value[ATT_HEAD_DIM] = (double)spec->head_dim;
    op.value[ATT_DROPOUT] = spec->dropout;
    op.value[ATT_UPCAST_SOFTMAX] = spec->upcast_softmax;
    op.value[ATT_KEEPS_WEIGHTS] = spec->keeps_weights;
    op.value[ATT_MASK] = MASK_ADDITIVE;
    return op;
}

vp_t vp_sdpa(vp_step *step, const vp_sdpa_spec *spec, vp_t q, vp_t k, vp_t v) {
    /* selective recompute runs the core again in backward: the op lives
     * as long as the step */
    vp_op *op = vp_step_scratch(step, sizeof *op);
    if (!op) return 0;
    *op = sdpa_op(spec);
    qkv in = {.q = q,
              .k = k,
              .v = v,
              .q_contiguous = spec->q_contiguous,
              .k_contiguous = spec->k_contiguous,
              .v_contiguous = spec->v_contiguous,
              .q_gaps = spec->q_gaps,
              .k_gaps = spec->k_gaps,
              .v_gaps = spec->v_gaps};
    vp_t context = attend(step, op, NULL, &in, local_shape(op, step->tp));
    for (unsigned i = 0; i < in.n_locals; i++) vp_drop(&step->sim, in.locals[i]);
    return context;
}

void vp_sdpa_prepare(vp_step *step, const vp_sdpa_spec *spec) {
    vp_op op = sdpa_op(spec);
    attention_prepare(step, &op);
}

void vp_attention_mask_prepare(vp_step *step, vp_attention_mask_kind kind, uint64_t window) {
    if (kind == VP_MASK_PREFIX) { /* a Lua block's alone: no attention op builds it */
        if (vp_step_tensor(step, VP_TENSOR_CAUSAL_MASK)) return;
        bool grad_mode = step->sim.grad_mode;
        step->sim.grad_mode = false;
        prepare_padded_mask(step, step->seq + step->past_tokens, true);
        step->sim.grad_mode = grad_mode;
        return;
    }
    static const unsigned masks[] = {[VP_MASK_CAUSAL] = MASK_ADDITIVE, [VP_MASK_SLIDING] = MASK_ADDITIVE_MISTRAL,
                                     [VP_MASK_PADDED] = MASK_ADDITIVE_PADDED, [VP_MASK_BOOL] = MASK_BOOL,
                                     [VP_MASK_BIDIRECTIONAL] = MASK_PADDING};
    vp_sdpa_spec spec = {.heads = 1, .kv_heads = 1, .head_dim = 1};
    vp_op op = sdpa_op(&spec);
    op.value[ATT_MASK] = masks[kind];
    op.value[ATT_SLIDING_WINDOW] = (double)window;
    prepare_masks(step, &op, true);
}

vp_t vp_attention_mask(const vp_step *step) { return current_mask(step); }

vp_t vp_attention_matmul(vp_step *step, const vp_attention_operand *a, const vp_attention_operand *b,
                         uint64_t out_numel, const char *label) {
    vp_sim *sim = &step->sim;
    vp_t ac = vp_autocast_low(step, a->t, a->cast_label);
    vp_t bc = vp_autocast_low(step, b->t, b->cast_label);
    vp_t am = batched_operand(step, ac, a->contiguous || (a->gaps && ac != a->t), a->reshape_label);
    vp_t bm = batched_operand(step, bc, b->contiguous || (b->gaps && bc != b->t), b->reshape_label);
    vp_t out = vp_matmul(sim, am, bm, out_numel, b->transposed && (b->contiguous || (b->gaps && bc != b->t)), label);
    vp_drop(sim, ac);
    vp_drop(sim, bc);
    vp_drop(sim, am);
    vp_drop(sim, bm);
    return out;
}

const char *vp_sdpa_check_tp(const vp_sdpa_spec *spec, unsigned tp) {
    vp_op op = sdpa_op(spec);
    return attention_check_tp(&op, tp);
}
