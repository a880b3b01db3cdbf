/* op_branch.c — a branch beside the step's stream: a multi-token prediction
 * module (DeepSeek-V3, arXiv 2412.19437 section 2.2) takes the main model's
 * last hidden states (before the final norm), the shared embedding of the
 * tokens k ahead, runs its own ops, the model's own head and loss on the
 * labels k ahead, and hands its loss to the step, which adds it to the main
 * loss (vp_branch_join_loss); the stream goes on with the hidden states
 * as they were. docs/writing-blocks.md, "Blocks with several inputs". */
#include "finetune_method.h"
#include "framework.h"
#include "ops.h"
#include "precision.h"

enum { BRANCH_SHIFT, BRANCH_LOSS_WEIGHT, BRANCH_LAYER_FIRST, BRANCH_LAYER_OPS, BRANCH_CHAIN, BRANCH_FIELDS };

static const vp_field branch_fields[BRANCH_FIELDS] = {
    [BRANCH_SHIFT] = {"shift", VP_FIELD_INT, false, 1, 1, 64, NULL,
                      "k: the tokens and labels k ahead (torch.roll(ids, -k, dims=-1), as Megatron-LM's "
                      "multi_token_prediction.py rolls them)"},
    [BRANCH_LOSS_WEIGHT] = {"loss_weight", VP_FIELD_NUMBER, false, 0.3, 0, 1e6, NULL,
                            "lambda: the branch's loss is added to the main loss times this (DeepSeek-V3: 0.3, "
                            "then 0.1; no memory of its own)"},
    [BRANCH_LAYER_FIRST] = {"layer_first", VP_FIELD_INT, false, 0, 0, 64, NULL,
                            "the first of the children that form the branch's decoder layer (1 = the first "
                            "child; 0: none), whose locals go when the layer returns"},
    [BRANCH_LAYER_OPS] = {"layer_ops", VP_FIELD_INT, false, 0, 0, 64, NULL,
                          "how many children form the branch's decoder layer"},
    [BRANCH_CHAIN] = {"chain", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                      "takes the branch before it's last hidden states instead of the stream (MTP depth k > 1: "
                      "h^{k-1} of arXiv 2412.19437 eq. 21, the previous module's output after its norm, as "
                      "Megatron-LM's MultiTokenPredictionBlock hands each layer the last one's)"},
};

static const char *branch_check(const vp_op *op) {
    unsigned first = (unsigned)vp_op_u64(op, BRANCH_LAYER_FIRST), n = (unsigned)vp_op_u64(op, BRANCH_LAYER_OPS);
    if ((first == 0) != (n == 0)) return "layer_first: and layer_ops name the branch's layer together";
    return NULL;
}

/* Where the model holds a branch the forward cannot run: a message, or NULL. */
static const char *misplaced(const vp_model *model) {
    for (unsigned s = 0; s < VP_SECTION_COUNT; s++) {
        const vp_section *section = &model->section[s];
        for (unsigned i = 0; i < section->n_ops; i++) {
            const vp_op *op = &section->ops[i];
            if (op->kind != &vp_op_branch) {
                if (vp_section_find(&(vp_section){.ops = op->children, .n_ops = op->n_children}, &vp_op_branch))
                    return "model: a branch runs among the final ops, not inside another op";
                continue;
            }
            if (s != VP_SECTION_FINAL) return "model: a branch runs among the final ops (beside the head)";
            if (vp_op_flag(op, BRANCH_CHAIN) && (i == 0 || section->ops[i - 1].kind != &vp_op_branch))
                return "chain: a branch that chains follows another branch directly (the MTP depth before it)";
            unsigned first = (unsigned)vp_op_u64(op, BRANCH_LAYER_FIRST), n = (unsigned)vp_op_u64(op, BRANCH_LAYER_OPS);
            if (first && first - 1 + n > op->n_children) return "layer_ops: more children than the branch holds";
            if (!vp_section_find(section, &vp_op_lm_head) || !vp_section_find(section, &vp_op_cross_entropy))
                return "model: a branch shares the model's lm_head and cross_entropy, which the final ops need";
        }
    }
    return NULL;
}

