/* step.c — one steady-state training step (step 2 onward) on one GPU:
 * resident state, forward, loss, backward (with recomputation under
 * activation checkpointing), optimizer step and zero_grad, all on the
 * simulator. Identical layers are evaluated once and folded. */
#include "step.h"
#include "step_private.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "compile_region.h"
#include "layout.h"
#include "finetune.h"
#include "float8.h"
#include "framework.h"
#include "ops.h"
#include "kv_cache.h"
#include "prefix.h"
#include "optimizer.h"
#include "optim_in_backward.h"
#include "update.h"
#include "weight_pass.h"

/* ---- leaves ---- */

/* Layers run in chunks of `per` (one layer without checkpointing). Folding
 * evaluates one chunk for a run of identical chunks; each plan entry has
 * its own layer instances (layer i of an entry uses the entry's instance
 * i mod per, standing for that position in every chunk the entry covers).
 * A stage whose input arrives from another stage holds that input outside
 * its first layer, and a first layer fed by frozen embeddings gets no
 * input gradient, so the first chunk is not like the others: it gets an
 * entry of its own. Chunks do not mix the model's first layers with the
 * others: each kind of layer is planned as a run of its own. */
static unsigned chunk_layers(const vp_step *step) {
    unsigned per = step->recipe->checkpoint_every ? step->recipe->checkpoint_every : 1;
    return per < step->stage.layers ? per : step->stage.layers;
}

/* Plans `layers` layers from `first` as chunks of `per`: entries from
 * the step's n_chunks on; with `lone_first` the run's first chunk is an entry
 * of its own. */
static void plan_run(vp_step *step, unsigned first, unsigned layers, unsigned per, bool lone_first, bool fold,
                     unsigned *instance) {
    vp_step_private *priv = step->priv;
    unsigned n = priv->n_chunks, start = n, left = layers / per, rest = layers % per;
    bool checkpointed = step->recipe->checkpoint_every > 0;
    /* layers-K (torchtitan's ac_freq): layer i is checkpointed alone when
     * i % K == 0, the others run as they are (one layer a chunk) */
    unsigned k = step->recipe->checkpoint_layers;
    while (left) {
        /* without folding, every chunk is its own entry */
        unsigned repeat = !fold ? 1 : (n == start && lone_first && left > 1) ? 1 : left;
        priv->chunks[n] = (vp_chunk){.step = step, .first_layer = first, .layers = per,
                                     .checkpointed = checkpointed && (!k || first % k == 0), .instance = *instance};
        priv->chunk_repeat[n++] = repeat;
        first += per * repeat;
        *instance += per;
        left -= repeat;
    }
    if (rest) {
        priv->chunks[n] = (vp_chunk){.step = step, .first_layer = first, .layers = rest, .checkpointed = checkpointed,
                                     .instance = *instance};
        priv->chunk_repeat[n++] = 1;
        *instance += rest;
    }
    priv->n_chunks = n;
}

static unsigned clamp(unsigned x, unsigned lo, unsigned hi) { return x < lo ? lo : x > hi ? hi : x; }

/* DeepSpeed ZeRO-3 keeps a layer's weights gathered after its forward
 * only within stage3_max_reuse_distance elements of its backward
 * (zero3.h): the layers further from the end than that, plus a margin,
 * keep nothing and stay alike. Where the stage's last layers begin that
 * may keep something (at a chunk boundary); `end` without a coordinator. */
static unsigned coordinated_from(const vp_step *step, unsigned start, unsigned end, unsigned per) {
    uint64_t reach = step->priv->plan.reuse_distance_elements;
    uint64_t layer = vp_section_params(&step->model->section[VP_SECTION_LAYER]);
    /* FSDP2 (framework_fsdp2.c): the last block runs alone, unfolded (it
     * stays gathered, or holds the collectives' slots: layout.c) */
    const vp_shard_plan *plan = &step->priv->plan;
    bool last_alone = plan->keeps_last_block || plan->collective_buffers;
    if (!reach) return last_alone && end - start > per ? start + (end - per - start) / per * per : end;
    uint64_t trailing = layer ? reach / layer + 2 : end - start;
    if (trailing >= end - start) return start;
    unsigned from = end - (unsigned)trailing;
    return start + (from - start) / per * per;
}

/* Runs of alike layers: split where the model's first layers end, where
 * freezing ends and where DeepSpeed's coordinator may keep something. A
 * run's first chunk is unlike the rest when its input comes from another
 * stage or carries no gradient (frozen embeddings or frozen layers before
 * it). */
static bool plan_chunks(vp_step *step) {
    vp_step_private *priv = step->priv;
    unsigned start = step->stage.first_layer, end = start + step->stage.layers, per = chunk_layers(step);
    unsigned a = clamp(step->model->first_layers, start, end);
    /* every-K chunks run across the end of a decoder's first layers
     * (DeepSeek's dense ones), as Megatron's uniform recompute groups K
     * consecutive layers whatever they are: the run splits at the chunk
     * boundary after them instead, and the run before it, whose chunks are
     * not alike, is evaluated unfolded */
    bool mixed = false;
    if (per > 1 && !vp_model_encoder_decoder(step->model) && a > start && a < end && (a - start) % per) {
        a = clamp(start + (a - start + per - 1) / per * per, start, end);
        mixed = true;
    }
    /* every-K chunks run across the end of the frozen layers too: the
     * trained run starts with the chunk that holds the first trained layer */
    unsigned b = clamp(vp_recipe_first_trained_layer(step->recipe, step->model->layers), start, end);
    b = start + (b - start) / per * per;
    unsigned c = coordinated_from(step, start, end, per);
    /* the split points in order */
    unsigned splits[5] = {start, a, b, c, end};
    for (unsigned i = 1; i < 4; i++)
        for (unsigned j = i; j > 1 && splits[j] < splits[j - 1]; j--) {
            unsigned t = splits[j];
            splits[j] = splits[j - 1];
            splits[j - 1] = t;
        }
    unsigned entries = step->stage.layers / per + 12; /* four runs, each with a remainder and a lone first chunk */
    priv->chunks = calloc(entries, sizeof *priv->chunks);
    priv->chunk_repeat = calloc(entries, sizeof *priv->chunk_repeat);
    if (!priv->chunks || !priv->chunk_repeat) return false;
    unsigned instance = 0;
    priv->n_chunks = 0;
    /* the first chunk's input also outlives it where the model body keeps
     * the embeddings as a local (vp_step_keep_local) */
    bool first_unlike = !step->stage.embed || vp_finetune_method_of(step->recipe)->frozen_base ||
                        vp_framework_of(step->recipe)->python_locals || vp_layout_first_prefetches_none(step);
    /* frozen layers under ZeRO-3 or FSDP are released when backward ends,
     * outside any folded stretch: they are evaluated one by one */
    bool released_late = priv->plan.gather || priv->plan.grads == VP_GRADS_UNIT;
    /* Where no layer may stand for another at all: prefix tuning's cache
     * holds a key and a value of every layer, made before the layers run;
     * an encoder-decoder's layers all give gradients to tensors made outside
     * them (the position bias, the encoder's output), and a mixture's router
     * logits all go into one cat whose gradient's views reach each layer,
     * one buffer that a fold would count once per layer; layers that
     * alternate (Gemma 2's sliding and global ones) fold only by chunks that
     * hold whole periods. */
    const vp_model *m = step->model;
    unsigned period = m->facts.layer_period;
    /* layers-K alternates checkpointed and plain layers: evaluated one by one */
    /* target_parameters of some layers only: those layers hold adapters the others do not */
    /* OffloadActivations' stashes (sim.h) let go of what a layer packed or
     * brought back some packs or nodes later, in another layer, and what
     * the forward's stash holds into backward is taken by the last layers:
     * no layer stands for another there either */
    bool foldable = priv->fold && !step->prefix_tokens && !vp_model_encoder_decoder(m) && !m->facts.router_aux_loss &&
                    per % period == 0 && !step->recipe->checkpoint_layers && !vp_lora_params_by_layer(step->recipe) &&
                    !vp_recipe_offload_streams(step->recipe);
    for (unsigned r = 0; r < 4; r++) {
        if (splits[r + 1] <= splits[r]) continue;
        bool lone = splits[r] == start ? first_unlike : splits[r] == b;
        /* the last layers under DeepSpeed ZeRO-3 each keep what they keep */
        bool fold = foldable && !(released_late && splits[r] < b) && splits[r] < c && !(mixed && splits[r] < a);
        plan_run(step, splits[r], splits[r + 1] - splits[r], per, lone, fold, &instance);
    }
    priv->n_layer_instances = instance;
    return true;
}

