/* step.h — one training step on one GPU, evaluated on the simulator: its
 * state (ops reach it through op_context.h) and the driver's entry points. */
#ifndef VP_STEP_H
#define VP_STEP_H

#include <stddef.h>

#include "model.h"
#include "precision.h"
#include "recipe.h"
#include "shard.h"
#include "sim.h"

struct vp_optimizer_kind;
struct vp_layer_hook;

/* The part of the model one pipeline stage runs. */
typedef struct {
    unsigned first_layer, layers;   /* its layers */
    bool embed;                     /* holds the embeddings (the first stage) */
    bool final;                     /* holds the final norm, head and loss (the last stage) */
    unsigned microbatches;          /* micro-batches per step: with more than one, later ones
                                       backpropagate into gradients that already exist */
} vp_stage;

enum { VP_GRAPH_LEAVES = 3 };

/* A run of consecutive layers evaluated as one unit: under activation
 * checkpointing, the chunk whose input alone is kept. */
typedef struct vp_chunk {
    struct vp_step *step;
    unsigned first_layer;
    unsigned layers;
    bool checkpointed;
    uint32_t first_node, end_node;   /* its nodes in the forward graph */
    uint32_t first_tensor;           /* tensors created before it are external */
    vp_t input, output;
    unsigned instance;               /* its first layer instance */
    vp_t bias_table;                 /* T5: its stack's relative position table and buckets, for a rerun */
    bool bias_bidirectional;
} vp_chunk;

typedef struct {
    vp_t param, cast;
    unsigned repeat;                 /* fold multiplicity when the cast was made */
    int layer;                       /* the layer that made it */
} vp_cast_entry;

/* A tensor an autograd Function keeps as a plain ctx attribute, freed with
 * the graph; made while folding, it stands for `repeat` of them. */
typedef struct {
    vp_t tensor;
    unsigned repeat;
} vp_ctx_ref;

/* Where a leaf comes from: copy `copy` of the op's spec `spec`. */
typedef struct {
    vp_t leaf;
    const struct vp_op *op;
    unsigned spec, copy;
} vp_leaf_origin;

/* A leaf to make in another dtype than its spec's: bitsandbytes' Linear4bit
 * and Linear8bitLt replace a bias of another dtype than their input's by a
 * copy in the input's, for good, at the first forward; the step finds them
 * and runs again with them recast (vp_step_run_stage). */
typedef struct {
    const struct vp_op *op;
    unsigned spec, copy;
    vp_dtype dtype;
} vp_leaf_recast;

enum { VP_RECASTS_MAX = 64 };

/* Tensors a Python frame keeps as locals, not as autograd saves: the model
 * body's (HF's inputs_embeds, position_embeds) until it returns, before the
 * head; a wrapper's (PEFT's forward) until the outputs come back; a decoder
 * layer's (Gemma 2's sliding-window mask) until the layer returns; a
 * post-norm block's (BertAttention's self_outputs, BertLayer's
 * intermediate_output) until the norm that ends the block returns. */
typedef enum {
    VP_LOCAL_OF_BODY,
    VP_LOCAL_OF_WRAPPER,
    VP_LOCAL_OF_LAYER,
    VP_LOCAL_OF_POST_NORM_BLOCK,
    VP_LOCAL_FRAMES
} vp_local_frame;
enum { VP_LOCALS_MAX = 8 };
/* a checkpointed chunk's router logits: a node's outputs past the hidden states */
enum { VP_CHUNK_ROUTER_MAX = VP_NODE_MAX_OUT - 1 };

/* The router logits of every mixture layer, as the model's outputs keep
 * them with output_router_logits (MoeModelOutputWithPast.router_logits). */
typedef struct {
    vp_t *tensors;
    unsigned n, cap;
} vp_router_logits;

/* A key and a value per layer of the stage, each entry standing for
 * `repeat` layers when folded (tensors NULL: no cache). */
typedef struct {
    vp_t *tensors;
    unsigned *repeat;
} vp_kv_cache;