/* What a branch is not modelled under: each is a message naming the key. */
static const char *branch_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    const char *problem = misplaced(model);
    if (problem) return problem;
    const vp_framework_kind *framework = vp_framework_of(recipe);
    const vp_precision *precision = vp_precision_get(recipe->precision);
    /* Megatron-LM's own MultiTokenPredictionBlock (megatron/core/transformer/
     * multi_token_prediction.py) is another program: every depth's hidden
     * states concatenated for the head, the loss joined through
     * MTPLossAutoScaler, all on the last pipeline stage */
    if (!framework->hf_modeling)
        return "framework: a branch (multi-token prediction) is modelled as PyTorch modules run it (framework = "
               "torch, or deepspeed with zero 1 or 2); Megatron-LM's MultiTokenPredictionBlock (every depth's hidden "
               "states concatenated, its loss through MTPLossAutoScaler, on the last pipeline stage) is not";
    /* ZeRO-3 and FSDP gather the module's decoder layer as a unit of its
     * own (layout.c's branch layers); FSDP2's fully_shard is applied block
     * by block by the training script, and no script applies it to an MTP
     * module (torchtitan's DeepSeek-V3 has none) */
    if (framework == &vp_framework_fsdp2)
        return "framework: a branch (multi-token prediction) is not modelled under FSDP2 (no training script's "
               "fully_shard plan covers an MTP module: torchtitan's DeepSeek-V3 has none); ZeRO-3 and FSDP are";
    if (recipe->tp > 1) return "tp: a branch (multi-token prediction) is modelled on one model-parallel rank";
    if (recipe->pp > 1) return "pp: a branch (multi-token prediction) is modelled on one model-parallel rank";
    if (recipe->cp > 1) return "cp: a branch (multi-token prediction) is modelled on one model-parallel rank";
    if (recipe->loss != VP_LOSS_CROSS_ENTROPY)
        return "loss: a branch (multi-token prediction) is modelled with the plain cross-entropy loss";
    const vp_finetune_method *method = vp_finetune_method_of(recipe);
    if (method->frozen_base && !method->adapts_linear)
        return "finetune: a branch (multi-token prediction) is modelled for full training and LoRA / QLoRA / DoRA";
    if (recipe->offload_activations || recipe->optimizer_in_backward)
        return recipe->offload_activations
                   ? "offload_activations: not modelled with a branch (multi-token prediction)"
                   : "optimizer_in_backward: not modelled with a branch (multi-token prediction)";
    if (recipe->compile) return "compile: not modelled with a branch (multi-token prediction)";
    if (precision && (precision->fp8_gemms || precision->fp8_dynamic))
        return "precision: fp8 is not modelled with a branch (multi-token prediction)";
    return NULL;
}

/* The branch's decoder layer (layer_first, layer_ops) as leaf slots of its
 * section (vp_op_kind.unit_slots). */
static bool branch_unit_slots(const vp_op *op, unsigned *first, unsigned *n) {
    unsigned child = (unsigned)vp_op_u64(op, BRANCH_LAYER_FIRST), count = (unsigned)vp_op_u64(op, BRANCH_LAYER_OPS);
    if (!child || !count) return false;
    const vp_op *from = &op->children[child - 1], *last = &op->children[child - 1 + count - 1];
    *first = from->slot;
    *n = last->slot + last->n_slots - from->slot;
    return true;
}

/* Whether the op after `op` among the final ops is a branch that chains
 * (takes op's last hidden states). */
static bool next_chains(const vp_step *step, const vp_op *op) {
    const vp_section *final = &step->model->section[VP_SECTION_FINAL];
    for (unsigned i = 0; i + 1 < final->n_ops; i++)
        if (&final->ops[i] == op) return final->ops[i + 1].kind == &vp_op_branch && vp_op_flag(&final->ops[i + 1], BRANCH_CHAIN);
    return false;
}

/* MTPModule.forward(hidden_states, input_ids, labels) for depth k,
 * written plainly (tests/torch/models/mtp.py):
 *   inputs_embeds = embed_tokens(torch.roll(input_ids, -k, dims=-1))
 *   hidden_states = <the children>(hidden_states)   # the layer's frame ends after its ops
 *   logits = lm_head(hidden_states); del hidden_states (kept for depth k + 1)
 *   labels = torch.roll(labels, -k, dims=-1); labels[:, -k:] = -100
 *   loss = loss_function(logits, labels)
 *   del logits, labels, inputs_embeds
 *   mtp_loss = loss if depth 1 else mtp_loss + loss
 * x is borrowed; returns x (a new reference): the stream goes on. A
 * branch that chains runs on the depth before's hidden states instead,
 * which go once its first ops (the combining block) have run. */
