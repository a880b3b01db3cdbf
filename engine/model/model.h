/* model.h — an architecture as the core holds it: ops of registered kinds,
 * each with validated fields, arranged as embedding ops, one repeated layer
 * and the final ops (norm, head, loss). */
#ifndef VP_MODEL_H
#define VP_MODEL_H

#include "modules.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"
#include "sim.h"

struct vp_step;
struct vp_op;
struct vp_model;

typedef enum { VP_FIELD_INT, VP_FIELD_NUMBER, VP_FIELD_BOOL, VP_FIELD_ENUM } vp_field_type;

/* One field of an op kind: the single declaration that drives validation,
 * defaults and the reference documentation. */
typedef struct {
    const char *name;
    vp_field_type type;
    bool required;
    double fallback;             /* default when not required (enum: option index) */
    double min, max;             /* inclusive range for int and number */
    const char *const *options;  /* enum names, NULL-terminated */
    const char *doc;
} vp_field;

enum { VP_OP_MAX_FIELDS = 56, VP_OP_MAX_LEAVES = 16 };
/* leaf slots beside each linear weight for its adapters: LoRA's A and B,
 * DoRA's magnitude (empty unless a recipe adapts the weight) */
enum { VP_ADAPTER_SLOTS = 3 };

/* A tensor an op owns for the whole run: a parameter or a buffer; `count`
 * identical ones side by side (the experts of a mixture), one when 0;
 * `expert` when it is split over expert-parallel ranks. */
typedef struct {
    uint64_t numel;
    vp_dtype dtype;              /* VP_DTYPE_NONE: the precision's parameter dtype */
    bool trainable;
    bool buffer;
    const char *label;
    unsigned count;
    bool expert;
    vp_module module;            /* the Hugging Face module it belongs to */
    uint64_t out_features;       /* a linear layer's weight: its outputs (LoRA adapts it); else 0 */
    uint64_t rows;               /* a matrix's rows (a linear weight's outputs, an embedding's entries); 0: a vector */
    bool conv1d;                 /* a linear weight held by transformers' Conv1D (GPT-2), not an nn.Linear */
    bool keep_fp32;              /* transformers' _keep_in_fp32_modules: left in fp32, unquantized, when the model
                                    is loaded quantized (T5's wo) */
    bool per_position;           /* a buffer of numel per position of the step's sequence, in the activations' dtype
                                    when dtype is VP_DTYPE_NONE (DeepSeek-V2's per-layer rotary caches) */
    const char *module_name;     /* module VP_MODULE_NONE: a Lua block's own name for it (lora_targets match it), or NULL */
    /* a 3-D experts parameter [rows = experts, ...] that PEFT's
     * target_parameters can adapt: which one, and each expert's input and
     * output features as lora.ParamWrapper reads them (0: not one) */
    vp_param_target param_target;
    uint64_t param_in, param_out;
} vp_leaf_spec;

static inline unsigned vp_leaf_count(const vp_leaf_spec *spec) { return spec->count ? spec->count : 1; }
/* A leaf LoRA can give adapters: a linear weight, or an experts parameter
 * PEFT's target_parameters names. */
static inline bool vp_leaf_adaptable(const vp_leaf_spec *spec) { return spec->out_features || spec->param_target; }

/* A trainable parameter in the precision's dtype, one of it, of `module`
 * (out_features: a linear weight's outputs; 0 for anything else). */
static inline vp_leaf_spec vp_param(uint64_t numel, const char *label, vp_module module, uint64_t out_features) {
    return (vp_leaf_spec){numel, VP_DTYPE_NONE, true, false, label, 1, false, module, out_features, out_features, false,
                          false, false, NULL, VP_PARAM_NONE, 0, 0};
}

/* How the model is split over model-parallel ranks: tensor-parallel ranks,
 * and expert-parallel ranks sharing the experts. */
/* How one rank's share of the model is cut: tensor-parallel ranks, and
 * for experts the expert-parallel and expert-tensor-parallel ranks. */
typedef struct {
    unsigned tp, ep, etp;
    bool exact_vocab; /* the vocabulary split unpadded (DTensor's), not padded to 128 x tp (Megatron's) */
    bool fused_experts; /* a mixture's experts as transformers 5 holds them: one 3-D parameter per projection */
} vp_ranks;

