/* checkpoint.c — forward without grad, backward by recomputation. */
#include "checkpoint.h"

#include "finetune_method.h"
#include "framework.h"
#include "sac_policy.h"
#include "op_context.h"
#include "step_private.h"

typedef struct {
    vp_step *step;
    vp_recompute_fn fn;
    void *ctx;
    unsigned n_inputs, n_fields, n_outputs;
    vp_t *fields[VP_NODE_MAX_SAVED];     /* where the function reads the other arguments, in saved slot order */
    vp_t *input_fields[VP_NODE_MAX_IN];  /* where it reads inputs past the first (NULL: passed alone) */
    vp_t *output_fields[VP_NODE_MAX_OUT]; /* where it leaves the outputs past the first, by node output */
} call;

/* A step field's value set aside while the rerun uses the field. */
typedef struct {
    vp_t *field;
    vp_t value;
} stashed;

static unsigned stash(stashed *list, unsigned n, vp_t *field) {
    for (unsigned i = 0; i < n; i++)
        if (list[i].field == field) return n;
    list[n] = (stashed){field, *field};
    *field = 0;
    return n + 1;
}

static bool is_one_of(vp_t t, const vp_t *list, unsigned n) {
    for (unsigned i = 0; i < n; i++)
        if (t && list[i] == t) return true;
    return false;
}

/* The gradients of the node's outputs, each a new reference; an output
 * nobody used gets zeros (autograd.Function materializes them). */
static void output_grads(vp_sim *sim, uint32_t index, unsigned n_out, vp_t *grads) {
    for (unsigned j = 0; j < n_out; j++) {
        vp_node *node = vp_node_at(sim, index);
        vp_t g = vp_grad_out(sim, node, j);
        if (g)
            vp_hold(sim, g);
        else
            g = vp_grad_like(sim, node->out[j], "checkpoint.materialize_grads");
        grads[j] = g;
    }
}

/* detach_variable: views of the saved inputs that are leaves of the rerun,
 * requiring grad where the inputs did. */
static void detach_inputs(vp_sim *sim, uint32_t index, unsigned n, vp_t *detached) {
    for (unsigned i = 0; i < n; i++) {
        vp_t x = vp_node_at(sim, index)->saved[i];
        detached[i] = vp_view(sim, x, vp_at(sim, x)->numel, "checkpoint.detach");
        vp_tensor *d = vp_at(sim, detached[i]);
        d->leaf = true;
        d->requires_grad = vp_at(sim, x)->requires_grad;
        d->grad_category = VP_CAT_TRANSIENT;
    }
}

/* The rerun with grad enabled, reading its arguments where the forward
 * did: the other arguments from the node (unpacked copies when offloaded),
 * inputs read from fields as their detached selves; outputs left in fields
 * start empty unless they are such inputs. Fills recomputed[] (new
 * references) and puts every field back. */
static void rerun(vp_sim *sim, uint32_t index, const call *c, vp_t *detached, vp_t *recomputed) {
    vp_step *step = c->step;
    unsigned n_out = 1 + c->n_outputs;
    vp_t outer[VP_NODE_MAX_SAVED];
    for (unsigned j = 0; j < c->n_fields; j++) {
        outer[j] = *c->fields[j];
        *c->fields[j] = vp_node_at(sim, index)->saved[c->n_inputs + j];
    }
    stashed set_aside[VP_NODE_MAX_IN + VP_NODE_MAX_OUT];
    unsigned n_aside = 0;
    for (unsigned j = 1; j < n_out; j++) n_aside = stash(set_aside, n_aside, c->output_fields[j]);
    for (unsigned i = 1; i < c->n_inputs; i++) {
        if (!c->input_fields[i]) continue;
        n_aside = stash(set_aside, n_aside, c->input_fields[i]);
        vp_hold(sim, detached[i]);
        *c->input_fields[i] = detached[i];
    }
    vp_phase phase = step->ledger.place.phase;
    vp_category category = sim->category;
    step->ledger.place.phase = VP_PHASE_RECOMPUTE;
    sim->category = VP_CAT_ACTIVATIONS;
    unsigned casts = step->priv->n_casts;
    unsigned repeat = step->priv->fold_repeat;
    step->priv->fold_repeat = 1;
    recomputed[0] = c->fn(step, c->ctx, detached);
    vp_step_clear_casts(step, casts);
    step->priv->fold_repeat = repeat;
    for (unsigned j = 1; j < n_out; j++) { /* the field's reference becomes ours */
        recomputed[j] = *c->output_fields[j];
        *c->output_fields[j] = 0;
    }
    for (unsigned i = 1; i < c->n_inputs; i++) {
        if (!c->input_fields[i]) continue;
        vp_drop(sim, *c->input_fields[i]);
        *c->input_fields[i] = 0;
    }
    for (unsigned k = n_aside; k-- > 0;) *set_aside[k].field = set_aside[k].value;
    /* backwards: a field may come twice (position_ids and cache_position) */
    for (unsigned j = c->n_fields; j-- > 0;) *c->fields[j] = outer[j];
    sim->category = category;
    step->ledger.place.phase = phase;
}