/* A last pipeline stage without the embeddings still needs the token
 * embedding's weight for a tied head: Megatron keeps a copy there
 * (word_embeddings_for_head), all-reduced with the first stage's. */
static bool needs_embedding_copy(const vp_step *step) {
    return !step->stage.embed && step->stage.final && step->model->facts.tied_head != NULL;
}

static bool setup(vp_step *step) {
    vp_step_private *priv = step->priv;
    const vp_model *m = step->model;
    unsigned layer_slots = vp_model_layer_slots(m);
    priv->embed_leaves = calloc(m->section[VP_SECTION_EMBED].n_slots + 1, sizeof(vp_t));
    priv->final_leaves = calloc(m->section[VP_SECTION_FINAL].n_slots + 1, sizeof(vp_t));
    priv->layer_leaves = calloc((size_t)layer_slots * priv->n_layer_instances + 1, sizeof(vp_t));
    priv->bridge_leaves = calloc(m->section[VP_SECTION_BRIDGE].n_slots + 1, sizeof(vp_t));
    if (!priv->embed_leaves || !priv->final_leaves || !priv->layer_leaves || !priv->bridge_leaves) return false;

    priv->leaves_layer = UINT_MAX;
    step->ledger.place.phase = VP_PHASE_SETUP;
    bool freezing = vp_finetune_method_of(step->recipe)->trains_last_layers;
    unsigned boundary = vp_recipe_first_trained_layer(step->recipe, m->layers);
    const vp_section *embed = &m->section[VP_SECTION_EMBED], *final = &m->section[VP_SECTION_FINAL];
    if (step->stage.embed) {
        vp_layout_create_leaves(step, embed->ops, embed->n_ops, priv->embed_leaves, 1, freezing);
    } else if (needs_embedding_copy(step)) {
        vp_layout_create_leaves(step, embed->ops, 1, priv->embed_leaves, 1, freezing); /* the token embedding alone */
        step->tied_weight = priv->embed_leaves[embed->ops[0].slot];
    }
    if ((step->virtual_tokens || step->prefix_tokens) && step->stage.embed) {
        /* PromptEmbedding (a row per virtual token of each submodule) or
         * PrefixEncoder (num_virtual_tokens rows), beside the model's embeddings */
        uint64_t width = step->prefix_tokens ? vp_prefix_table_width(m) : m->facts.hidden;
        uint64_t rows = (uint64_t)step->recipe->virtual_tokens * (step->prefix_tokens ? 1 : vp_prompt_submodules(m));
        vp_leaf_spec spec = vp_param(rows * width, "prompt_encoder.embedding.weight", VP_MODULE_NONE, 0);
        spec.rows = rows;
        step->prompt = priv->embed_leaves[embed->n_slots] = vp_layout_extra_leaf(step, &spec);
    }
    vp_layout_resident(step, priv->embed_leaves, embed->n_slots + (step->prompt != 0), 1);
    /* double quantization's second level maps its 8-bit codes with one
     * 256-value fp32 table per process (bitsandbytes' quantize_blockwise
     * caches it in name2qmap["dynamic"]), shared by every 4-bit weight */
    if (vp_double_quantizes(step->recipe))
        vp_leaf(&step->sim, 256, VP_FP32, VP_CAT_PARAMS, false, "quant_state.state2.code");
    for (unsigned i = 0; i < priv->n_layer_instances; i++) {
        vp_t *slots = priv->layer_leaves + (size_t)i * layer_slots;
        unsigned repeat = vp_step_instance_repeat(step, i);
        vp_ledger_begin_segment(&step->ledger);
        const vp_section *layer = vp_step_instance_section(step, i);
        bool frozen = vp_step_instance_layer(step, i) < boundary;
        priv->leaves_layer = vp_step_instance_layer(step, i);
        vp_layout_create_leaves(step, layer->ops, layer->n_ops, slots, repeat, frozen);
        priv->leaves_layer = UINT_MAX;
        vp_layout_resident(step, slots, layer_slots, repeat);
        vp_ledger_repeat_segment(&step->ledger, repeat, 0);
    }
    const vp_section *bridge = &m->section[VP_SECTION_BRIDGE];
    if (bridge->n_ops) { /* encoder-decoders run on one stage (vp_step_layout_problem) */
        bool frozen = freezing && boundary > m->first_layers;
        vp_layout_create_leaves(step, bridge->ops, bridge->n_ops, priv->bridge_leaves, 1, frozen);
        vp_layout_resident(step, priv->bridge_leaves, bridge->n_slots, 1);
    }
    if (step->stage.final) {
        vp_layout_create_leaves(step, final->ops, final->n_ops, priv->final_leaves, 1, false);
        vp_layout_resident(step, priv->final_leaves, final->n_slots, 1);
    }
    /* cuBLAS's workspaces, one per (thread, stream), made by the first step
     * and kept (CublasHandlePool.cpp; estimate.c says when) */
    for (unsigned i = 0; i < step->stage.cublas_workspaces; i++)
        vp_ledger_alloc(&step->ledger, VP_CAT_WORKSPACE, step->stage.cublas_workspace_bytes, "cublas workspace");
    return vp_layout_prepare(step);
}

/* ---- forward ---- */

static void prepare_ops(vp_step *step, const vp_op *ops, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind->prepare) ops[i].kind->prepare(step, &ops[i]);
        prepare_ops(step, ops[i].children, ops[i].n_children);
    }
}

static vp_t layers_forward(vp_step *step, const vp_chunk *chunk, vp_t x) {
    vp_t current = x;
    vp_hold(&step->sim, x);
    for (unsigned j = 0; j < chunk->layers; j++) {
        unsigned index = chunk->first_layer + j;
        step->ledger.place.layer = (int)index + step->sim.layer_offset;
        step->layer_index = index;
        vp_t in = vp_layout_layer_start(step, current, index);
        vp_drop(&step->sim, current);
        const vp_section *layer = vp_model_layer_section(step->model, index);
        uint32_t first_node = step->sim.n_nodes;
        vp_t first_tensor = step->sim.n_tensors;
        /* a compiled block's float8 casts are fused (docs/compile.md) */
        step->sim.fused_casts = step->recipe->compile;
        vp_t out = vp_run_ops(step, layer->ops, layer->n_ops, vp_step_layer_leaves(step, index), in);
        step->sim.fused_casts = false;
        vp_step_layer_returns(step); /* its locals go */
        /* a compiled block keeps what the partitioner's cut saves; under a
         * checkpoint (full, op-selective) the compiled block saves what the
         * eager checkpoint keeps (docs/compile.md) */
        if (step->recipe->compile && !chunk->checkpointed)
            vp_compile_region(&step->sim, first_node, step->sim.n_nodes, first_tensor);
        vp_drop(&step->sim, in);
        current = vp_layout_layer_end(step, out, index);
        vp_drop(&step->sim, out);
    }
    return current;
}

/* HF's gradient checkpointing of a chunk (transformers 4.46-4.52): its
 * layers rerun on the chunk's input (checkpoint_forward: what else the call
 * passes). */
static vp_t recompute_chunk(vp_step *step, void *ctx, const vp_t *inputs) {
    /* MixtralDecoderLayer returns its router logits too: the chunk's
     * further results (output_router_logits) */
    step->priv->capture_router_logits = true;
    vp_t y = layers_forward(step, ctx, inputs[0]);
    step->priv->capture_router_logits = false;
    return y;
}

/* torch.utils.checkpoint(..., use_reentrant=...) of a chunk's layers. */
static vp_t call_checkpoint(vp_step *step, vp_chunk *chunk, const vp_t *inputs, unsigned n,
                            const vp_checkpoint_args *args) {
    const vp_recipe *r = step->recipe;
    if (r->use_reentrant) return vp_checkpoint(step, recompute_chunk, chunk, inputs, n, args);
    return vp_checkpoint_nonreentrant(step, recompute_chunk, chunk, inputs, n, args, vp_recipe_checkpoint_early_stop(r));
}

/* The chunk's layer call: its input, and the tensor table's by their roles
 * in the order of the call's arguments (step_tensors.h): BloomBlock's (x,
 * alibi, causal_mask), LlamaDecoderLayer's (x, the mask, position_ids and
 * cache_position: a view and its base, one storage, two saved tensors; the
 * (cos, sin) tuple, which ctx holds as it is; Gemma3TextModel's call passes
 * both pairs of tables), GPT-2's and BERT's (x, the attention mask when
 * there is one), T5Block's (x, the mask, the position bias, the encoder's
 * output, its mask, the cross-attention's bias, cache_position: every
 * tensor saved; the biases, from the stack's second layer on, and the
 * encoder's output need gradients, and T5Block returns the biases for the
 * next layer's call). */