/* A model is its embeddings, a layer repeated `layers` times (the first
 * `first_layers` of them another layer: DeepSeek's dense layers before
 * its sparse ones, an encoder's layers before its decoder's), and the
 * final norm, head and loss. The bridge runs once where the first layers
 * end: an encoder's final norm and the decoder's embeddings. */
typedef enum {
    VP_SECTION_EMBED,
    VP_SECTION_LAYER,
    VP_SECTION_FINAL,
    VP_SECTION_FIRST_LAYER,
    VP_SECTION_BRIDGE,
    VP_SECTION_COUNT
} vp_section_id;

/* What the step driver asks of an op by its kind's roles, never by its
 * name: where the head's frame begins, where the loss phase begins, what
 * Megatron scatters after, where a layer registers its norms. */
enum {
    VP_ROLE_EMBEDDING = 1u << 0, /* looks tokens or positions up in a table: sequence parallelism scatters
                                    the sequence after the last one */
    VP_ROLE_HEAD = 1u << 1,      /* runs in the head's frame, after the model body returns
                                    (XForCausalLM.forward calls self.model, then its head and loss) */
    VP_ROLE_LOSS = 1u << 2,      /* part of the loss: the loss phase begins at the first one */
    VP_ROLE_NORM = 1u << 3,      /* a norm (vp_norm_registration says where a layer registers it) */
};

/* What the step and the planners ask of a model as a whole, answered once
 * when the model is finished (vp_model_finish): each kind's `facts` hook
 * fills in its part from the first op of the kind in each section, so no
 * caller names a kind to ask. */
typedef struct {
    uint64_t hidden;             /* the token embedding's width: the residual stream's */
    bool no_position_ids;        /* the model's forward makes no position_ids (Mamba2Model) */
    bool token_type_ids;         /* its batch carries token_type_ids and an attention_mask (PaliGemma's prefix-LM mask) */
    bool lm_head;                /* a language model's head (tensor parallelism is modelled for those) */
    bool experts;                /* a mixture of experts somewhere (expert parallelism applies) */
    bool mxfp4_experts;          /* GPT-OSS's experts, which its checkpoints hold in MXFP4 */
    bool parallel_branches;      /* attention and MLP side by side (GPT-NeoX, Phi) */
    bool sliding_mask;           /* layers with their own sliding-window masks (Gemma 2 and 3) */
    const struct vp_op *tied_head; /* the final lm_head when it shares the token embedding's weight, else NULL */
    bool loss;                   /* the final ops end with a loss over labels (cross_entropy) */
    bool loss_per_sequence;      /* it takes one label per sequence (a classifier's) */
    bool router_aux_loss;        /* the final ops add the router's load-balancing loss */
    unsigned layer_period;       /* layers per period of the layers' sliding-window pattern (1: all alike) */
    /* the layers' first attention, when `attention` */
    bool attention;
    bool caches;                 /* its keys and values go into the model's cache */
    bool cache_tuples;           /* ... returned as tuples of tensors, not a Cache object */
    bool peft_defaults;          /* PEFT has default LoRA targets for the model type it is from */
    bool splits_hidden;          /* hidden / heads is its head width (T5: d_model = num_heads x d_kv) */
    uint64_t kv_width;           /* keys (or values) per token: kv_heads x head_dim */
    unsigned kv_heads;           /* its key/value heads */
} vp_model_facts;

/* Layers unlike every `period`-th one (a sliding pattern, an op's per-layer
 * rule) fold by whole periods: the facts keep the least common multiple of
 * every such period. */
static inline void vp_model_facts_add_period(vp_model_facts *facts, unsigned period) {
    unsigned have = facts->layer_period ? facts->layer_period : 1, a = have, b = period;
    if (!period) return;
    while (b) {
        unsigned t = a % b;
        a = b;
        b = t;
    }
    facts->layer_period = have / a * period;
}

/* What an op of the kind costs in the step-time model: steptime.c holds
 * one cost function per class, reading the op's fields by name. NONE:
 * nothing there (masks, rotary tables, T5's bias tables, containers'
 * bookkeeping). */