static vp_t branch_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    const vp_t *section = leaves - op->slot; /* children's slots are the section's */
    vp_t stream = x;
    bool chained = vp_op_flag(op, BRANCH_CHAIN);
    if (chained) x = vp_step_tensor(step, VP_TENSOR_BRANCH_OUTPUT);
    vp_step_lend_tensor(step, VP_TENSOR_BRANCH_INPUT, x);
    vp_t rolled = vp_new(sim, step->input_tokens, VP_INT64, "mtp.roll_input_ids");
    vp_t embeds = vp_embedding(sim, rolled, step->tied_weight, step->input_tokens, step->model->facts.hidden,
                               step->recipe->device, "mtp.embed_tokens");
    vp_drop(sim, rolled);
    /* the embedding module's forward hooks run on this call too: PEFT's
     * enable_input_require_grads under checkpointing */
    vp_step_embedding_output(step, embeds);
    vp_step_put_tensor(step, VP_TENSOR_SHIFTED_EMBEDDINGS, embeds);
    unsigned first = (unsigned)vp_op_u64(op, BRANCH_LAYER_FIRST), n_layer = (unsigned)vp_op_u64(op, BRANCH_LAYER_OPS);
    unsigned before = first ? first - 1 : op->n_children;
    vp_t h = vp_run_ops(step, op->children, before, section, x);
    if (chained) { /* the depth before's hidden states, rebound */
        vp_step_lend_tensor(step, VP_TENSOR_BRANCH_INPUT, 0);
        vp_step_put_tensor(step, VP_TENSOR_BRANCH_OUTPUT, 0);
    }
    if (first) {
        /* the module's layer: the model's next layer index (depth k: layers + k - 1) */
        int place = step->ledger.place.layer;
        unsigned index = step->layer_index;
        unsigned layer = step->model->layers + (unsigned)vp_op_u64(op, BRANCH_SHIFT) - 1;
        step->layer_index = layer;
        step->ledger.place.layer = (int)layer;
        /* under ZeRO-3 and FSDP a unit of its own, as the model's layers */
        const vp_t *layer_leaves = section + op->children[before].slot;
        vp_t in = vp_step_branch_layer_start(step, h, layer_leaves);
        vp_drop(sim, h);
        h = in;
        vp_t run = vp_run_ops(step, op->children + before, n_layer, section, h);
        vp_step_layer_returns(step);
        vp_t out = vp_step_branch_layer_end(step, run, layer_leaves);
        vp_drop(sim, run);
        step->layer_index = index;
        step->ledger.place.layer = place;
        vp_drop(sim, h);
        h = vp_run_ops(step, op->children + before + n_layer, op->n_children - before - n_layer, section, out);
        vp_drop(sim, out);
    }
    /* the model's own head (shared), then its loss on the labels k ahead */
    vp_place was = step->ledger.place;
    const vp_section *final = &step->model->section[VP_SECTION_FINAL];
    vp_t logits = 0;
    for (unsigned i = 0; i < final->n_ops && !logits; i++)
        if (final->ops[i].kind == &vp_op_lm_head)
            logits = final->ops[i].kind->forward(step, &final->ops[i], section + final->ops[i].slot, h);
    if (next_chains(step, op))
        vp_step_put_tensor(step, VP_TENSOR_BRANCH_OUTPUT, h); /* the next depth's input */
    else
        vp_drop(sim, h);
    vp_step_put_tensor(step, VP_TENSOR_BRANCH_LABELS, vp_new(sim, step->input_tokens, VP_INT64, "mtp.roll_labels"));
    step->ledger.place.phase = VP_PHASE_LOSS;
    vp_t loss = 0;
    for (unsigned i = 0; i < final->n_ops && !loss; i++)
        if (final->ops[i].kind == &vp_op_cross_entropy)
            loss = final->ops[i].kind->forward(step, &final->ops[i], section + final->ops[i].slot, logits);
    step->ledger.place = was;
    vp_drop(sim, logits);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, 0); /* the outputs keep the main head's, not these */
    vp_step_put_tensor(step, VP_TENSOR_BRANCH_LABELS, 0);
    vp_step_put_tensor(step, VP_TENSOR_SHIFTED_EMBEDDINGS, 0);
    vp_step_lend_tensor(step, VP_TENSOR_BRANCH_INPUT, 0);
    vp_t before_loss = vp_step_tensor(step, VP_TENSOR_BRANCH_LOSS);
    if (before_loss) { /* mtp_loss = mtp_loss + loss: the depths' losses summed as they come */
        vp_step_put_tensor(step, VP_TENSOR_BRANCH_LOSS, vp_add(sim, before_loss, loss, 1, "mtp.loss_sum"));
        vp_drop(sim, loss);
    } else {
        vp_step_put_tensor(step, VP_TENSOR_BRANCH_LOSS, loss);
    }
    vp_hold(sim, stream);
    return stream;
}

vp_t vp_branch_join_loss(vp_step *step, vp_t loss) {
    vp_t branch = vp_step_tensor(step, VP_TENSOR_BRANCH_LOSS);
    if (!branch || !loss) return loss;
    /* loss = loss + mtp_loss * lambda */
    vp_sim *sim = &step->sim;
    vp_t scaled = vp_scale(sim, branch, "mtp.loss_weight");
    vp_t joined = vp_add(sim, loss, scaled, 1, "mtp.loss_add");
    vp_drop(sim, scaled);
    vp_drop(sim, loss);
    vp_step_put_tensor(step, VP_TENSOR_BRANCH_LOSS, 0);
    return joined;
}

const vp_op_kind vp_op_branch = {
    .name = "branch",
    .doc = "ops beside the stream, with a loss of their own (a multi-token prediction module): the shared "
           "embedding of the tokens k ahead for blocks that name it (inputs = { \"shifted_embeddings\" }), the "
           "model's own head and loss on the labels k ahead, added to the main loss times loss_weight "
           "(docs/writing-blocks.md)",
    .fields = branch_fields,
    .n_fields = BRANCH_FIELDS,
    .container = true,
    /* its children are costed as any container's; the second pass of the
     * shared head and loss is not (docs/writing-blocks.md) */
    .cost = VP_COST_NONE,
    .check = branch_check,
    .recipe_problem = branch_recipe_problem,
    .unit_slots = branch_unit_slots,
    .forward = branch_forward,
};