typedef struct vp_step {
    vp_sim sim;
    vp_ledger ledger;
    const vp_model *model;
    const vp_recipe *recipe;
    const vp_precision *precision;
    const struct vp_optimizer_kind *optimizer;
    vp_stage stage;
    uint64_t batch, seq, tokens;     /* tokens = batch * seq rows */
    uint64_t input_tokens;           /* the batch's own: tokens without prompt tuning's virtual ones */
    uint64_t virtual_tokens;         /* prompt tuning's, put before every sequence */
    uint64_t prefix_tokens;          /* prefix tuning's num_virtual_tokens */
    uint64_t past_tokens;            /* of those, what the running stack's layers see before their own keys
                                      * (an encoder-decoder's encoder: none) */
    unsigned tp;                     /* tensor-parallel ranks */
    unsigned ep;                     /* expert-parallel ranks */
    unsigned etp;                    /* expert-tensor-parallel ranks */
    unsigned cp;                     /* context-parallel ranks: seq is this rank's share */
    bool sp;                         /* sequence parallel: the residual stream is split */
    uint64_t rows;                   /* rows of the residual stream on this rank: tokens, or tokens / tp */
    vp_dtype activation;             /* dtype the residual stream flows in */
    vp_dtype low;                    /* autocast's lower precision (or activation) */
    bool autocast;
    bool fold;                       /* evaluate identical layers once */
    /* tensors the model forward creates once per step */
    vp_t input_ids, labels, position_ids, cos, sin, causal_mask, logits, loss;
    vp_t cos_local, sin_local;       /* Gemma 3's second rotary tables (the sliding layers'), or 0 */
    uint64_t mask_columns;           /* the causal mask's row length (HF's target_length) */
    vp_t layer_mask;                 /* the running layer's own mask (a layer local, borrowed), or 0 */
    unsigned layer_index;            /* the model layer running now (HF's layer_idx) */
    bool layer_slides;               /* it is a sliding layer (it rotates with cos_local, sin_local) */
    vp_t alibi;                      /* BLOOM's [b x heads, 1, s] ALiBi bias */
    /* encoder-decoder models (T5): the encoder's output that cross-attention
     * reads and the outputs' reference to it, the running stack's position
     * bias and the cross-attention's, the batch's attention mask, and the
     * encoder's and decoder's lengths */
    vp_t memory, encoder_output, position_bias, cross_bias, attention_mask;
    vp_t self_mask, cross_mask;      /* the running stack's masks (T5Stack's locals) */
    vp_t prompt_mask;                /* PEFT's attention mask with the virtual tokens' ones (seq2seq prompt tuning) */
    vp_t prompt_labels;              /* PEFT's labels with -100 for the virtual tokens (causal prompt tuning) */
    vp_t bias_table;                 /* the stack's relative_attention_bias (a leaf, borrowed) */
    bool bias_bidirectional;         /* the encoder's buckets (the decoder's are causal) */
    uint64_t source_seq, target_seq;
    vp_t *bridge_leaves;
    uint32_t bridge_first_node, bridge_end_node;
    vp_t tied_weight;                /* the token embedding, for a tied head */
    /* leaves of the forward that the graph keeps with their .grad: the
     * embedding outputs made to require grad (PEFT, checkpointing; an
     * encoder-decoder's shared embedding runs twice) and T5's first
     * cross-attention zero bias under non-reentrant checkpointing */
    vp_t graph_leaves[VP_GRAPH_LEAVES];
    vp_t prompt;                     /* prompt or prefix tuning's table (in the embeddings' leaf array) */
    vp_kv_cache kv_cache;            /* the outputs' key/value cache (kv_cache.h) */
    vp_router_logits router_logits;  /* the outputs' router logits (output_router_logits) */
    /* the router logits a checkpointed chunk returns beside its hidden
     * states (one per layer: router_aux_loss's recipe_problem bounds a chunk), while one runs */
    vp_t chunk_router_logits[VP_CHUNK_ROUTER_MAX];
    bool capture_router_logits;
    /* a non-reentrant checkpoint's rerun: FSDP wraps the checkpointed
     * layer (FSDP(CheckpointWrapper(layer))), so its hooks stay out of it */
    bool frame_rerun;
    vp_t fp8_input, fp8_columnwise;  /* the input an op's FP8 GEMMs quantized, and its saved copy */
    vp_t locals[VP_LOCAL_FRAMES][VP_LOCALS_MAX]; /* vp_step_keep_local's */
    vp_t graph_refs[VP_LOCALS_MAX];  /* vp_step_graph_hold's */
    vp_t rerun_leaves[VP_GRAPH_LEAVES]; /* vp_step_rerun_leaf's */
    /* leaves: one slot array per section instance */
    vp_t *embed_leaves, *final_leaves;
    vp_t *layer_leaves;              /* n_layer_instances x layer slots */
    unsigned n_layer_instances;
    /* torch.autocast's weight cache: casts of leaves, cleared when the
     * autocast region exits */
    vp_cast_entry *casts;
    unsigned n_casts, cap_casts;
    vp_ctx_ref *ctx_refs;            /* vp_step_ctx_hold's, in order */
    unsigned n_ctx_refs, cap_ctx_refs;
    vp_leaf_origin *origins;         /* every leaf vp_layout_create_leaves made */
    unsigned n_origins, cap_origins;
    const vp_leaf_recast *recasts;   /* leaves to make recast (the second run) */
    unsigned n_recasts;
    vp_leaf_recast found[VP_RECASTS_MAX]; /* leaves this run found to recast */
    unsigned n_found;
    unsigned fold_repeat;            /* repetitions the code now running stands for */
    uint64_t gathered_live;          /* bytes of layers' parameters all-gathered now (ZeRO-3, FSDP) */
    vp_chunk *chunks;                /* the forward's layer chunks, in order */
    unsigned n_chunks;
    unsigned *chunk_repeat;          /* how many chunks each entry stands for */
    /* the data-parallel layout */
    vp_shard_plan plan;
    struct vp_layer_hook *hooks;     /* one per layer instance */
    uint64_t root_gather_bytes;      /* FSDP's root unit (embeddings, head) gathered for the step */
    uint64_t host_bytes, host_peak, nvme_bytes; /* per rank, outside the GPU */
    uint64_t offloaded;              /* pinned host bytes the forward's saved tensors were packed into */
    /* LoRA's adapters, by the weight they sit beside */
    struct vp_lora_adapter *adapters;
    unsigned n_adapters, cap_adapters;
    void **scratch;                  /* memory that lives as long as the step */
    unsigned n_scratch, cap_scratch;
} vp_step;