/* CheckpointFunction.backward (torch/utils/checkpoint.py, reentrant):
 * detach the saved inputs, rerun the function with grad enabled and
 * autocast re-entered, backward from the recomputed outputs with the
 * incoming gradients, return the detached inputs' .grad. An output that is
 * a detached input itself is a leaf of the rerun: its incoming gradient
 * joins what the rerun gives it last, in place. The gradients the call
 * gets (materialized zeros too, and those of outputs that need none in the
 * rerun) are its arguments, alive until it returns. */
static void backward_checkpoint(vp_sim *sim, uint32_t index) {
    const call *c = vp_node_at(sim, index)->context;
    unsigned n_out = 1 + c->n_outputs;
    vp_t grads[VP_NODE_MAX_OUT] = {0}, detached[VP_NODE_MAX_IN] = {0}, recomputed[VP_NODE_MAX_OUT] = {0};
    vp_t arguments[VP_NODE_MAX_OUT] = {0};
    output_grads(sim, index, n_out, grads);
    detach_inputs(sim, index, c->n_inputs, detached);
    uint32_t first = sim->n_nodes;
    unsigned ctx_from = c->step->priv->n_ctx_refs;
    rerun(sim, index, c, detached, recomputed);

    bool deferred[VP_NODE_MAX_OUT] = {false};
    for (unsigned j = 0; j < n_out; j++) {
        vp_t r = recomputed[j];
        if (!r || !vp_at(sim, r)->requires_grad) {
            arguments[j] = grads[j];
            grads[j] = 0;
        } else if (is_one_of(r, detached, c->n_inputs)) {
            deferred[j] = true;
        } else {
            vp_hold(sim, grads[j]);
            arguments[j] = grads[j];
            vp_at(sim, r)->grad = grads[j];
        }
    }
    vp_backward(sim, first, sim->n_nodes);
    for (unsigned j = 0; j < n_out; j++) {
        if (deferred[j]) vp_deliver_grad(sim, recomputed[j], grads[j]);
        vp_drop(sim, recomputed[j]);
        vp_drop(sim, arguments[j]);
    }
    vp_step_drop_rerun_leaves(c->step); /* the rerun's graph goes */
    vp_step_release_ctx(c->step, ctx_from);
    for (unsigned i = 0; i < c->n_inputs; i++) {
        vp_t gx = vp_at(sim, detached[i])->param_grad;
        vp_at(sim, detached[i])->param_grad = 0;
        vp_drop(sim, detached[i]);
        vp_give_grad(sim, vp_node_at(sim, index), i, gx);
    }
    sim->n_nodes = first;
}