static vp_t checkpoint_forward(vp_step *step, vp_chunk *chunk, vp_t x) {
    vp_layer_call call;
    if (!vp_step_layer_call(step, x, chunk->first_layer, &call)) step->sim.status = VP_SIM_LIMIT; /* an op-table bug */
    vp_checkpoint_args args = {.saved = call.saved, .n_saved = call.n_saved, .held = call.held, .n_held = call.n_held,
                               .input_fields = call.input_fields, .outputs = call.outputs,
                               .n_outputs = call.n_outputs};
    vp_t y = call_checkpoint(step, chunk, call.inputs, call.n_inputs, &args);
    /* the model collects them into its outputs */
    for (unsigned i = 0; i < VP_CHUNK_ROUTER_MAX; i++) {
        vp_t logits = step->priv->chunk_router_logits[i];
        step->priv->chunk_router_logits[i] = 0;
        if (!logits) continue;
        vp_step_keep_router_logits(step, logits);
        vp_drop(&step->sim, logits);
    }
    return y;
}

static vp_t chunk_forward(vp_step *step, vp_chunk *chunk, vp_t x) {
    chunk->first_node = step->sim.n_nodes;
    chunk->first_tensor = step->sim.n_tensors;
    chunk->input = x;
    vp_t y = chunk->checkpointed ? checkpoint_forward(step, chunk, x) : layers_forward(step, chunk, x);
    chunk->end_node = step->sim.n_nodes;
    chunk->output = y;
    return y;
}

static vp_t run_section(vp_step *step, vp_section_id id, const vp_t *leaves, vp_t x);

static vp_t forward_layers(vp_step *step, vp_t x) {
    vp_t current = x;
    bool bridge = vp_model_encoder_decoder(step->model);
    for (unsigned i = 0; i < step->priv->n_chunks; i++) {
        vp_chunk *chunk = &step->priv->chunks[i];
        unsigned repeat = step->priv->chunk_repeat[i];
        if (bridge && chunk->first_layer == step->model->first_layers) {
            /* the encoder returns, the decoder begins */
            step->ledger.place.layer = -1;
            step->priv->bridge_first_node = step->sim.n_nodes;
            vp_t next = run_section(step, VP_SECTION_BRIDGE, step->priv->bridge_leaves, current);
            vp_drop(&step->sim, current);
            current = next;
            step->priv->bridge_end_node = step->sim.n_nodes;
        }
        vp_ledger_begin_segment(&step->ledger);
        step->priv->fold_repeat = repeat;
        vp_t next = chunk_forward(step, chunk, current);
        /* Folding takes the chunk's run as alike, each chunk handing the
         * next a stream like the one it took. A block that changes its
         * stream (Mamba's residual_in_fp32: a 16-bit embedding in, fp32
         * out) makes the first chunk unlike the rest: the step is then
         * evaluated unfolded (vp_step_run_stage). */
        if (repeat > 1 && current && next && vp_at(&step->sim, current)->bytes != vp_at(&step->sim, next)->bytes)
            step->priv->fold_unalike = true;
        vp_drop(&step->sim, current);
        current = next;
        vp_ledger_repeat_segment(&step->ledger, repeat, (int)chunk->layers);
        step->priv->fold_repeat = 1;
    }
    step->ledger.place.layer = -1;
    return current;
}

static bool is_loss_op(const vp_op *op) { return (op->kind->roles & VP_ROLE_LOSS) != 0; }

/* The head's ops run outside the model body (XForCausalLM.forward calls
 * self.model, then lm_head and the loss). */
static bool is_head_op(const vp_op *op) { return (op->kind->roles & VP_ROLE_HEAD) != 0; }

/* The model body returns: its locals go, and with them the tensors it made
 * once for all layers (position ids, rotary tables, the mask). Megatron's
 * GPTModel runs the head inside the same forward: they go at its end. */
static void body_returns(vp_step *step, bool forward_ends) {
    vp_step_drop_locals(step, VP_LOCAL_OF_BODY);
    if (vp_framework_of(step->recipe)->head_in_forward && !forward_ends) return;
    vp_step_end_lifetime(step, VP_LIVES_BODY);
    vp_step_end_lifetime(step, VP_LIVES_STACK);
}

static bool is_embedding_op(const vp_op *op) { return (op->kind->roles & VP_ROLE_EMBEDDING) != 0; }

static vp_t run_section(vp_step *step, vp_section_id id, const vp_t *leaves, vp_t x) {
    const vp_section *section = &step->model->section[id];
    /* under sequence parallelism the embeddings are scattered along the
     * sequence before anything else touches them (Megatron's embedding:
     * scatter_to_sequence_parallel_region, then dropout) */
    unsigned scatter_after = section->n_ops;
    if (step->sp && id == VP_SECTION_EMBED)
        for (unsigned i = 0; i < section->n_ops; i++)
            if (is_embedding_op(&section->ops[i])) scatter_after = i;
    vp_t current = x;
    bool in_body = id == VP_SECTION_FINAL;
    /* the final section takes x over: the last layer's output, which the
     * body keeps (layer_outputs[0]) until it returns, before the head */
    if (in_body) vp_step_keep_local(step, x, VP_LOCAL_OF_BODY);
    else vp_hold(&step->sim, x);
    for (unsigned i = 0; i < section->n_ops; i++) {
        const vp_op *op = &section->ops[i];
        if (in_body && is_head_op(op)) {
            body_returns(step, false);
            /* `hidden_states = outputs[0]`: the head's caller keeps it */
            vp_step_keep_local(step, current, VP_LOCAL_OF_WRAPPER);
            in_body = false;
        }
        if (is_loss_op(op)) step->ledger.place.phase = VP_PHASE_LOSS;
        vp_t next = op->kind->forward(step, op, leaves + op->slot, current);
        vp_drop(&step->sim, current);
        current = next;
        vp_step_clear_fp8(step);
        if (i == scatter_after) {
            /* DTensor's RowwiseParallel(output_layouts=Shard(1)) goes
             * through funcol (its cat); the embedding runs eagerly */
            next = vp_framework_of(step->recipe)->dtensor_tp
                       ? vp_funcol_reduce_scatter(&step->sim, current, step->tp, 0, "embeddings.scatter")
                       : vp_scatter(&step->sim, current, step->tp, "embeddings.scatter");
            vp_drop(&step->sim, current);
            current = next;
        }
    }
    return current;
}

/* ---- backward ---- */

/* While one chunk's backward stands for several, tensors it did not create
 * (cos and sin, the mask, parameters) must outlive every repetition: the
 * real chunks all hold them, so they are held here until the fold ends.
 * (Through its last repetition too, where the real chunk lets them go as
 * its nodes do: the once-per-step tables, over-held for one layer.) */
static unsigned pin_externals(vp_step *step, const vp_chunk *chunk, vp_t **pins) {
    vp_sim *sim = &step->sim;
    unsigned n = 0, cap = 0;
    *pins = NULL;
    for (uint32_t i = chunk->first_node; i < chunk->end_node; i++) {
        vp_node *node = vp_node_at(sim, i);
        for (unsigned j = 0; j < VP_NODE_MAX_SAVED; j++) {
            vp_t t = node->saved[j];
            /* the chunk's input is its own: each real chunk frees its input;
             * a packed one is on the host */
            if (!t || t >= chunk->first_tensor || t == chunk->input || (node->packed & (1u << j))) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                vp_t *grown = realloc(*pins, cap * sizeof *grown);
                if (!grown) {
                    sim->status = VP_SIM_NOMEM;
                    return n;
                }
                *pins = grown;
            }
            vp_hold(sim, t);
            (*pins)[n++] = t;
        }
    }
    return n;
}