typedef enum {
    VP_COST_NONE,
    VP_COST_ATTENTION,
    VP_COST_MLP,
    VP_COST_MOE,
    VP_COST_NORM,
    VP_COST_DROPOUT,
    VP_COST_TOKEN_EMBEDDING, /* holds the vocabulary (the loss's width where no head does) */
    VP_COST_POSITION_EMBEDDING,
    VP_COST_LM_HEAD,         /* holds the vocabulary */
    VP_COST_CROSS_ENTROPY,
    VP_COST_CLASSIFIER,
    VP_COST_RESIDUAL,        /* a container's add (or a parallel block's sum) */
    VP_COST_BLOCK,           /* a Lua block: its program's projections */
    VP_COST_COUNT
} vp_cost_class;

typedef struct vp_op_kind {
    const char *name;
    const char *doc;
    const vp_field *fields;
    unsigned n_fields;
    bool container;              /* holds child ops (a residual branch) */
    unsigned roles;              /* VP_ROLE_* */
    vp_cost_class cost;          /* its step time (steptime.c) */
    /* Fills in what `op`, the first of its kind in `section`, tells about
     * the whole model (vp_model_facts). */
    void (*facts)(const struct vp_op *op, vp_section_id section, vp_model_facts *facts);
    bool facts_each;             /* `facts` is asked of every op of the kind, not the first only */
    /* What the model's ops of this kind cannot run under `recipe` (a
     * message naming the recipe key), or NULL; asked once per kind the
     * model holds (vp_model_recipe_problem). */
    const char *(*recipe_problem)(const struct vp_model *model, const vp_recipe *recipe);
    /* Settles the recipe's `auto` values that depend on the model's ops of
     * this kind (vp_model_resolve_recipe), or NULL. */
    void (*resolve_recipe)(const struct vp_model *model, vp_recipe *recipe);
    /* A decoder layer among the op's children that data parallelism wraps
     * as a unit of its own (a branch's: op_branch.c), as leaf slots of its
     * section [*first, *first + *n); false when it has none. */
    bool (*unit_slots)(const struct vp_op *op, unsigned *first, unsigned *n);
    /* Cross-field checks; returns a message naming the field, or NULL. */
    const char *(*check)(const struct vp_op *op);
    /* Checks the op can be split over `tp` tensor-parallel ranks. */
    const char *(*check_tp)(const struct vp_op *op, unsigned tp);
    /* Checks the op's experts can be split as `split` says (ep, etp). */
    const char *(*check_ep)(const struct vp_op *op, const vp_ranks *split);
    /* The op's own parameters and buffers, as one rank of the split holds
     * them ({1, 1, 1}: the whole model). */
    unsigned (*leaves)(const struct vp_op *op, const vp_ranks *split, vp_leaf_spec *out);
    /* Forward tensors the model creates once per step for ops of this kind
     * (rotary tables, causal masks), before the first layer runs. */
    void (*prepare)(struct vp_step *step, const struct vp_op *op);
    /* Forward: x is borrowed; the result is a new reference. */
    vp_t (*forward)(struct vp_step *step, const struct vp_op *op, const vp_t *leaves, vp_t x);
    /* The op's own name where its kind's does not say what it is (a Lua
     * block's module name), or NULL. */
    const char *(*title)(const struct vp_op *op);
} vp_op_kind;

typedef struct vp_op {
    const vp_op_kind *kind;
    double value[VP_OP_MAX_FIELDS];  /* by field index */
    struct vp_op *children;          /* containers only */
    unsigned n_children;
    unsigned slot;                   /* first leaf slot within its section */
    unsigned n_slots;                /* leaf slots of the op and its children */
    void *data;                      /* a kind's own data (a Lua block's program: block.h), owned; NULL: none */
    size_t data_size;
    unsigned roles;                  /* VP_ROLE_* of this op beyond its kind's (a Lua block declared a norm) */
} vp_op;

typedef struct {
    vp_op *ops;
    unsigned n_ops;
    unsigned n_slots;
    unsigned *registered;        /* the slots in the order the module registers its parameters; NULL: slot order */
} vp_section;

/* Where transformers registers a layer's norms among its other modules, so
 * where model.parameters() (and so a for-loop optimizer) meets them:
 * in place (GPT-2's ln_1, attn, ln_2, mlp), after the attention and MLP
 * (LlamaDecoderLayer: self_attn, mlp, input_layernorm,
 * post_attention_layernorm), before them (GPTNeoXLayer), or after the
 * module each one feeds, within its residual branch (T5LayerSelfAttention:
 * SelfAttention, layer_norm). */