vp_t vp_checkpoint(vp_step *step, vp_recompute_fn fn, void *ctx, const vp_t *inputs, unsigned n_inputs,
                   const vp_checkpoint_args *args) {
    vp_sim *sim = &step->sim;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    vp_t y = fn(step, ctx, inputs);
    sim->grad_mode = grad_mode;
    call *c = vp_step_scratch(step, sizeof *c);
    if (!c) return y;
    unsigned n_fields = args->n_saved + args->n_held;
    if (n_inputs + n_fields > VP_NODE_MAX_SAVED || n_inputs > VP_NODE_MAX_IN || 1 + args->n_outputs > VP_NODE_MAX_OUT) {
        sim->status = VP_SIM_LIMIT; /* more than a node keeps: an op-table bug */
        return y;
    }
    *c = (call){.step = step, .fn = fn, .ctx = ctx, .n_inputs = n_inputs, .n_fields = n_fields};
    for (unsigned i = 1; i < n_inputs && args->input_fields; i++) c->input_fields[i] = args->input_fields[i];
    /* the outputs the function left in fields; an input passed through
     * comes out as a view of it (autograd.Function's outputs are new) */
    vp_t outs[VP_NODE_MAX_OUT] = {y}, replaced[VP_NODE_MAX_OUT] = {0};
    unsigned n_out = 1;
    for (unsigned j = 0; j < args->n_outputs; j++) {
        vp_t *field = args->outputs[j];
        if (!*field) continue;
        if (is_one_of(*field, inputs, n_inputs)) {
            replaced[n_out] = *field; /* the field's reference, let go once the node keeps the input */
            *field = vp_view(sim, *field, vp_at(sim, *field)->numel, "checkpoint.output");
        }
        c->output_fields[n_out] = field;
        outs[n_out++] = *field;
    }
    c->n_outputs = n_out - 1;
    vp_node *node = vp_record(sim, backward_checkpoint, "checkpoint", inputs, n_inputs, outs, n_out);
    if (node)
        for (unsigned i = 0; i < n_inputs; i++) vp_save_at(sim, node, i, inputs[i]);
    for (unsigned j = 1; j < n_out; j++) vp_drop(sim, replaced[j]);
    if (!node) return y;
    node->context = c;
    /* by slot, so that an empty field keeps its place */
    for (unsigned j = 0; j < n_fields; j++) {
        bool saved = j < args->n_saved;
        vp_t *field = saved ? args->saved[j] : args->held[j - args->n_saved];
        c->fields[j] = field;
        if (!*field) continue;
        if (saved) {
            vp_save_at(sim, node, n_inputs + j, *field);
        } else {
            vp_hold_at(sim, node, n_inputs + j, *field); /* for the rerun */
            vp_step_graph_hold(step, *field);
        }
    }
    return y;
}

/* ---- use_reentrant=False ---- */

/* torch.utils.checkpoint's non-reentrant frame: the call's arguments on a
 * keeper node, the function's saved tensors as holders. */
typedef struct {
    vp_frame frame;
    call call;
} nonreentrant;

/* The unpack hook's recomputation (_checkpoint_without_reentrant_generator,
 * PyTorch 2.1-2.9; 1.13's _checkpoint_without_reentrant): the function
 * reruns on the kept arguments themselves, with grad enabled in a fresh
 * autocast region, each tensor it saves filling its holder; its outputs and
 * its own graph (ctx attributes too) go when it returns, or at the early
 * stop, where the rest of the function never runs. */