static void backward_layers(vp_step *step) {
    vp_step_private *priv = step->priv;
    vp_sim *sim = &step->sim;
    bool bridge = vp_model_encoder_decoder(step->model);
    for (unsigned i = priv->n_chunks; i-- > 0;) {
        vp_chunk *chunk = &priv->chunks[i];
        unsigned repeat = priv->chunk_repeat[i];
        if (bridge && i + 1 < priv->n_chunks && priv->chunks[i + 1].first_layer == step->model->first_layers) {
            step->ledger.place.layer = -1;
            vp_backward(sim, priv->bridge_first_node, priv->bridge_end_node);
            /* the encoder's layers (recomputed ones) run on the inputs' length */
            step->seq = step->source_seq;
            step->past_tokens = 0;
            step->tokens = step->rows = vp_numel(sim, step->batch, step->seq);
        }
        /* a chunk that stands for itself lets them go as its own nodes do */
        vp_t *pins = NULL;
        unsigned n_pins = repeat > 1 ? pin_externals(step, chunk, &pins) : 0;
        sim->layer_offset = (int)((repeat - 1) * chunk->layers);
        vp_ledger_begin_segment(&step->ledger);
        vp_t arriving = repeat > 1 && chunk->output ? vp_at(sim, chunk->output)->grad : 0;
        vp_backward(sim, chunk->first_node, chunk->end_node);
        /* Folding takes each chunk's backward as alike too: the gradient it
         * hands on like the one it took. One that arrives charged otherwise
         * (made in forward: Liger's in-place RMSNorm hands on the gradient
         * a fused linear cross-entropy made there) leaves the first chunk
         * unlike the rest: the step is evaluated unfolded. */
        vp_t leaving = arriving && chunk->input ? vp_at(sim, chunk->input)->grad : 0;
        if (leaving && (vp_at(sim, arriving)->category != vp_at(sim, leaving)->category ||
                        vp_at(sim, arriving)->bytes != vp_at(sim, leaving)->bytes))
            priv->fold_unalike = true;
        vp_ledger_repeat_segment(&step->ledger, repeat, -(int)chunk->layers);
        sim->layer_offset = 0;
        for (unsigned p = 0; p < n_pins; p++) vp_drop(sim, pins[p]);
        free(pins);
    }
    step->ledger.place.layer = -1;
}

/* ---- the step ---- */

/* The gradients a rank keeps for the optimizer: whole, or its shard. */
static uint64_t kept_grad_bytes(vp_step *step) {
    vp_step_private *priv = step->priv;
    uint64_t total = 0;
    /* stepped in backward, each gradient went with its hook */
    if (step->recipe->optimizer_in_backward) return 0;
    /* an offloaded optimizer keeps the gradient partition in host memory */
    if (priv->plan.grads == VP_GRADS_BUCKET && (priv->plan.states_on_host || priv->plan.states_on_nvme)) return 0;
    if (priv->plan.grads_on_host) return 0; /* FSDP2's CPUOffloadPolicy */
    bool sharded = priv->plan.grads != VP_GRADS_KEEP && !priv->plan.bucket_bytes_per_param_byte;
    vp_dtype dtype = sharded ? priv->plan.shard_grads_dtype : priv->plan.grads_dtype;
    for (unsigned g = 0; g < vp_step_leaf_group_count(step); g++) {
        vp_leaf_group group = vp_step_leaf_group_at(step, g);
        for (unsigned i = 0; i < group.n; i++) {
            vp_t t = group.leaves[i];
            uint64_t bytes;
            if (!t || !vp_at(&step->sim, t)->requires_grad) continue;
            const vp_tensor *x = vp_at(&step->sim, t);
            uint64_t numel = x->numel;
            if (sharded) numel = vp_layout_shard_numel(step, x, vp_plan_shards(&priv->plan, x->expert)->grads);
            /* a whole gradient is in its parameter's own dtype (LoRA's fp32 adapters) */
            vp_dtype own = sharded || priv->plan.grads == VP_GRADS_BUCKET ? dtype : (vp_dtype)x->grad_dtype;
            if (vp_tensor_bytes(own, numel, &bytes)) total += bytes * group.repeat;
        }
    }
    return total;
}

/* `reuse` (or NULL) keeps the simulator's arrays for the next evaluation. */
static void free_step(vp_step *step, vp_sim_arrays *reuse) {
    vp_step_private *priv = step->priv;
    for (unsigned i = 0; i < priv->n_scratch; i++) free(priv->scratch[i]);
    free(priv->scratch);
    if (reuse) vp_sim_keep(&step->sim, reuse);
    else vp_sim_free(&step->sim);
    free(priv->embed_leaves);
    free(priv->final_leaves);
    free(priv->layer_leaves);
    free(priv->bridge_leaves);
    free(priv->casts);
    free(priv->ctx_refs);
    free(priv->origins);
    free(priv->chunks);
    free(priv->chunk_repeat);
    free(priv->hooks);
    free(priv->adapters);
    free(step->router_logits.tensors);
}

static vp_step_status status_of(const vp_step *step) {
    if (step->sim.status == VP_SIM_NOMEM) return VP_STEP_NOMEM;
    if (step->sim.status == VP_SIM_LIMIT) return VP_STEP_LIMIT;
    if (step->sim.status == VP_SIM_OVERFLOW || step->ledger.overflow) return VP_STEP_OVERFLOW;
    return VP_STEP_OK;
}

/* save_on_cpu's pack: a pinned host tensor from PyTorch's caching host
 * allocator, which rounds every request up to a power of two
 * (c10/cuda/CachingHostAllocator: PowerOf2Ceil) and keeps freed blocks for
 * reuse, so the forward's peak stays reserved. */
static void offload_pack(void *ctx, uint64_t bytes) {
    vp_step *step = ctx;
    uint64_t block = 1;
    while (block < bytes && block) block <<= 1;
    if (!block || !bytes) block = bytes; /* beyond 2^63: left as asked */
    step->priv->offloaded += block * step->priv->fold_repeat;
}

/* The model's width: what flows between pipeline stages. */
static uint64_t hidden_size(const vp_model *m) {
    return m->facts.hidden;
}

/* torch.distributed.pipelining's last stage: the schedule, not the loop,
 * holds the model's output. Its PipelineStage keeps the output in fwd_cache
 * until backward_one_chunk pops it, and that frame keeps it through the
 * backward (torch/distributed/pipelining/stage.py, torch 2.5-2.9), whatever
 * the loop does with logits; with step(return_outputs=True) forward_one_chunk
 * also appends it to output_chunks, kept until the next step's
 * clear_runtime_states. */
static bool schedule_holds_outputs(const vp_step *step) {
    /* (a model that returns its loss alone, as Megatron's does, leaves no logits to hold) */
    return step->stage.final && vp_pp_torch(step->recipe) && step->recipe->pp > 1 &&
           !vp_framework_of(step->recipe)->returns_loss_only;
}

static bool keeps_every_output(const vp_step *step) {
    return schedule_holds_outputs(step) && step->recipe->pp_return_outputs;
}

/* the loop keeps the model's outputs (and with them the graph) through
 * backward: HF's Trainer does not, nor Megatron's forward step, which
 * returns the loss alone */
static bool loop_keeps_outputs(const vp_step *step) {
    return step->recipe->keep_logits && !vp_framework_of(step->recipe)->returns_loss_only;
}

/* the loop (or the schedule) holds the outputs through backward */
static bool outputs_through_backward(const vp_step *step) {
    return schedule_holds_outputs(step) || loop_keeps_outputs(step);
}

/* The model's outputs go: the logits, the cache and the router logits the
 * outputs object holds. */
static void release_outputs(vp_step *step) {
    vp_step_end_lifetime(step, VP_LIVES_OUTPUTS);
    vp_kv_cache_release(step, &step->kv_cache); /* the outputs' past_key_values */
    vp_step_release_router_logits(&step->sim, &step->router_logits);
}

/* A 16-bit output's fp32 copy; 0 for a tensor of another dtype. */
static vp_t fp32_copy(vp_sim *sim, vp_t t, const char *label) {
    if (!t) return 0;
    return vp_dtype_is_half((vp_dtype)vp_at(sim, t)->dtype) ? vp_to(sim, t, VP_FP32, label) : 0;
}

/* accelerate's ConvertOutputsToFp32 (accelerate/utils/operations.py) as the
 * forward it prepared returns: convert_to_fp32 rebuilds the outputs with
 * each fp16 / bf16 tensor's .float() in its place, in the outputs' order
 * (logits, past_key_values when they are tuples, an encoder's last hidden
 * state, router_logits), and the old outputs object, with the 16-bit
 * tensors only it held, goes once the new one is made. The loss is fp32
 * already: autocast runs the losses' ops (log_softmax, nll_loss, mse_loss)
 * in fp32, and the fused kernels return fp32 losses. */