typedef enum { VP_NORMS_IN_PLACE, VP_NORMS_LAST, VP_NORMS_FIRST, VP_NORMS_AFTER_BRANCH } vp_norm_registration;

enum { VP_EMBED_ORDER_MAX = 16 };

/* The most layers a model may have (lua_model.c says why). */
enum { VP_MODEL_MAX_LAYERS = 10000 };

typedef struct vp_model {
    char name[128];
    vp_section section[VP_SECTION_COUNT];
    unsigned layers;             /* all of them, the first ones included */
    unsigned first_layers;       /* layers that use VP_SECTION_FIRST_LAYER */
    vp_norm_registration norms_registered; /* in the layers */
    /* the embedding ops in the order their module registers them, when it
     * is not the forward's (BertEmbeddings: word, position, token type);
     * 0: the forward's */
    unsigned n_embed_order;
    unsigned embed_order[VP_EMBED_ORDER_MAX];
    vp_model_facts facts;        /* filled by vp_model_finish */
} vp_model;

/* An encoder-decoder (T5): a bridge between its encoder's layers and its
 * decoder's. */
static inline bool vp_model_encoder_decoder(const vp_model *m) { return m->section[VP_SECTION_BRIDGE].n_ops > 0; }

/* The ops layer `layer` runs. */
static inline const vp_section *vp_model_layer_section(const vp_model *m, unsigned layer) {
    return &m->section[layer < m->first_layers ? VP_SECTION_FIRST_LAYER : VP_SECTION_LAYER];
}

/* Leaf slots per layer instance: enough for either kind of layer. */
static inline unsigned vp_model_layer_slots(const vp_model *m) {
    unsigned a = m->section[VP_SECTION_LAYER].n_slots, b = m->section[VP_SECTION_FIRST_LAYER].n_slots;
    return a > b ? a : b;
}

/* The registry of op kinds (registry.c: op_list.h, in its order). */
const vp_op_kind *vp_op_kind_find(const char *name);
const vp_op_kind *vp_op_kind_at(unsigned index);
unsigned vp_op_kind_count(void);
int vp_field_index(const vp_op_kind *kind, const char *name);

/* Field values by index: each op file names its fields with an enum in the
 * order of its field table. */
static inline uint64_t vp_op_u64(const vp_op *op, unsigned field) { return (uint64_t)op->value[field]; }
static inline bool vp_op_flag(const vp_op *op, unsigned field) { return op->value[field] != 0.0; }

/* Lay out leaf slots and the layers' registration order and gather the
 * model's facts; returns NULL or a message. */
const char *vp_model_finish(vp_model *model);
void vp_model_free(vp_model *model);

/* Parameter counts, as `sum(p.numel() for p in model.parameters())` of the
 * whole model (no tensor-parallel split, no vocabulary padding). */
uint64_t vp_model_params(const vp_model *model, bool trainable_only);
/* The parameters of one instance of a section (one layer of the layer section). */
uint64_t vp_section_params(const vp_section *section);
/* One op's parameters, its children's included (buffers not). */
uint64_t vp_op_params(const vp_op *op);

/* The first op (children included) that cannot be split over tp ranks:
 * its message, or NULL. */
const char *vp_model_check_tp(const vp_model *model, unsigned tp);
/* The same for the experts' split (ep, etp). */
const char *vp_model_check_ep(const vp_model *model, const vp_ranks *split);
/* The first of its kinds' recipe problems (vp_op_kind.recipe_problem), or NULL. */
const char *vp_model_recipe_problem(const vp_model *model, const vp_recipe *recipe);
/* Each of its kinds' resolve_recipe, once per kind, before the recipe runs. */
void vp_model_resolve_recipe(const vp_model *model, vp_recipe *recipe);

/* An op's roles: its kind's and its own. */
static inline unsigned vp_op_roles(const vp_op *op) { return op->kind->roles | op->roles; }

/* The first op of a kind anywhere in a section (children included). */
const vp_op *vp_section_find(const vp_section *section, const vp_op_kind *kind);

#endif