static void recompute_frame(vp_sim *sim, vp_frame *frame, uint32_t running) {
    const call *c = &((nonreentrant *)frame->ctx)->call;
    uint32_t keeper = frame->keeper - 1;
    /* the call's tensors save_on_cpu packed come back as GPU copies, the
     * rerun's arguments, gone with it unless a holder keeps them (or
     * OffloadActivations' stash, with streams: the unpack hook runs for
     * the node that asked, `running`) */
    vp_t packed[VP_NODE_MAX_SAVED] = {0};
    for (unsigned i = 0; i < VP_NODE_MAX_SAVED; i++) {
        if (!(vp_node_at(sim, keeper)->packed & (1u << i))) continue;
        packed[i] = vp_node_at(sim, keeper)->saved[i];
        vp_t t = vp_unpack_for(sim, running, keeper, i);
        vp_node_at(sim, keeper)->saved[i] = t;
    }
    vp_t inputs[VP_NODE_MAX_IN] = {0}, outputs[VP_NODE_MAX_OUT] = {0};
    for (unsigned i = 0; i < c->n_inputs; i++) inputs[i] = vp_node_at(sim, keeper)->saved[i];
    uint32_t first = sim->n_nodes;
    unsigned ctx_from = c->step->priv->n_ctx_refs;
    int layer = c->step->ledger.place.layer; /* the node that unpacked runs on after */
    vp_frame_rerun_begin(sim, frame);
    c->step->priv->frame_rerun = true;
    rerun(sim, keeper, c, inputs, outputs);
    c->step->priv->frame_rerun = false;
    vp_frame_rerun_end(sim, frame);
    for (unsigned j = 0; j <= c->n_outputs; j++) vp_drop(sim, outputs[j]);
    vp_frame_drop_rerun_graph(sim, first);
    vp_step_release_ctx(c->step, ctx_from);
    vp_step_drop_rerun_leaves(c->step);
    for (unsigned i = 0; i < VP_NODE_MAX_SAVED; i++) {
        if (!packed[i]) continue;
        vp_drop(sim, vp_node_at(sim, keeper)->saved[i]);
        vp_node_at(sim, keeper)->saved[i] = packed[i];
    }
    c->step->ledger.place.layer = layer;
}

vp_t vp_checkpoint_nonreentrant(vp_step *step, vp_recompute_fn fn, void *ctx, const vp_t *inputs, unsigned n_inputs,
                                const vp_checkpoint_args *args, bool early_stop) {
    vp_sim *sim = &step->sim;
    unsigned n_fields = args->n_saved + args->n_held;
    if (n_inputs + n_fields > VP_NODE_MAX_SAVED || n_inputs > VP_NODE_MAX_IN || 1 + args->n_outputs > VP_NODE_MAX_OUT) {
        sim->status = VP_SIM_LIMIT; /* more than a node keeps: an op-table bug */
        return fn(step, ctx, inputs);
    }
    nonreentrant *nr = sim->grad_mode ? vp_step_scratch(step, sizeof *nr) : NULL;
    uint32_t keeper = nr ? vp_record_keeper(sim, "checkpoint.inputs") : 0;
    if (!keeper) return fn(step, ctx, inputs); /* no grad: no frame */
    call *c = &nr->call;
    *c = (call){.step = step, .fn = fn, .ctx = ctx, .n_inputs = n_inputs, .n_fields = n_fields};
    for (unsigned i = 1; i < n_inputs && args->input_fields; i++) c->input_fields[i] = args->input_fields[i];
    /* 1.13's code has no early stop, keeps the call's tensors in closures
     * and nothing in the rerun's graph; 2.x's keeps the positional tensors
     * as saved variables (which save_on_cpu packs) and x.detach() in the
     * rerun's graph (with early stop it is 2.x's code) */
    bool selective = step->recipe->checkpoint_ops; /* create_selective_checkpoint_contexts: 2.x's */
    bool code_2x = step->recipe->torch_version != VP_TORCH_1_13 || early_stop || selective;
    vp_node *k = vp_node_at(sim, keeper - 1);
    for (unsigned i = 0; i < n_inputs; i++) {
        if (code_2x) vp_save_at(sim, k, i, inputs[i]);
        else vp_hold_at(sim, k, i, inputs[i]);
    }
    for (unsigned j = 0; j < n_fields; j++) {
        bool saved = j < args->n_saved;
        vp_t *field = saved ? args->saved[j] : args->held[j - args->n_saved];
        c->fields[j] = field;
        if (!*field) continue;
        if (saved && code_2x) vp_save_at(sim, k, n_inputs + j, *field);
        else vp_hold_at(sim, k, n_inputs + j, *field); /* a tuple (the rotary tables) stays as it is */
    }
    nr->frame = (vp_frame){.recompute = recompute_frame, .ctx = nr, .early_stop = early_stop, .rerun_keeps = code_2x,
                           .selective = selective};
    if (selective) vp_sac_torchtitan(&nr->frame.sac);
    vp_frame_begin(sim, &nr->frame, keeper);
    vp_t y = fn(step, ctx, inputs);
    vp_frame_end(sim, &nr->frame);
    /* the outputs it left in fields, for the rerun to set aside */
    unsigned n_out = 1;
    for (unsigned j = 0; j < args->n_outputs; j++)
        if (*args->outputs[j]) c->output_fields[n_out++] = args->outputs[j];
    c->n_outputs = n_out - 1;
    return y;
}