static void outputs_to_fp32(vp_step *step) {
    vp_sim *sim = &step->sim;
    const vp_tensor_slot slots[] = {VP_TENSOR_LOGITS, VP_TENSOR_ENCODER_OUTPUT};
    enum { SLOTS = sizeof slots / sizeof *slots };
    vp_t old[SLOTS], copy[SLOTS];
    for (unsigned i = 0; i < SLOTS; i++) old[i] = vp_step_tensor(step, slots[i]);
    copy[0] = fp32_copy(sim, old[0], "accelerate.convert_to_fp32.logits");
    bool tuples = vp_kv_cache_in_tuples(step);
    vp_kv_cache cache = tuples ? vp_kv_cache_to_fp32(step, &step->kv_cache) : (vp_kv_cache){0};
    copy[1] = fp32_copy(sim, old[1], "accelerate.convert_to_fp32.encoder_output");
    vp_router_logits *router = &step->router_logits;
    vp_t *router_copies = router->n ? vp_step_scratch(step, router->n * sizeof *router_copies) : NULL;
    if (router->n && !router_copies) {
        sim->status = VP_SIM_NOMEM;
        return;
    }
    for (unsigned i = 0; i < router->n; i++)
        router_copies[i] = fp32_copy(sim, router->tensors[i], "accelerate.convert_to_fp32.router_logits");
    /* the new outputs in place of the old, which let go of theirs */
    for (unsigned i = 0; i < SLOTS; i++) {
        if (!copy[i]) continue;
        vp_hold(sim, old[i]); /* the old outputs object's, until it goes */
        vp_step_put_tensor(step, slots[i], copy[i]);
    }
    if (tuples) {
        vp_kv_cache_release(step, &step->kv_cache);
        step->kv_cache = cache;
    }
    for (unsigned i = 0; i < router->n; i++) {
        if (!router_copies[i]) continue;
        vp_drop(sim, router->tensors[i]);
        router->tensors[i] = router_copies[i];
    }
    for (unsigned i = 0; i < SLOTS; i++)
        if (copy[i]) vp_drop(sim, old[i]);
}

/* One micro-batch through the stage: its inputs arrive (the batch on the
 * first stage, the previous stage's activations otherwise), forward, loss
 * or send, backward from the loss or from the gradient the next stage sends. */
/* Whether the training process imports bitsandbytes: a 4-bit or 8-bit
 * base (QLoRA) or one of its optimizers. */
static bool bitsandbytes_imported(const vp_recipe *recipe) {
    const vp_optimizer_kind *optimizer = vp_optimizer_at(recipe->optimizer);
    return vp_finetune_method_of(recipe)->quantizes_base || (optimizer && optimizer->bitsandbytes);
}

