/* modules.h — the names fine-tuning recipes use for a model's modules
 * (Hugging Face's attribute names: q_proj, c_attn, lm_head, ...), so that
 * LoRA targets and modules_to_save resolve against the ops' weights. */
#ifndef VRAMPLAN_MODULES_H
#define VRAMPLAN_MODULES_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    VP_MODULE_NONE,
    VP_MODULE_Q_PROJ,
    VP_MODULE_K_PROJ,
    VP_MODULE_V_PROJ,
    VP_MODULE_O_PROJ,
    VP_MODULE_C_ATTN,       /* GPT-2's fused q/k/v */
    VP_MODULE_C_PROJ,       /* GPT-2's attention output and MLP down projection */
    VP_MODULE_C_FC,         /* GPT-2's MLP up projection */
    VP_MODULE_GATE_PROJ,
    VP_MODULE_UP_PROJ,
    VP_MODULE_DOWN_PROJ,
    VP_MODULE_W1,           /* Mixtral's experts */
    VP_MODULE_W2,
    VP_MODULE_W3,
    VP_MODULE_GATE,         /* a mixture's router */
    VP_MODULE_Q_A_PROJ,     /* multi-head latent attention's query down- and up-projections */
    VP_MODULE_Q_B_PROJ,
    VP_MODULE_KV_A_PROJ,    /* kv_a_proj_with_mqa: the latent and the shared rotary key */
    VP_MODULE_KV_B_PROJ,
    VP_MODULE_QUERY_KEY_VALUE, /* BLOOM's fused q/k/v */
    VP_MODULE_DENSE,           /* BLOOM's attention output */
    VP_MODULE_DENSE_H_TO_4H,   /* BLOOM's MLP */
    VP_MODULE_DENSE_4H_TO_H,
    VP_MODULE_Q,               /* T5's attention: q, k, v, o */
    VP_MODULE_K,
    VP_MODULE_V,
    VP_MODULE_O,
    VP_MODULE_WI,              /* T5's MLP: wi, wo; gated: wi_0, wi_1 */
    VP_MODULE_WO,
    VP_MODULE_WI_0,
    VP_MODULE_WI_1,
    VP_MODULE_QKV_PROJ,        /* Phi-3's fused q/k/v */
    VP_MODULE_GATE_UP_PROJ,    /* Phi-3's fused gate and up projections */
    VP_MODULE_FC1,             /* Phi-1/Phi-2's MLP */
    VP_MODULE_FC2,
    VP_MODULE_QUERY,           /* BERT's attention: query, key, value; its outputs and pooler are dense */
    VP_MODULE_KEY,
    VP_MODULE_VALUE,
    VP_MODULE_WQKV,            /* MPT's fused q/k/v */
    VP_MODULE_IN_PROJ,         /* Mamba's mixer (mamba_ssm, HF Jamba): in_proj, x_proj, dt_proj; out_proj is */
    VP_MODULE_X_PROJ,          /* o_proj's alias */
    VP_MODULE_DT_PROJ,
    VP_MODULE_SHARED_EXPERT_GATE, /* Qwen2-MoE's sigmoid gate on the shared expert */
    VP_MODULE_LM_HEAD,
    VP_MODULE_CLASSIFIER,   /* a sequence classifier's head (BERT's classifier) */
    VP_MODULE_EMBED_TOKENS, /* wte for GPT-2 */
    VP_MODULE_EMBED_POSITIONS,
    VP_MODULE_NORM,         /* every norm's weight and bias */
    VP_MODULE_COUNT
} vp_module;

typedef uint64_t vp_module_set; /* bit m: module m */

/* A mixture's 3-D experts parameters that PEFT's target_parameters can
 * name (transformers 5's experts modules hold them bare, no nn.Linear) */
typedef enum { VP_PARAM_NONE, VP_PARAM_GATE_UP, VP_PARAM_DOWN } vp_param_target;

static inline vp_module_set vp_module_bit(vp_module m) { return (vp_module_set)1 << m; }
static inline bool vp_module_in(vp_module_set set, vp_module m) { return m != VP_MODULE_NONE && (set >> m & 1u); }

extern const char *const vp_module_names[VP_MODULE_COUNT + 1];

/* The linear modules "all-linear" means: every one but the output head,
 * a language model's or a classifier's (PEFT's rule): q_proj through the
 * last of them, and (bit VP_MODULE_NONE) every linear a Lua block declares
 * under a name of its own. */
enum { VP_MODULE_LAST_LINEAR = VP_MODULE_SHARED_EXPERT_GATE };
vp_module_set vp_module_all_linear(void);

/* The module a name means (its aliases too: out_proj is o_proj), or
 * VP_MODULE_NONE. */
vp_module vp_module_find(const char *name);

/* Parses "q_proj,v_proj" or "all-linear" into a set; on an unknown name
 * returns false and points *bad at it (and *bad_len at its length). */
bool vp_module_parse(const char *text, vp_module_set *out, const char **bad, unsigned *bad_len);

/* The same, handing each name no core module has to `other` (with `ctx`)
 * instead: false from it stops the parse at that name. */
bool vp_module_parse_open(const char *text, vp_module_set *out, const char **bad, unsigned *bad_len,
                          bool (*other)(void *ctx, const char *name, unsigned len), void *ctx);

/* The comma-separated names of a set (writes at most size bytes). */
void vp_module_format(vp_module_set set, char *out, unsigned size);

#endif