/* torchtitan wraps each block in checkpoint_wrapper (non-reentrant) with
 * its policy as context_fn; vramplan models it on one GPU's (or DDP's)
 * plain modules. */
static const char *op_selective_problem(const vp_recipe *r) {
    if (!r->checkpoint_ops) return NULL;
    if (r->use_reentrant)
        return "use_reentrant: checkpointing = op-selective is torch.utils.checkpoint's selective checkpointing, "
               "which runs non-reentrant (use_reentrant = false)";
    const vp_framework_kind *framework = vp_framework_of(r);
    /* torchtitan runs it over FSDP2 (dtensor_tp marks its plans) */
    if ((framework->bucketed_grads && !framework->dtensor_tp) || !framework->hf_modeling)
        return "checkpointing: op-selective is modelled on framework torch or fsdp2 (torchtitan's)";
    if (vp_finetune_method_of(r)->quantizes_base)
        return "checkpointing: op-selective is not modelled with qlora (bitsandbytes' matmuls inside autograd "
               "Functions)";
    /* fp8-torchao: the policy meets Float8Linear's ops as aten ops (the
     * dispatch mode sees inside its autograd.Function): torch._scaled_mm is
     * not on the list (recomputed), the tensorwise amax (aten.max) is
     * (sac_policy.c, prims.c make_amax) */
    const vp_precision *precision = vp_precision_get(r->precision);
    if (precision && precision->fp8_gemms && !precision->fp8_dynamic)
        return "checkpointing: op-selective is not modelled with fp8 (Transformer Engine's GEMMs are no aten.mm)";
    if (r->offload_activations) return "checkpointing: op-selective is not modelled with offload_activations";
    return NULL;
}

const char *vp_checkpoint_model_problem(const vp_model *model, const vp_recipe *recipe) {
    /* torchtitan's MoE forces its router's mm to be recomputed and saves
     * topk and all-to-all outputs: not modelled */
    if (recipe->checkpoint_ops && model->facts.experts)
        return "checkpointing: op-selective is modelled for dense layers (not mixtures of experts)";
    return NULL;
}

const char *vp_checkpoint_recipe_problem(const vp_recipe *recipe) {
    const char *problem = op_selective_problem(recipe);
    if (problem) return problem;
    if (recipe->checkpoint_early_stop >= 0 && recipe->use_reentrant)
        return "checkpoint_early_stop: applies to non-reentrant checkpointing (use_reentrant = false)";
    if (recipe->use_reentrant) return NULL;
    if (recipe->selective)
        return "use_reentrant: selective recompute is Megatron's own checkpoint function; use_reentrant = false "
               "applies to checkpointing = full or every-K";
    const vp_framework_kind *framework = vp_framework_of(recipe);
    if (!framework->hf_modeling)
        return "use_reentrant: false is modelled for transformers' gradient checkpointing (no megatron)";
    /* FSDP(CheckpointWrapper(layer)): FSDP skips its hooks in the rerun of
     * a unit whose pre-backward hook has run, the one a call of one layer
     * reruns; a call of several would run the others' hooks */
    if ((framework->layer_units || recipe->fsdp != VP_FSDP_NONE) && recipe->checkpoint_every > 1)
        return "use_reentrant: false with FSDP is modelled for checkpointing = full (each layer its own "
               "checkpoint inside its FSDP unit, as accelerate wraps them)";
    return NULL;
}