static uint64_t micro_batch(vp_step *step, const vp_meter *resident, const vp_meter *resident_raw) {
    vp_step_private *priv = step->priv;
    vp_sim *sim = &step->sim;
    vp_ledger *ledger = &step->ledger;
    const vp_model *m = step->model;
    uint64_t width = vp_numel(sim, step->rows, hidden_size(m));

    ledger->place.phase = VP_PHASE_FORWARD;
    sim->category = VP_CAT_ACTIVATIONS;
    sim->n_nodes = 0;
    sim->n_holders = 0;
    /* an encoder-decoder's encoder runs on the inputs' length, its decoder
     * on the labels' (the bridge switches) */
    bool encoder_decoder = vp_model_encoder_decoder(m);
    if (encoder_decoder) {
        step->seq = step->source_seq;
        step->past_tokens = 0;
        step->tokens = step->rows = vp_numel(sim, step->batch, step->seq);
        step->input_tokens = vp_numel(sim, step->batch, step->seq - step->virtual_tokens);
    }
    /* `for batch in loader`: the next batch arrives, then the last one goes */
    vp_t old_ids = priv->input_ids, old_labels = priv->labels, old_mask = priv->attention_mask;
    vp_t old_types = priv->token_type_ids;
    priv->input_ids = priv->labels = priv->attention_mask = priv->token_type_ids = 0;
    if (step->stage.embed) priv->input_ids = vp_new(sim, step->input_tokens, VP_INT64, "batch.input_ids");
    /* the tokenizer's attention_mask, which seq2seq batches carry, and
     * PaliGemmaProcessor's with its token_type_ids (suffix = labels) */
    if (encoder_decoder || m->facts.token_type_ids)
        priv->attention_mask = vp_new(sim, step->input_tokens, VP_INT64, "batch.attention_mask");
    if (m->facts.token_type_ids) priv->token_type_ids = vp_new(sim, step->input_tokens, VP_INT64, "batch.token_type_ids");
    /* the batch's labels (prompt tuning's virtual tokens get theirs in PEFT's forward) */
    if (step->stage.final) {
        uint64_t labels = step->model->facts.loss_per_sequence ? step->batch
                          : encoder_decoder                    ? vp_numel(sim, step->batch, step->target_seq)
                                                               : step->input_tokens;
        priv->labels = vp_new(sim, labels, VP_INT64, "batch.labels");
    }
    vp_drop(sim, old_ids);
    vp_drop(sim, old_labels);
    vp_drop(sim, old_mask);
    vp_drop(sim, old_types);
    /* `with save_on_cpu(pin_memory=True): out = model(batch)`, or torchtune's
     * `with OffloadActivations(): logits = model(...)` (min_offload_size 1024
     * bytes, parameters and buffers kept; off again around the head: op_head.c) */
    if (step->recipe->offload_activations) {
        sim->pack = offload_pack;
        sim->pack_ctx = step;
        sim->pack_skips_params = step->recipe->offload_torchtune;
        sim->pack_min_bytes = step->recipe->offload_torchtune ? 1024 : 0;
        sim->pack_keeps_strides = step->recipe->offload_torchtune;
        sim->stash.window = vp_recipe_offload_streams(step->recipe) ? VP_OFFLOAD_WINDOW : 0;
        /* TRL's copy: the storage keys live while its stash keeps them,
         * so a single stream tracks none (`track_storage_key` only there);
         * the parameters' storages are those of the model it was given,
         * which DeepSpeed and FSDP flatten or gather into others */
        bool trl = step->recipe->offload_torchtune && step->recipe->offload_trl;
        sim->pack_dedups = trl && sim->stash.window;
        sim->pack_skips_param_views = trl && step->recipe->framework == VP_FRAMEWORK_TORCH;
        sim->pack_copies_views = trl;
        sim->pack_clones_views = trl && step->recipe->offload_clone_views;
        /* TRL's OffloadActivations.__enter__, around each training_step:
         * torch.cuda.empty_cache() when bitsandbytes is imported (QLoRA's
         * base, its optimizers), trl/models/activation_offloading.py */
        if (trl && bitsandbytes_imported(step->recipe)) vp_ledger_empty_cache(ledger, "offload.empty_cache");
    }
    vp_t old_loss = priv->loss, old_outputs[VP_TENSOR_SLOTS], old_graph_leaves[VP_GRAPH_LEAVES];
    memcpy(old_graph_leaves, priv->graph_leaves, sizeof old_graph_leaves);
    memset(priv->graph_leaves, 0, sizeof priv->graph_leaves);
    vp_step_take_tensors(step, VP_LIVES_OUTPUTS, old_outputs);
    vp_kv_cache old_cache = step->kv_cache;
    vp_router_logits old_router = step->router_logits;
    vp_t old_graph[VP_LOCALS_MAX];
    memcpy(old_graph, priv->graph_refs, sizeof old_graph);
    unsigned old_ctx = priv->n_ctx_refs;
    memset(priv->graph_refs, 0, sizeof priv->graph_refs);
    priv->loss = 0;
    step->kv_cache = (vp_kv_cache){0};
    step->router_logits = (vp_router_logits){0};
    if (!m->facts.no_position_ids)
        vp_step_put_tensor(step, VP_TENSOR_POSITION_IDS, vp_new(sim, step->seq, VP_INT64, "position_ids"));
    for (int s = 0; s < VP_SECTION_COUNT; s++) prepare_ops(step, m->section[s].ops, m->section[s].n_ops);

    uint32_t forward_first = sim->n_nodes;
    vp_layout_forward_begin(step);
    /* the cache the model fills (PEFT's get_prompt fills the prefix's first) */
    if (vp_kv_cache_wanted(step)) vp_kv_cache_begin(step);
    if (step->prefix_tokens) vp_prefix_begin(step);
    vp_t x, received = 0;
    priv->boundary_bytes = vp_bytes_of(step->activation, width);
    if (step->stage.embed) {
        x = run_section(step, VP_SECTION_EMBED, priv->embed_leaves, priv->input_ids);
    } else { /* p2p: the previous stage's output, whose gradient goes back to it */
        received = vp_leaf(sim, width, step->activation, VP_CAT_ACTIVATIONS, true, "pipeline.recv");
        vp_at(sim, received)->grad_category = VP_CAT_TRANSIENT;
        vp_at(sim, received)->leaf = true;
        x = received;
        vp_hold(sim, x);
    }
    uint32_t embed_end = sim->n_nodes;
    vp_t path_start = x;
    vp_t y = forward_layers(step, x);
    uint32_t final_first = sim->n_nodes;
    uint64_t before_head = step->recipe->device == VP_DEVICE_CPU ? ledger->raw.total : ledger->rounded.total;
    vp_t sent = 0;
    if (step->stage.final) {
        priv->loss = run_section(step, VP_SECTION_FINAL, priv->final_leaves, y); /* takes y over */
        priv->loss = vp_branch_join_loss(step, priv->loss); /* a multi-token prediction module's */
    } else { /* p2p send, then Megatron's deallocate_output_tensor frees it */
        sent = y;
        vp_drop(sim, y);
    }
    uint32_t final_end = sim->n_nodes;
    /* the head's and the loss's share of the stage's activations (an
     * interleaved schedule holds it for fewer micro-batches than the
     * layers', estimate.c) */
    uint64_t after_head = step->recipe->device == VP_DEVICE_CPU ? ledger->raw.total : ledger->rounded.total;
    priv->head_activations_bytes = after_head > before_head ? after_head - before_head : 0;
    if (vp_pp_splits_backward(step->recipe)) {
        if (!vp_weight_pass_bytes(step, forward_first, final_first, final_end, path_start, &priv->weight_pass_bytes,
                                  &priv->head_weight_pass_bytes))
            sim->status = VP_SIM_NOMEM;
    }
    /* the model's forward returns: its autocast region and locals end */
    sim->pack = NULL;
    if (priv->host_bytes + priv->offloaded > priv->host_peak) priv->host_peak = priv->host_bytes + priv->offloaded;
    vp_step_clear_casts(step, 0);
    body_returns(step, true);
    vp_step_drop_locals(step, VP_LOCAL_OF_WRAPPER);
    vp_step_end_lifetime(step, VP_LIVES_WRAPPER);
    /* accelerate wraps the forward FSDP2's hooks run around */
    if (step->recipe->outputs_fp32) outputs_to_fp32(step);
    vp_layout_forward_end(step);
    /* Megatron's forward step returns the loss alone */
    if (!outputs_through_backward(step)) release_outputs(step);
    /* `out = model(batch)` rebinds: the last micro-batch's outputs go now */
    vp_drop(sim, old_loss);
    vp_step_drop_refs(sim, old_graph); /* the last micro-batch's graph goes with its loss */
    vp_step_release_old_ctx(step, old_ctx);
    if (keeps_every_output(step)) /* in output_chunks to the step's end */
        memcpy(priv->kept_outputs, old_outputs, sizeof old_outputs);
    else
        vp_step_drop_taken(sim, old_outputs);
    vp_kv_cache_release(step, &old_cache);
    vp_step_release_router_logits(sim, &old_router);
    free(old_router.tensors);
    vp_step_drop_leaves(sim, old_graph_leaves);
    uint64_t activations = step->recipe->device == VP_DEVICE_CPU ? ledger->raw.total - resident_raw->total
                                                                 : ledger->rounded.total - resident->total;
    /* a pipeline stage under FSDP2 keeps its blocks gathered and their
     * gradients accumulated across micro-batches (plan.defers_reduce): they
     * are no micro-batch's activations, which the other micro-batches in
     * flight repeat (estimate.c) */
    if (priv->plan.defers_reduce) {
        const vp_meter *now = step->recipe->device == VP_DEVICE_CPU ? &ledger->raw : &ledger->rounded;
        const vp_meter *was = step->recipe->device == VP_DEVICE_CPU ? resident_raw : resident;
        const vp_category held[] = {VP_CAT_PARAMS, VP_CAT_COMM, VP_CAT_GRADS};
        for (unsigned i = 0; i < sizeof held / sizeof *held; i++)
            activations -= now->current[held[i]] - was->current[held[i]];
    }

    /* backward: loss.backward(), or backward from the received gradient */
    ledger->place.phase = VP_PHASE_BACKWARD;
    sim->category = VP_CAT_TRANSIENT;
    vp_t seed_from = step->stage.final ? priv->loss : sent;
    if (seed_from && vp_at(sim, seed_from)->requires_grad) {
        vp_t seed = step->stage.final ? vp_new(sim, 1, (vp_dtype)vp_at(sim, seed_from)->dtype, "loss.backward")
                                      : vp_new(sim, width, step->activation, "pipeline.recv_grad");
        vp_at(sim, seed_from)->grad = seed;
        vp_layout_backward_begin(step);
        /* one graph task: a leaf used before and after the layers (a tied
         * embedding) waits for both */
        vp_backward_task(sim, 0, sim->n_nodes);
        vp_backward(sim, final_first, final_end);
        backward_layers(step);
        ledger->place.phase = VP_PHASE_BACKWARD;
        vp_backward(sim, 0, embed_end);
        vp_backward_task_end(sim);
        vp_layout_backward_end(step);
        vp_offload_stash_flush(sim); /* queued after FSDP's final callback, at the first unpack */
    }
    priv->offloaded = 0; /* backward unpacked and released them all */
    /* HF's Trainer returns loss.detach(): the graph goes after backward,
     * with the leaves its AccumulateGrad nodes hold and their .grad */
    /* backward_one_chunk returns: without output_chunks nothing holds the output */
    if (schedule_holds_outputs(step) && !keeps_every_output(step)) release_outputs(step);
    if (!loop_keeps_outputs(step)) {
        vp_step_drop_refs(sim, priv->graph_refs);
        vp_step_release_ctx(step, 0);
        vp_step_drop_leaves(sim, priv->graph_leaves);
    }
    if (received) { /* its gradient is sent to the previous stage */
        vp_t g = vp_at(sim, received)->param_grad;
        vp_at(sim, received)->param_grad = 0;
        vp_drop(sim, g);
        vp_drop(sim, received);
    }
    return activations;
}