/* The whole ledger-driving evaluation of one steady-state step. */
typedef struct {
    uint64_t params_bytes, buffers_bytes, grads_bytes, master_bytes, optimizer_bytes, comm_bytes;
    uint64_t host_bytes, nvme_bytes; /* per rank: resident, and host's peak with the step's fp32 gradients */
    uint64_t activations_bytes;      /* live at the end of forward beyond the resident state */
    uint64_t resident_bytes;         /* before the step, in the peak's bytes (rounded; exact on the CPU twin) */
    vp_meter rounded, raw;           /* peaks of the step */
    vp_meter rounded_fb, raw_fb;     /* peaks of forward and backward alone (before the optimizer) */
    uint64_t params, trainable_params;
} vp_step_result;

typedef enum {
    VP_STEP_OK = 0,
    VP_STEP_OVERFLOW,
    VP_STEP_NOMEM,
    VP_STEP_UNSUPPORTED, /* a recipe combination the engine does not model */
    VP_STEP_LAYOUT,      /* the parallel layout does not hold together (vp_step_run's message) */
    VP_STEP_INTERNAL,
} vp_step_status;

vp_step_status vp_step_run(const vp_model *model, const vp_recipe *recipe, bool fold, bool record,
                           vp_step_result *result, vp_ledger *ledger_out);

/* The same for one pipeline stage (NULL: the whole model, one micro-batch). */
vp_step_status vp_step_run_stage(const vp_model *model, const vp_recipe *recipe, const vp_stage *stage, bool fold,
                                 bool record, vp_step_result *result, vp_ledger *ledger_out);

/* For VP_STEP_LAYOUT: the message naming the recipe key at fault; model
 * may be NULL (the recipe alone is checked). */
const char *vp_step_layout_problem(const vp_model *model, const vp_recipe *recipe);

#endif