static void run(vp_step *step, vp_step_result *result) {
    vp_sim *sim = &step->sim;
    vp_ledger *ledger = &step->ledger;
    const vp_model *m = step->model;

    if (!plan_chunks(step) || !setup(step)) {
        sim->status = VP_SIM_NOMEM;
        return;
    }
    vp_optim_in_backward_arm(step);
    vp_meter resident = ledger->rounded;
    vp_meter resident_raw = ledger->raw; /* component figures are exact tensor bytes */
    /* in the bytes the peak is counted in: the CPU twin's are exact */
    result->resident_bytes = step->recipe->device == VP_DEVICE_CPU ? resident_raw.total : resident.total;

    step->priv->final_micro_batch = step->stage.microbatches == 1;
    result->activations_bytes = micro_batch(step, &resident, &resident_raw);
    result->weight_pass_bytes = step->priv->weight_pass_bytes;
    result->head_weight_pass_bytes = step->priv->head_weight_pass_bytes;
    result->head_activations_bytes = step->priv->head_activations_bytes;
    result->boundary_bytes = step->priv->boundary_bytes;
    uint64_t other_outputs = 0; /* output_chunks' of the micro-batches the two runs stand for */
    if (keeps_every_output(step)) {
        vp_t logits = vp_step_tensor(step, VP_TENSOR_LOGITS);
        const vp_tensor *t = logits ? vp_at(sim, logits) : NULL;
        uint64_t chunk = t ? vp_bytes_of((vp_dtype)t->dtype, t->numel) : 0; /* one micro-batch's */
        result->pp_outputs_bytes = step->stage.microbatches * chunk;
        if (step->stage.microbatches > 2) other_outputs = (uint64_t)(step->stage.microbatches - 2) * chunk;
    }
    /* a later micro-batch backpropagates into the gradients the first made */
    step->priv->final_micro_batch = true;
    if (other_outputs) vp_ledger_alloc(ledger, VP_CAT_ACTIVATIONS, other_outputs, "pipeline.output_chunks");
    if (step->stage.microbatches > 1) micro_batch(step, &resident, &resident_raw);
    result->symm_mem_request = step->sim.symm_mem_request;
    result->rounded_fb = ledger->rounded;
    result->raw_fb = ledger->raw;
    memcpy(result->streams_fb, ledger->stream, sizeof ledger->stream);
    /* step() returns _merge_outputs(output_chunks): torch.cat of every
     * micro-batch's output (microbatch.py merge_chunks), which the loop
     * drops; after every micro-batch is done, as the optimizer step is */
    if (result->pp_outputs_bytes) {
        vp_ledger_alloc(ledger, VP_CAT_TRANSIENT, result->pp_outputs_bytes, "pipeline.merge_outputs");
        vp_ledger_release(ledger, VP_CAT_TRANSIENT, result->pp_outputs_bytes, "pipeline.merge_outputs");
    }

    vp_update_step(step);
    vp_update_zero_grad(step);
    /* the loop body ends: loss, outputs and the batch go (output_chunks at
     * the next step's clear_runtime_states) */
    vp_drop(sim, step->priv->loss);
    vp_step_drop_refs(sim, step->priv->graph_refs);
    vp_step_release_ctx(step, 0);
    vp_step_end_lifetime(step, VP_LIVES_OUTPUTS);
    vp_step_drop_taken(sim, step->priv->kept_outputs);
    memset(step->priv->kept_outputs, 0, sizeof step->priv->kept_outputs);
    if (other_outputs) vp_ledger_release(ledger, VP_CAT_ACTIVATIONS, other_outputs, "pipeline.output_chunks");
    vp_kv_cache_release(step, &step->kv_cache);
    vp_step_release_router_logits(sim, &step->router_logits);
    vp_step_drop_leaves(sim, step->priv->graph_leaves);
    vp_drop(sim, step->priv->input_ids);
    vp_drop(sim, step->priv->labels);
    vp_drop(sim, step->priv->attention_mask);
    vp_drop(sim, step->priv->token_type_ids);
    vp_step_end_lifetime(step, VP_LIVES_STEP);
    vp_layout_step_end(step);
    if (status_of(step) == VP_STEP_OK && memcmp(ledger->rounded.current, resident.current, sizeof resident.current))
        sim->status = VP_SIM_UNBALANCED;

    result->params = vp_model_params(m, false);
    result->trainable_params = vp_finetune_trainable_params(m, step->recipe);
    result->params_bytes = resident_raw.current[VP_CAT_PARAMS];
    result->buffers_bytes = resident_raw.current[VP_CAT_BUFFERS];
    result->master_bytes = resident_raw.current[VP_CAT_MASTER];
    result->optimizer_bytes = resident_raw.current[VP_CAT_OPTIMIZER];
    result->grads_bytes = kept_grad_bytes(step);
    result->comm_bytes = resident_raw.current[VP_CAT_COMM];
    result->host_bytes = step->priv->host_peak;
    result->nvme_bytes = step->priv->nvme_bytes;
    result->rounded = ledger->rounded;
    result->raw = ledger->raw;
    result->has_streams = ledger->streams != NULL;
    memcpy(result->streams, ledger->stream, sizeof ledger->stream);
}

vp_step_status vp_step_run(const vp_model *model, const vp_recipe *recipe, bool fold, bool record,
                           vp_step_result *result, vp_ledger *ledger_out) {
    return vp_step_run_stage(model, recipe, NULL, fold, record, result, ledger_out, NULL);
}

/* One evaluation of the step, with `recasts` applied to the leaves; the
 * leaves it finds to recast go to `found` (when not NULL). */
static vp_step_status attempt(const vp_model *model, const vp_recipe *given, const vp_stage *stage, bool fold,
                              bool record, vp_step_result *result, vp_ledger *ledger_out, const vp_leaf_recast *recasts,
                              unsigned n_recasts, vp_leaf_recast *found, unsigned *n_found, vp_sim_arrays *reuse) {
    vp_recipe resolved = *given;
    vp_recipe_resolve(&resolved);
    const vp_recipe *recipe = &resolved;
    vp_step step;
    vp_step_private own;
    memset(&step, 0, sizeof step);
    memset(&own, 0, sizeof own);
    step.priv = &own;
    vp_step_tensors_init(&step);
    memset(result, 0, sizeof *result);
    if (ledger_out) vp_ledger_init(ledger_out, false);
    vp_ledger_init(&step.ledger, record);
    if (recipe->device != VP_DEVICE_CPU) vp_ledger_set_streams(&step.ledger, vp_framework_streams(recipe));
    vp_sim_init(&step.sim, &step.ledger);
    if (reuse) vp_sim_adopt(&step.sim, reuse);
    step.model = model;
    step.recipe = recipe;
    step.stage = stage ? *stage : (vp_stage){0, model->layers, true, true, 1, 0, 0, false, false};
    step.precision = vp_precision_get(recipe->precision);
    own.optimizer = vp_optimizer_at(recipe->optimizer);
    own.fold = fold;
    own.fold_repeat = 1;
    own.recasts = recasts;
    own.n_recasts = n_recasts;
    step.batch = recipe->micro_batch;
    step.cp = recipe->cp ? recipe->cp : 1;
    step.seq = recipe->seq_len / step.cp; /* Megatron's get_batch_on_this_cp_rank */
    step.input_tokens = vp_numel(&step.sim, step.batch, step.seq);
    step.target_seq = recipe->target_len ? recipe->target_len : recipe->seq_len;
    /* PEFT's prompt tuning puts its virtual tokens before every sequence:
     * the model (an encoder-decoder's encoder) runs on seq_len +
     * num_virtual_tokens */
    const vp_finetune_method *method = vp_finetune_method_of(recipe);
    step.virtual_tokens = method->virtual_tokens == VP_VIRTUAL_PROMPT ? recipe->virtual_tokens : 0;
    step.seq += step.virtual_tokens;
    step.source_seq = step.seq;
    /* prefix tuning's instead lengthen the keys and values of every layer */
    step.prefix_tokens = method->virtual_tokens == VP_VIRTUAL_PREFIX ? recipe->virtual_tokens : 0;
    /* an encoder-decoder's decoder alone gets the prefix (decoder_start) */
    step.past_tokens = vp_model_encoder_decoder(model) ? 0 : step.prefix_tokens;
    step.tokens = vp_numel(&step.sim, step.batch, step.seq);
    step.tp = recipe->tp ? recipe->tp : 1;
    step.ep = recipe->ep ? recipe->ep : 1;
    step.etp = recipe->etp ? recipe->etp : step.tp;
    step.sp = recipe->sequence_parallel && step.tp > 1;
    step.rows = step.sp ? step.tokens / step.tp : step.tokens;
    step.autocast = step.precision->autocast;
    step.activation = step.precision->params;
    step.low = vp_precision_low(step.precision);
    step.sim.accumulate = recipe->torch_version == VP_TORCH_1_13 ? VP_ACCUMULATE_OUT_OF_PLACE : VP_ACCUMULATE_INPLACE;
    step.sim.embedding_saves_weight = recipe->torch_version == VP_TORCH_1_13;

    if (!step.precision || !own.optimizer || model->layers == 0 || step.stage.layers == 0 ||
        step.stage.first_layer + step.stage.layers > model->layers) {
        free_step(&step, reuse);
        vp_ledger_free(&step.ledger);
        return VP_STEP_INTERNAL;
    }
    if (vp_step_layout_problem(model, recipe) || vp_shard_plan_make(recipe, step.precision, &own.plan)) {
        free_step(&step, reuse);
        vp_ledger_free(&step.ledger);
        return VP_STEP_LAYOUT;
    }
    /* the master-weight step frees the 16-bit gradients (Megatron-LM's
     * _copy_model_grads_to_main_grads), and sharded gradients are not
     * .grad tensors at all: neither can stay allocated as .grad */
    if ((own.plan.master_grads || own.plan.grads != VP_GRADS_KEEP) && !recipe->grads_set_to_none) {
        free_step(&step, reuse);
        vp_ledger_free(&step.ledger);
        return VP_STEP_UNSUPPORTED;
    }
    run(&step, result);
    vp_step_status status = step.sim.status == VP_SIM_UNBALANCED ? VP_STEP_INTERNAL : status_of(&step);
    if (own.fold_unalike) status = VP_STEP_UNFOLDABLE;
    if (found) {
        memcpy(found, own.found, own.n_found * sizeof *found);
        *n_found = own.n_found;
    }
    free_step(&step, reuse);
    if (ledger_out) *ledger_out = step.ledger; /* the caller owns the event log now */
    else vp_ledger_free(&step.ledger);
    return status;
}

vp_step_status vp_step_run_stage(const vp_model *model, const vp_recipe *given, const vp_stage *stage, bool fold,
                                 bool record, vp_step_result *result, vp_ledger *ledger_out, vp_sim_arrays *reuse) {
    vp_leaf_recast found[VP_RECASTS_MAX];
    unsigned n_found = 0;
    vp_step_status status =
        attempt(model, given, stage, fold, record, result, ledger_out, NULL, 0, found, &n_found, reuse);
    if (status == VP_STEP_UNFOLDABLE) { /* its layers are not alike: each evaluated */
        if (ledger_out) vp_ledger_free(ledger_out);
        fold = false;
        n_found = 0;
        status = attempt(model, given, stage, fold, record, result, ledger_out, NULL, 0, found, &n_found, reuse);
    }
    if (status != VP_STEP_OK || !n_found) return status;
    /* the steady state has those biases recast since the first forward */
    if (ledger_out) vp_ledger_free(ledger_out);
    return attempt(model, given, stage, fold, record, result, ledger_out, found, n_found, NULL, NULL, reuse);
}

/* TRL's OffloadActivations spans backward too: a reentrant checkpoint's
 * rerun there saves through its hooks again (the non-reentrant one's own
 * hooks are innermost), which the engine does not model; torchao's float8
 * tensors it keeps by their class. */
static const char *offload_trl_problem(const vp_recipe *recipe, const vp_precision *precision) {
    if (recipe->offload_clone_views && !recipe->offload_trl)
        return "offload_clone_views: is axolotl's patch of TRL's OffloadActivations: give offload_trl too";
    if (!recipe->offload_trl) return NULL;
    if (!recipe->offload_activations || !recipe->offload_torchtune)
        return "offload_trl: is how TRL runs OffloadActivations: give offload_activations and offload_torchtune too";
    if (recipe->use_reentrant && (recipe->checkpoint_every || recipe->checkpoint_layers))
        return "offload_trl: TRL's offloading spans backward, where a reentrant checkpoint's rerun would be offloaded "
               "again: not modelled; use use_reentrant = false (TRL's SFTConfig default)";
    if (precision->fp8_dynamic) return "offload_trl: not modelled with precision fp8-torchao (its float8 tensors kept)";
    return NULL;
}

const char *vp_step_layout_problem(const vp_model *model, const vp_recipe *recipe) {
    vp_shard_plan plan;
    const vp_precision *precision = vp_precision_get(recipe->precision);
    if (!precision) return "precision: unknown";
    const char *problem = vp_shard_plan_make(recipe, precision, &plan);
    if (!problem) problem = vp_finetune_problem(model, recipe);
    if (!problem) problem = vp_optimizer_problem(recipe);
    const vp_framework_kind *framework = vp_framework_of(recipe);
    if (!problem && recipe->sparsity && !framework->hf_modeling)
        problem = "sparsity: modelled as apex's ASP on a PyTorch module (framework torch, deepspeed or fsdp)";
    if (!problem && recipe->offload_activations && (!framework->hf_modeling || recipe->pp > 1))
        problem = "offload_activations: modelled as PyTorch's save_on_cpu around a whole forward (no megatron, no pp)";
    if (!problem) problem = offload_trl_problem(recipe, precision);
    if (!problem) problem = vp_checkpoint_recipe_problem(recipe);
    if (!problem) problem = vp_optim_in_backward_problem(recipe);
    if (!problem) problem = vp_float8_problem(recipe);
    if (!problem) problem = vp_compile_recipe_problem(recipe);
    if (problem || !model) return problem;
    if (recipe->compile && model->facts.experts)
        return "compile: mixtures of experts (data-dependent dispatch in the compiled block) are not modelled with "
               "compile (docs/compile.md)";
    if (precision->fp8_dynamic && model->facts.experts)
        return "precision: fp8-torchao is not modelled for mixtures of experts (torchao's grouped float8 GEMMs)";
    /* torchao's Float8ColwiseParallel / Float8RowwiseParallel raise on a
     * module torchao did not swap (float8_tensor_parallel.py _apply):
     * attention's q, k, v and o must all be Float8Linear (in and out
     * features multiples of 16, torchtitan's filter) */
    if (precision->fp8_dynamic && recipe->tp > 1 && framework->dtensor_tp && recipe->fp8_recipe == VP_FLOAT8_TENSORWISE &&
        model->facts.attention && (model->facts.hidden % 16 || model->facts.kv_width % 16))
        return "precision: fp8-torchao with tp (torchao's float8 tensor-parallel styles) needs the hidden size and the "
               "key/value width to be multiples of 16 (every attention linear swapped to Float8Linear)";
    if (recipe->tp > 1 && !model->facts.lm_head)
        return "tp: tensor parallelism is modelled for language models (an lm_head)";
    if (recipe->tp > 1) {
        problem = vp_model_check_tp(model, recipe->tp);
        if (problem) return problem;
        /* DTensor's ColwiseParallel splits wk and wv's rows evenly over tp
         * (no replicated key/value heads, as Megatron-LM has) */
        if (framework->dtensor_tp && model->facts.kv_heads % recipe->tp)
            return "tp: must divide the key/value heads under DTensor's tensor parallelism (framework = fsdp2)";
    }
    /* megatron/training/arguments.py: "When using MoE and tensor
     * parallelism, sequence parallelism must be used." */
    if (framework->experts_need_sequence_parallel && recipe->tp > 1 && !recipe->sequence_parallel &&
        model->facts.experts)
        return "sequence_parallel: Megatron-LM needs it for experts with tp > 1";
    unsigned tp = recipe->tp ? recipe->tp : 1, cp = recipe->cp ? recipe->cp : 1;
    vp_ranks experts = {tp, recipe->ep ? recipe->ep : 1, recipe->etp ? recipe->etp : tp, false, false};
    bool ep = recipe->ep > 1, etp = recipe->etp > 1 && recipe->etp != tp;
    if ((ep || etp) && !model->facts.experts)
        return ep ? "ep: expert parallelism needs a model with experts"
                  : "etp: expert tensor parallelism needs a model with experts";
    if ((ep || etp) && !framework->expert_parallel)
        return ep ? "ep: expert parallelism needs framework = \"megatron\""
                  : "etp: expert tensor parallelism needs framework = \"megatron\"";
    if (model->facts.experts) {
        /* parallel_state.py: ep x etp ranks are carved out of dp x tp x cp */
        if ((recipe->dp * tp * cp) % (experts.ep * experts.etp))
            return ep ? "ep: ep x etp must divide dp x tp x cp (expert ranks are drawn from them)"
                      : "etp: ep x etp must divide dp x tp x cp (expert ranks are drawn from them)";
        problem = vp_model_check_ep(model, &experts);
        if (problem) return problem;
    }
    if (cp > 1) {
        /* get_batch_on_this_cp_rank: 2 x cp chunks, rank r keeps r and 2cp - r - 1 */
        if (recipe->seq_len % (2 * cp)) return "cp: seq_len must divide into 2 x cp chunks";
        if (recipe->attention == VP_ATTN_EAGER)
            return "cp: ring attention runs a fused kernel: use attention = flash or sdpa";
    }
    problem = vp_model_recipe_problem(model, recipe);
    if (!problem) problem = vp_checkpoint_model_problem(model, recipe);
    if (problem) return problem;
    /* Megatron-Core's TransformerLayer runs attention and MLP in sequence */
    if (!framework->hf_modeling && model->facts.parallel_branches)
        return "framework: attention and MLP side by side (GPT-NeoX, Phi) are modelled as transformers runs them "
               "(no megatron)";
    if (vp_model_encoder_decoder(model)) {
        /* an encoder-decoder runs as transformers runs it, on one stage */
        if (!framework->hf_modeling || tp > 1 || cp > 1 || recipe->pp > 1)
            return "framework: encoder-decoder models are modelled as transformers runs them (no megatron, tp, pp or cp)";
        if (recipe->selective)
            return "checkpointing: selective recompute (Megatron's) is not modelled for encoder-decoder models";
        const vp_finetune_method *method = vp_finetune_method_of(recipe);
        if (method->encoder_decoder_problem && (problem = method->encoder_decoder_problem(model))) return problem;
        if (precision->fp8_gemms) return "precision: fp8 is not modelled for T5";
    } else if (recipe->target_len && recipe->target_len != recipe->seq_len) {
        return "target_len: the decoder's length of an encoder-decoder model; this model has one sequence";
    }
    /* Megatron splits the sequence dimension evenly over the tp ranks */
    if (recipe->sequence_parallel && (recipe->micro_batch * (recipe->seq_len / cp)) % tp)
        return "sequence_parallel: tp must divide micro_batch x seq_len (over cp)";
    return NULL;
}
