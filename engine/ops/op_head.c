/* op_head.c — the language-model head and the loss HF computes from it. */
#include "compile_region.h"
#include "framework.h"
#include "ops.h"

/* ---- lm_head ---- */

enum { HEAD_VOCAB, HEAD_HIDDEN, HEAD_TIED, HEAD_BIAS, HEAD_SCALE_INPUT, HEAD_SCALE_LOGITS, HEAD_SOFTCAP, HEAD_FLOAT_LOGITS, HEAD_FIELDS };

static const vp_field head_fields[HEAD_FIELDS] = {
    [HEAD_VOCAB] = {"vocab", VP_FIELD_INT, true, 0, 1, 1 << 24, NULL, "vocabulary size (logit width)"},
    [HEAD_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
    [HEAD_TIED] = {"tied", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "reuse the token embedding's weight"},
    [HEAD_BIAS] = {"bias", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "a bias on the logits"},
    [HEAD_SCALE_INPUT] = {"scale_input", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                          "the hidden states scaled by hidden^-0.5 first, a new tensor (T5 with a tied head)"},
    [HEAD_SCALE_LOGITS] = {"scale_logits", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "the logits divided by a constant into a new tensor, which replaces them (Granite's "
                           "logits_scaling)"},
    [HEAD_SOFTCAP] = {"softcap", VP_FIELD_NUMBER, false, 0, 0, 1e9, NULL,
                      "the logits capped as cap * tanh(logits / cap) (Gemma 2's final_logit_softcapping): two "
                      "more logits-sized tensors, tanh's kept for backward; 0: none"},
    [HEAD_FLOAT_LOGITS] = {"float_logits", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "the logits made fp32 (a copy unless fp32 already), which replaces them and the "
                           "outputs keep (GPTJForCausalLM's lm_logits.to(torch.float32), transformers 4.5x)"},
};

enum { HEAD_W, HEAD_B, HEAD_SLOTS };

/* Column-parallel over the padded vocabulary (Megatron's output layer). */
static unsigned head_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    uint64_t v = vp_local_vocab(vp_op_u64(op, HEAD_VOCAB), tp, split->exact_vocab), h = vp_op_u64(op, HEAD_HIDDEN);
    out[HEAD_W] = vp_param(vp_op_flag(op, HEAD_TIED) ? 0 : v * h, "lm_head.weight", VP_MODULE_LM_HEAD, v);
    out[HEAD_B] = vp_param(vp_op_flag(op, HEAD_BIAS) ? v : 0, "lm_head.bias", VP_MODULE_LM_HEAD, 0);
    return HEAD_SLOTS;
}

static vp_t chunked_head_loss(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t vocab);
static vp_t fused_linear_loss(vp_step *step, vp_t x, vp_t weight, uint64_t vocab);
static vp_t cut_loss(vp_step *step, vp_t x, vp_t weight);
static vp_t chunked_linear_loss(vp_step *step, vp_t x, vp_t weight, uint64_t vocab);
static vp_t log_softmax_nll(vp_step *step, vp_t logits, vp_t targets);
static vp_t fused_ce(vp_step *step, vp_t logits, vp_t targets);
static vp_t liger_ce(vp_step *step, vp_t logits, vp_t targets);

/* Losses that take the hidden states and the head's weight, not logits:
 * the head computes the loss itself and the cross_entropy op after it
 * passes it on (no logits for the outputs to keep). */
static bool loss_takes_hidden(const vp_step *step) {
    vp_loss_kind k = step->recipe->loss;
    return k == VP_LOSS_CHUNKED || k == VP_LOSS_FUSED_LINEAR || k == VP_LOSS_CUT || k == VP_LOSS_CHUNKED_LINEAR;
}

/* logits = self.lm_head(hidden_states): the model's outputs object keeps
 * them (CausalLMOutputWithPast.logits). */
static vp_t head_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_t weight = vp_op_flag(op, HEAD_TIED) ? step->tied_weight : leaves[HEAD_W];
    /* torchtune's get_act_offloading_ctx_manager: a NoOpManager around the
     * output projection, and the loss outside the offloading context: what
     * they save stays on the GPU. TRL's context holds the loss too: its
     * NoOpManager is entered and left by lm_head's forward hooks (around
     * the projection below), which a loss taking the weight itself
     * (Liger's, cut cross-entropy) never calls */
    bool trl = step->recipe->offload_torchtune && step->recipe->offload_trl;
    if (step->recipe->offload_torchtune && !trl) step->sim.pack = NULL;
    if (loss_takes_hidden(step)) {
        uint64_t v = vp_op_u64(op, HEAD_VOCAB);
        if (step->recipe->loss == VP_LOSS_CHUNKED) return chunked_head_loss(step, x, weight, leaves[HEAD_B], v);
        if (step->recipe->loss == VP_LOSS_FUSED_LINEAR) return fused_linear_loss(step, x, weight, v);
        if (step->recipe->loss == VP_LOSS_CHUNKED_LINEAR) return chunked_linear_loss(step, x, weight, v);
        return cut_loss(step, x, weight);
    }
    uint64_t vocab = vp_local_vocab(vp_op_u64(op, HEAD_VOCAB), step->tp, vp_framework_of(step->recipe)->dtensor_tp);
    /* T5ForConditionalGeneration: sequence_output * (self.model_dim**-0.5)
     * when the head is tied; the product is what lm_head keeps, and the
     * rebound name (sequence_output) until the model returns */
    bool scaled_input = vp_op_flag(op, HEAD_SCALE_INPUT);
    /* DTensor's ColwiseParallel(input_layouts=Shard(1)) gathers the
     * sequence first (torchtitan's output plan) */
    vp_t gathered = vp_module_input(step, x, weight, 0); /* outside the compiled blocks */
    if (gathered) x = gathered;
    vp_t input = scaled_input ? vp_scale(&step->sim, x, "lm_head.scale_input") : (vp_hold(&step->sim, x), x);
    vp_drop(&step->sim, gathered);
    if (scaled_input) vp_step_keep_local(step, input, VP_LOCAL_OF_WRAPPER);
    void (*pack)(void *, uint64_t) = step->sim.pack;
    if (trl) step->sim.pack = NULL;
    vp_t logits = vp_project_column(step, input, weight, leaves[HEAD_B], vocab, "lm_head");
    step->sim.pack = pack;
    vp_drop(&step->sim, input);
    if (vp_op_flag(op, HEAD_SCALE_LOGITS)) { /* logits = logits / self.config.logits_scaling */
        vp_t scaled = vp_scale(&step->sim, logits, "lm_head.logits_scaling");
        vp_drop(&step->sim, logits);
        logits = scaled;
    }
    /* Gemma2ForCausalLM: logits / cap, torch.tanh (kept), * cap */
    if (op->value[HEAD_SOFTCAP] > 0) logits = vp_softcap(&step->sim, logits, "lm_head.softcap");
    /* the family's own forward: a framework running its own model (Megatron's GPTModel) makes no such copy */
    if (vp_op_flag(op, HEAD_FLOAT_LOGITS) && vp_framework_of(step->recipe)->hf_modeling) {
        vp_t up = vp_to(&step->sim, logits, VP_FP32, "lm_head.to_float32");
        vp_drop(&step->sim, logits);
        logits = up;
    }
    vp_hold(&step->sim, logits);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, logits);
    return logits;
}

static void head_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    facts->lm_head = true;
    if (section == VP_SECTION_FINAL) facts->tied_head = vp_op_flag(op, HEAD_TIED) ? op : NULL;
}

const vp_op_kind vp_op_lm_head = {
    .name = "lm_head",
    .doc = "the output projection to vocabulary logits, tied to the token embedding or not",
    .fields = head_fields,
    .n_fields = HEAD_FIELDS,
    .roles = VP_ROLE_HEAD | VP_ROLE_LOSS,
    .cost = VP_COST_LM_HEAD,
    .facts = head_facts,
    .leaves = head_leaves,
    .forward = head_forward,
};

/* ---- cross-entropy ---- */

enum { CE_UPCAST, CE_PER_SEQUENCE, CE_SHIFT, CE_FIELDS };

enum { SHIFT_LABELS, SHIFT_LOGITS, SHIFT_NONE };
static const char *const shift_names[] = {"labels", "logits", "none", NULL};

static const vp_field ce_fields[CE_FIELDS] = {
    [CE_UPCAST] = {"upcast", VP_FIELD_BOOL, false, 1, 0, 1, NULL, "logits.float() before the loss, as HF's ForCausalLMLoss does"},
    [CE_PER_SEQUENCE] = {"per_sequence", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                         "one label per sequence (a classifier's loss), not shifted per-token labels"},
    [CE_SHIFT] = {"shift", VP_FIELD_ENUM, false, SHIFT_LABELS, 0, 0, shift_names,
                  "how next-token targets line up: labels (padded and shifted, ForCausalLMLoss, transformers 4.46+) "
                  "or logits (logits[..., :-1, :].contiguous(), the models' own loss before), or none (labels "
                  "already aligned: an encoder-decoder's decoder, fed the labels shifted right)"},
};

static void ce_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    if (section != VP_SECTION_FINAL) return;
    facts->loss = true;
    facts->loss_per_sequence = vp_op_flag(op, CE_PER_SEQUENCE);
}

/* transformers' ForCausalLMLoss (loss_utils.py, 4.46+):
 *   logits = logits.float()
 *   labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
 *   shift_labels = labels[..., 1:].contiguous()
 *   loss = nn.functional.cross_entropy(logits.view(-1, V), shift_labels.view(-1), ignore_index=-100)
 * cross_entropy is log_softmax (keeps its fp32 output) then nll_loss (keeps
 * that output again and the targets). The fp32 copy of the logits is a local
 * of the loss function: freed when it returns. */
/* Backward of Megatron's _VocabParallelCrossEntropy: the saved softmax is
 * turned into the gradient in place (grad_input = softmax; ... mul_). */
static void backward_vocab_parallel(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t softmax = node->saved[0];
    vp_hold(sim, softmax);
    vp_give_grad(sim, node, 0, softmax);
}

/* megatron/core/tensor_parallel/cross_entropy.py, on this rank's slice of
 * the vocabulary: logits minus their max (a new tensor), exp and the
 * division in place, the softmax kept with the target mask and shifted
 * targets. The logits arrive as .float() of the 16-bit output
 * (fp16_lm_cross_entropy off, Megatron-LM's default). */
static vp_t vocab_parallel_ce(vp_step *step, vp_t logits) {
    vp_sim *sim = &step->sim;
    vp_t logits32 = vp_to(sim, logits, VP_FP32, "loss.logits_float");
    uint64_t n = vp_at(sim, logits32)->numel;
    vp_t shifted = vp_new(sim, n, VP_FP32, "loss.softmax");
    vp_t mask = vp_new(sim, step->tokens, VP_BOOL, "loss.target_mask");
    vp_t target = vp_new(sim, step->tokens, VP_INT64, "loss.masked_target");
    vp_t loss = vp_new(sim, step->tokens, VP_FP32, "loss.per_token");
    vp_node *node = vp_record(sim, backward_vocab_parallel, "loss.vocab_parallel", &logits32, 1, &loss, 1);
    if (node) {
        vp_save(sim, node, shifted);
        vp_save(sim, node, mask);
        vp_save(sim, node, target);
    }
    vp_drop(sim, shifted);
    vp_drop(sim, mask);
    vp_drop(sim, target);
    vp_drop(sim, logits32);
    /* the mean over tokens: a scalar whose backward expands to per-token */
    vp_t mean = vp_reduce(sim, loss, 1, "loss.mean");
    vp_drop(sim, loss);
    return mean;
}

/* cross_entropy(logits, targets): log_softmax (on autocast's fp32 list;
 * keeps its output) then nll_loss (keeps that output again and the
 * targets). Borrows both. */
static vp_t log_softmax_nll(vp_step *step, vp_t logits, vp_t targets) {
    vp_sim *sim = &step->sim;
    /* DTensor's tensor parallelism: torchtitan's loss_parallel over the
     * Shard(-1) logits (prims.c vp_loss_parallel_log_softmax) */
    if (step->tp > 1 && vp_framework_of(step->recipe)->dtensor_tp) {
        uint64_t rows = vp_at(sim, targets)->numel;
        vp_t log_probs = vp_loss_parallel_log_softmax(sim, logits, rows, "loss.log_softmax");
        vp_t loss = vp_loss_parallel_nll(sim, log_probs, targets, rows, "loss.nll_loss");
        vp_drop(sim, log_probs);
        return loss;
    }
    vp_t la = vp_autocast_fp32(step, logits, "loss.log_softmax");
    vp_t log_probs = vp_unary(sim, la, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, la)->dtype, "loss.log_softmax");
    vp_drop(sim, la);
    vp_t loss = vp_nll_loss(sim, log_probs, targets, "loss.nll_loss");
    vp_drop(sim, log_probs);
    return loss;
}

/* The causal-LM loss as the models computed it themselves before
 * transformers 4.46 (BloomForCausalLM 4.26-4.27):
 *   shift_logits = lm_logits[..., :-1, :].contiguous()
 *   shift_labels = labels[..., 1:].contiguous()
 *   loss = CrossEntropyLoss()(shift_logits.view(-1, V), shift_labels.view(-1))
 * both copies locals until the forward returns, right after the loss; the
 * slice's backward makes a zero-filled gradient of all the logits. With one
 * sequence both slices are contiguous and .contiguous() copies nothing. */
static vp_t shifted_logits_ce(vp_step *step, vp_t logits) {
    vp_sim *sim = &step->sim;
    uint64_t vocab = vp_at(sim, logits)->numel / step->tokens;
    uint64_t rows = vp_numel(sim, step->batch, step->seq - 1);
    bool one = step->batch == 1;
    vp_t sliced = vp_slice(sim, logits, vp_numel(sim, rows, vocab), "loss.shift_logits");
    vp_t shift_logits = vp_contiguous(sim, sliced, one, "loss.shift_logits");
    vp_drop(sim, sliced);
    vp_t labels = vp_step_loss_labels(step);
    vp_t shift_labels = one && labels ? vp_view(sim, labels, rows, "loss.shift_labels")
                                      : vp_new(sim, rows, VP_INT64, "loss.shift_labels");
    vp_t loss = log_softmax_nll(step, shift_logits, shift_labels);
    vp_drop(sim, shift_labels);
    vp_drop(sim, shift_logits);
    return loss;
}

/* ---- FlashAttention's fused cross-entropy ---- */

/* Backward of flash_attn's cross-entropy Function with inplace_backward
 * (cross_entropy_loss's default is False; the recipe key models True):
 * `dlogits = logits if ctx.inplace_backward else torch.empty_like(logits)`,
 * the kernel writing softmax - one-hot into it; the z-loss output, marked
 * non-differentiable, still gets a materialised zero gradient (autograd's
 * materialize_grads). */
static void backward_fused_ce(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t logits = node->saved[0];
    vp_scratch(sim, vp_at(sim, node->saved[1])->bytes, "loss.fused.grad_z_losses");
    node = vp_node_at(sim, index);
    vp_hold(sim, logits);
    vp_give_grad(sim, node, 0, logits);
}

/* Dao-AILab/flash-attention, flash_attn/ops/triton/cross_entropy.py
 * (the autograd Function CrossEntropyLoss.forward): losses, lse and z_losses, one fp32
 * each per row, made empty and filled by the kernel, which reads the
 * 16-bit logits as they are (no fp32 copy, no log-probabilities); it saves
 * (logits, lse, labels). flash_attn/losses/cross_entropy.py's
 * CrossEntropyLoss (reduction "mean"): loss.sum() / (target !=
 * ignore_index).sum(), z_losses dropped. Borrows both. */
static vp_t fused_ce(vp_step *step, vp_t logits, vp_t targets) {
    vp_sim *sim = &step->sim;
    uint64_t rows = vp_at(sim, targets)->numel;
    vp_t losses = vp_new(sim, rows, VP_FP32, "loss.fused.losses");
    vp_t lse = vp_new(sim, rows, VP_FP32, "loss.fused.lse");
    vp_t z_losses = vp_new(sim, rows, VP_FP32, "loss.fused.z_losses");
    vp_node *node = vp_record(sim, backward_fused_ce, "loss.fused", &logits, 1, &losses, 1);
    if (node) {
        vp_save(sim, node, logits);
        vp_save(sim, node, lse);
        vp_save(sim, node, targets);
    }
    vp_drop(sim, lse);
    vp_drop(sim, z_losses);
    vp_t sum = vp_sum(sim, losses, 1, "loss.fused.sum");
    vp_drop(sim, losses);
    vp_t mask = vp_new(sim, rows, VP_BOOL, "loss.fused.not_ignored");
    vp_t count = vp_new(sim, 1, VP_INT64, "loss.fused.count");
    vp_drop(sim, mask);
    vp_t mean = vp_scale(sim, sum, "loss.fused.mean");
    vp_drop(sim, sum);
    vp_drop(sim, count);
    return mean;
}

static const char *ce_check(const vp_op *op) {
    unsigned shift = (unsigned)vp_op_u64(op, CE_SHIFT);
    if (shift != SHIFT_LABELS && (vp_op_flag(op, CE_PER_SEQUENCE) || vp_op_flag(op, CE_UPCAST)))
        return "shift = \"logits\" or \"none\" is a model's own loss: per-token, without upcast";
    return NULL;
}

/* T5ForConditionalGeneration: CrossEntropyLoss(ignore_index=-100) over
 * lm_logits.view(-1, V) and labels.view(-1), as they are. */
static vp_t aligned_ce(vp_step *step, vp_t logits) {
    return log_softmax_nll(step, logits, vp_step_loss_labels(step));
}

/* ---- Liger-Kernel's cross-entropy ---- */

/* LigerCrossEntropyFunction.backward (cross_entropy_backward): the
 * gradient is the saved input itself, scaled in place where the loss's
 * gradient is not one (torch.equal against a new scalar tensor(1.0)). */
static void backward_liger_ce(vp_sim *sim, uint32_t index) {
    vp_scratch(sim, vp_bytes_of(VP_FP32, 1), "loss.liger_ce.one");
    vp_node *node = vp_node_at(sim, index);
    vp_t input = node->saved[0];
    vp_hold(sim, input);
    vp_give_grad(sim, node, 0, input);
}

/* linkedin/Liger-Kernel, src/liger_kernel/ops/cross_entropy.py: with its
 * patch F.cross_entropy is liger_cross_entropy, which transformers'
 * ForCausalLMLoss calls over the upcast logits. cross_entropy_forward:
 * loss_1d, zeros in the input's dtype a row; target_mask (target !=
 * ignore_index) and its count (.item()); the two bounds checks,
 * (target * target_mask).max() and .min(), each an int64 product gone
 * after its reduction; the kernel writes the gradient into the input;
 * reduction mean: torch.sum(loss_1d). The Function saves the input
 * (detached: the same storage). Borrows both. */
static vp_t liger_ce(vp_step *step, vp_t logits, vp_t targets) {
    vp_sim *sim = &step->sim;
    uint64_t rows = vp_at(sim, targets)->numel;
    vp_dtype dt = (vp_dtype)vp_at(sim, logits)->dtype;
    vp_t loss_1d = vp_new(sim, rows, dt, "loss.liger_ce.loss_1d");
    vp_t mask = vp_new(sim, rows, VP_BOOL, "loss.liger_ce.target_mask");
    vp_drop(sim, vp_new(sim, 1, VP_INT64, "loss.liger_ce.n_non_ignore"));
    for (unsigned check = 0; check < 2; check++) { /* max() < V, then min() >= 0 */
        vp_t product = vp_new(sim, rows, VP_INT64, "loss.liger_ce.bounds");
        vp_t extreme = vp_new(sim, 1, VP_INT64, "loss.liger_ce.bounds");
        vp_drop(sim, product);
        vp_t verdict = vp_new(sim, 1, VP_BOOL, "loss.liger_ce.bounds");
        vp_drop(sim, extreme);
        vp_drop(sim, verdict);
    }
    vp_t loss = vp_new(sim, 1, dt, "loss.liger_ce");
    vp_node *node = vp_record(sim, backward_liger_ce, "loss.liger_ce", &logits, 1, &loss, 1);
    if (node) vp_save(sim, node, logits);
    vp_drop(sim, loss_1d);
    vp_drop(sim, mask);
    return loss;
}

static vp_t ce_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_sim *sim = &step->sim;
    /* DTensor's loss_parallel (torch/distributed/tensor/parallel/loss.py)
     * runs the upcast cross-entropy's log_softmax and nll_loss on this
     * rank's vocabulary slice, as below (torchtitan's cross_entropy_loss:
     * pred.float()) */
    if (step->tp > 1 && !vp_framework_of(step->recipe)->dtensor_tp) return vocab_parallel_ce(step, x);
    /* the head computed the loss (a classifier has no lm_head: its own loss runs) */
    if (loss_takes_hidden(step) && !vp_op_flag(op, CE_PER_SEQUENCE)) {
        vp_hold(sim, x);
        return x;
    }
    bool fused = step->recipe->loss == VP_LOSS_FUSED;
    /* a model's own shifted loss runs in its modeling code, unless a loss
     * library replaces it (over the logits the forward returns); a
     * framework running its own model (Megatron's GPTModel) computes its
     * loss over .float() of the logits (fp16_lm_cross_entropy off,
     * Megatron-LM's default), the labels shifted by its data loader */
    bool own_shift = vp_op_u64(op, CE_SHIFT) == SHIFT_LOGITS;
    if (own_shift && vp_framework_of(step->recipe)->hf_modeling && !fused) return shifted_logits_ce(step, x);
    if (vp_op_u64(op, CE_SHIFT) == SHIFT_NONE) return aligned_ce(step, x);
    /* FlashAttention's kernel reads the 16-bit logits as they are */
    bool upcast = (vp_op_flag(op, CE_UPCAST) || own_shift) && !fused;
    vp_t logits32 = upcast ? vp_to(sim, x, VP_FP32, "loss.logits_float") : (vp_hold(sim, x), x);
    bool per_sequence = vp_op_flag(op, CE_PER_SEQUENCE); /* CrossEntropyLoss()(logits.view(-1, n), labels.view(-1)) */
    vp_t padded = per_sequence ? 0 : vp_new(sim, vp_numel(sim, step->batch, step->seq + 1), VP_INT64, "loss.labels_pad");
    /* one sequence: labels[..., 1:] is contiguous already, and .contiguous() returns it */
    vp_t labels = vp_step_loss_labels(step);
    vp_t shifted = per_sequence          ? (vp_hold(sim, labels), labels)
                   : step->batch == 1 ? vp_view(sim, padded, step->tokens, "loss.shift_labels")
                                      : vp_new(sim, step->tokens, VP_INT64, "loss.shift_labels");
    vp_t loss = fused                                        ? fused_ce(step, logits32, shifted)
                : step->recipe->loss == VP_LOSS_LIGER_CE ? liger_ce(step, logits32, shifted)
                                                           : log_softmax_nll(step, logits32, shifted);
    vp_drop(sim, shifted);
    vp_drop(sim, padded);
    vp_drop(sim, logits32);
    return loss;
}

/* The loss libraries (loss = fused, chunked, fused-linear, cut) replace a
 * causal language model's next-token cross-entropy: a classifier's loss
 * over one label per sequence and an encoder-decoder's over its decoder
 * are modelled as transformers computes them only. */
static const char *ce_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    if (recipe->loss == VP_LOSS_CROSS_ENTROPY) return NULL;
    if (model->facts.loss_per_sequence)
        return "loss: a classifier's loss (one label per sequence) is modelled as transformers computes it: "
               "loss = cross-entropy";
    if (vp_model_encoder_decoder(model))
        return "loss: an encoder-decoder's loss is modelled as transformers computes it: loss = cross-entropy";
    /* (Liger's patch reaches a model's own CrossEntropyLoss too: not modelled) */
    const vp_op *ce = vp_section_find(&model->section[VP_SECTION_FINAL], &vp_op_cross_entropy);
    if (recipe->loss == VP_LOSS_LIGER_CE && ce && vp_op_u64(ce, CE_SHIFT) != SHIFT_LABELS)
        return "loss: liger-ce is modelled in transformers' ForCausalLMLoss; this model computes its own shifted "
               "loss";
    return NULL;
}

const vp_op_kind vp_op_cross_entropy = {
    .name = "cross_entropy",
    .doc = "causal-LM cross-entropy over the logits as HF computes it, with the fp32 upcast",
    .fields = ce_fields,
    .n_fields = CE_FIELDS,
    .roles = VP_ROLE_HEAD | VP_ROLE_LOSS,
    .cost = VP_COST_CROSS_ENTROPY,
    .facts = ce_facts,
    .check = ce_check,
    .recipe_problem = ce_recipe_problem,
    .forward = ce_forward,
};

/* ---- torchtune's chunked output and loss ---- */

/* pytorch/torchtune, torchtune/modules/transformer.py
 * (TransformerDecoder.chunked_output, 0.4+; .chunk before):
 *   [self.output(chunk) for chunk in last_hidden_state.tensor_split(num_output_chunks, dim=1)]
 * views of the hidden states along the sequence, each through the output
 * projection; with several sequences a chunk is not contiguous and
 * matmul's reshape copies it, the copy what the projection keeps. The
 * recipes (recipes/full_finetune_single_device.py) shift the labels with
 * torch.hstack((labels[..., 1:], ignore_labels_cache)), call the loss and
 * `del logits` before backward: the chunks go when the loss returns,
 * whatever keep_logits says.
 * torchtune/modules/loss/ce_chunked_output_loss.py (CEWithChunkedOutputLoss):
 *   total_elements = (labels != ignore_index).sum()
 *   labels = [t.reshape(-1) for t in labels.tensor_split(num_output_chunks, dim=1)]
 *   total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, reduction="sum")
 *   return total_loss / total_elements
 * each chunk's fp32 copy freed after its loss, its log_softmax output kept
 * for backward: the fp32 log-probabilities of every token are still kept,
 * but never two fp32 copies at once. */
static vp_t chunked_head_loss(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t vocab) {
    vp_sim *sim = &step->sim;
    uint64_t b = step->batch, s = step->seq, h = vp_at(sim, x)->numel / step->tokens;
    /* tensor_split(n, dim=1): s / n each, one more for the first s % n
     * (empty chunks, when n > s, make nothing and are left out) */
    unsigned parts = step->recipe->loss_chunks < s ? step->recipe->loss_chunks : (unsigned)s;
    uint64_t sizes[VP_LOSS_CHUNKS_MAX] = {0}, rows[VP_LOSS_CHUNKS_MAX];
    vp_t hidden[VP_LOSS_CHUNKS_MAX], logits[VP_LOSS_CHUNKS_MAX];
    for (unsigned i = 0; i < parts; i++) {
        rows[i] = vp_numel(sim, b, s / parts + (i < s % parts));
        sizes[i] = vp_numel(sim, rows[i], h);
    }
    vp_split_sizes(sim, x, parts, sizes, hidden, "lm_head.chunk");
    for (unsigned i = 0; i < parts; i++) {
        vp_t input = vp_contiguous(sim, hidden[i], b == 1, "lm_head.chunk_reshape");
        logits[i] = vp_project_column(step, input, weight, bias, vocab, "lm_head");
        vp_drop(sim, input);
        vp_drop(sim, hidden[i]);
    }
    vp_t labels = vp_new(sim, step->tokens, VP_INT64, "loss.shift_labels"); /* the recipe's hstack */
    vp_t mask = vp_new(sim, step->tokens, VP_BOOL, "loss.not_ignored");
    vp_t total_elements = vp_new(sim, 1, VP_INT64, "loss.total_elements");
    vp_drop(sim, mask);
    vp_t total = 0;
    for (unsigned i = 0; i < parts; i++) {
        vp_t target = b == 1 ? vp_view(sim, labels, rows[i], "loss.chunk_labels")
                             : vp_new(sim, rows[i], VP_INT64, "loss.chunk_labels");
        /* compile_loss: compute_cross_entropy (the upcast and the loss) a
         * compiled region, its saved tensors the min cut's */
        uint32_t first_node = sim->n_nodes;
        vp_t first_tensor = sim->n_tensors;
        /* compiled, its forward is Inductor's fused kernels: the fp32 upcast
         * and the log-probabilities never reach memory (what the min cut
         * saves is written: vp_compile_region) */
        sim->fusing = step->recipe->compile_loss;
        vp_t logits32 = vp_to(sim, logits[i], VP_FP32, "loss.logits_float");
        vp_t loss = log_softmax_nll(step, logits32, target);
        sim->fusing = false;
        vp_materialize(sim, loss); /* the region's output */
        vp_drop(sim, logits32);
        if (step->recipe->compile_loss) vp_compile_region(sim, first_node, sim->n_nodes, first_tensor);
        vp_drop(sim, target);
        /* total_loss = 0.0 + loss, then total_loss += loss (in place) */
        vp_t next = total ? vp_add_(sim, total, loss, "loss.total") : vp_shift(sim, loss, VP_FP32, 1, "loss.total");
        vp_drop(sim, total);
        vp_drop(sim, loss);
        total = next;
    }
    vp_t mean = vp_scale(sim, total, "loss.mean"); /* total_loss / total_elements */
    vp_drop(sim, total);
    vp_drop(sim, total_elements);
    vp_drop(sim, labels);
    for (unsigned i = 0; i < parts; i++) vp_drop(sim, logits[i]); /* del logits */
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, 0); /* the outputs keep none */
    return mean;
}

/* ---- torchtune's linear cross-entropy ---- */

/* torch.where(targets != ignore_index)[0]: a bool mask, then nonzero's
 * [n, 1] int64 whose column the tuple views; the mask goes when where
 * returns. Returns the column (its storage kept by the view). */
static vp_t target_rows(vp_sim *sim, uint64_t tokens, uint64_t n, const char *label) {
    vp_t mask = vp_new(sim, tokens, VP_BOOL, "loss.not_ignored");
    vp_t nonzero = vp_new(sim, n, VP_INT64, label);
    vp_drop(sim, mask);
    vp_t rows = vp_view(sim, nonzero, n, label);
    vp_drop(sim, nonzero);
    return rows;
}

/* pytorch/torchtune main after 0.6.1 (commit 9c06c8bd, April 2025; the
 * configs' loss since), torchtune/modules/loss/cross_entropy_loss.py
 * (LinearCrossEntropyLoss, num_output_chunks=8, mask_ignored_tokens=True).
 * The model skips its output layer (set_model_output) and returns the
 * normed hidden states; the loss:
 *   total_valid_tokens = torch.where(targets != ignore_index)[0].numel()
 *   outputs, targets = mask_inputs(outputs.reshape(-1, h), targets.reshape(-1))
 *       indices = torch.where(target != ignore_index)[0]
 *       hidden.index_select(0, indices), target.index_select(0, indices)
 *   for each of tensor_split(num_output_chunks, dim=0):
 *       logits = self.linear_projection(hidden_chunk)
 *       total_loss += F.cross_entropy(logits.float(), target_chunk, reduction="sum")
 *   return total_loss / total_valid_tokens
 * total_loss starts as torch.tensor(0.0). The labels come shifted from the
 * dataset (torchtune/datasets/_sft.py: tokens[1:] and ignore_index last),
 * so every token but each sequence's last has a target here; a prompt or
 * padding masked from the loss makes the kept rows, and the memory, fewer
 * (this is the bound). Each chunk's logits and fp32 copy go when its loss
 * returns, its log_softmax output stays for backward; index_select keeps
 * the indices, not the hidden states, which the recipe then deletes. */
static vp_t chunked_linear_loss(vp_step *step, vp_t x, vp_t weight, uint64_t vocab) {
    vp_sim *sim = &step->sim;
    uint64_t tokens = step->tokens, h = vp_at(sim, x)->numel / tokens;
    uint64_t valid = tokens - step->batch;
    vp_drop(sim, target_rows(sim, tokens, valid, "loss.total_valid_tokens"));
    vp_t indices = target_rows(sim, tokens, valid, "loss.valid_rows");
    vp_t hidden = vp_index(sim, x, indices, vp_numel(sim, valid, h), "loss.valid_hidden");
    vp_t targets = vp_new(sim, valid, VP_INT64, "loss.valid_targets");
    vp_drop(sim, indices);
    /* tensor_split(n, dim=0): valid / n rows each, one more for the first
     * valid % n; empty chunks (n > valid) make nothing and are left out */
    unsigned parts = step->recipe->loss_chunks < valid ? step->recipe->loss_chunks : (unsigned)valid;
    uint64_t sizes[VP_LOSS_CHUNKS_MAX], rows[VP_LOSS_CHUNKS_MAX];
    vp_t chunks[VP_LOSS_CHUNKS_MAX];
    for (unsigned i = 0; i < parts; i++) {
        rows[i] = valid / parts + (i < valid % parts);
        sizes[i] = vp_numel(sim, rows[i], h);
    }
    vp_split_sizes(sim, hidden, parts, sizes, chunks, "loss.hidden_chunk");
    vp_drop(sim, hidden);
    vp_t total = vp_new(sim, 1, VP_FP32, "loss.total");
    for (unsigned i = 0; i < parts; i++) {
        vp_t target = vp_view(sim, targets, rows[i], "loss.target_chunk");
        vp_t logits = vp_project_column(step, chunks[i], weight, 0, vocab, "lm_head");
        vp_t logits32 = vp_to(sim, logits, VP_FP32, "loss.logits_float");
        vp_t loss = log_softmax_nll(step, logits32, target);
        vp_drop(sim, logits32);
        vp_drop(sim, logits);
        vp_drop(sim, target);
        vp_t next = vp_add_(sim, total, loss, "loss.total");
        vp_drop(sim, total);
        vp_drop(sim, loss);
        total = next;
    }
    vp_t mean = vp_scale(sim, total, "loss.mean");
    vp_drop(sim, total);
    for (unsigned i = 0; i < parts; i++) vp_drop(sim, chunks[i]);
    vp_drop(sim, targets);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, 0); /* the outputs keep none */
    return mean;
}

/* ---- Liger's fused linear cross-entropy ---- */

/* Backward of LigerFusedLinearCrossEntropyFunction: the gradients made in
 * the forward are handed on (scaled in place unless grad_output equals
 * torch.tensor(1.0), a 0-dim tensor made for the comparison). */
static void backward_fused_linear(vp_sim *sim, uint32_t index) {
    vp_scratch(sim, 4, "loss.fused_linear.one");
    for (unsigned i = 0; i < 2; i++) {
        vp_node *node = vp_node_at(sim, index);
        vp_t grad = node->saved[i];
        if (!grad || !vp_needs_grad(sim, node, i)) continue;
        vp_hold(sim, grad);
        vp_give_grad(sim, node, i, grad);
    }
}

static uint64_t next_power_of_2(uint64_t n) {
    uint64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* linkedin/Liger-Kernel, src/liger_kernel/ops/fused_linear_cross_entropy.py
 * (fused_linear_cross_entropy_forward, 2025-26), under no_grad inside the
 * Function: grad_input = zeros_like(_input), grad_weight = zeros_like(weight)
 * when it is trained (accum_dtype None: the weight's dtype), loss_1d fp32 per
 * token, target_mask = target != ignore_index; the tokens in chunks of
 * min(next_power_of_2(ceil(BT / ceil(V / H))), BT) rows. On CUDA with
 * matching dtypes (_can_use_mm_out) one logits buffer of a chunk is made
 * for the loop and every product written with out=, nothing else; otherwise
 * (autocast, the CPU twin) each chunk's logits are `_input_chunk @
 * weight.t()`, freed at the end of its iteration, grad_input[rows] a
 * product copied into the slice, and grad_weight, outside CUDA's addmm
 * paths, `+= torch.mm(grad_logits_chunk.t(), _input_chunk).float()`: a
 * weight-sized product and its fp32 copy per chunk. The kernel writes each
 * chunk's gradient over its logits. The Function saves grad_input and
 * grad_weight; backward hands them on. The wrapper (LigerForCausalLMLoss)
 * shifts the labels as HF's ForCausalLMLoss does. No logits are kept. */
static vp_t fused_linear_loss(vp_step *step, vp_t x, vp_t weight, uint64_t vocab) {
    vp_sim *sim = &step->sim;
    uint64_t bt = step->tokens, h = vp_at(sim, x)->numel / bt;
    vp_t padded = vp_new(sim, vp_numel(sim, step->batch, step->seq + 1), VP_INT64, "loss.labels_pad");
    vp_t target = step->batch == 1 ? vp_view(sim, padded, bt, "loss.shift_labels")
                                   : vp_new(sim, bt, VP_INT64, "loss.shift_labels");
    vp_t wa = vp_autocast_low(step, weight, "lm_head"); /* the matmuls' weight under autocast */
    vp_dtype dt = (vp_dtype)vp_at(sim, wa)->dtype, x_dtype = (vp_dtype)vp_at(sim, x)->dtype;
    vp_dtype w_dtype = (vp_dtype)vp_at(sim, weight)->dtype;
    bool cuda = step->recipe->device == VP_DEVICE_CUDA;
    bool mm_out = cuda && wa == weight && x_dtype == w_dtype;
    bool trains_weight = vp_at(sim, weight)->requires_grad;
    vp_t grad_input = vp_new(sim, vp_at(sim, x)->numel, x_dtype, "loss.fused_linear.grad_input");
    vp_t grad_weight = trains_weight ? vp_new(sim, vp_at(sim, weight)->numel, w_dtype, "loss.fused_linear.grad_weight")
                                     : 0;
    vp_t loss_1d = vp_new(sim, bt, VP_FP32, "loss.fused_linear.loss_1d");
    vp_t mask = vp_new(sim, bt, VP_BOOL, "loss.fused_linear.target_mask");
    uint64_t inc_factor = (vocab + h - 1) / h;
    uint64_t chunk = next_power_of_2((bt + inc_factor - 1) / inc_factor);
    if (chunk > bt) chunk = bt;
    vp_t storage = mm_out ? vp_new(sim, vp_numel(sim, chunk, vocab), dt, "loss.fused_linear.logits_storage") : 0;
    for (uint64_t start = 0; start < bt; start += chunk) {
        uint64_t rows = bt - start < chunk ? bt - start : chunk;
        vp_t logits = mm_out ? 0 : vp_new(sim, vp_numel(sim, rows, vocab), dt, "loss.fused_linear.logits_chunk");
        if (!mm_out) /* grad_input[rows] = grad_logits_chunk @ weight */
            vp_drop(sim, vp_new(sim, vp_numel(sim, rows, h), dt, "loss.fused_linear.grad_input_chunk"));
        if (grad_weight && cuda && dt != VP_FP32 && x_dtype != dt) /* input_chunk.to(grad_logits' dtype) for addmm */
            vp_drop(sim, vp_new(sim, vp_numel(sim, rows, h), dt, "loss.fused_linear.input_chunk"));
        bool addmm = cuda && dt != VP_FP32 && (w_dtype == VP_FP32 || w_dtype == dt);
        if (grad_weight && !addmm) { /* the legacy fallback: torch.mm(...).float() */
            vp_t product = vp_new(sim, vp_at(sim, weight)->numel, dt, "loss.fused_linear.grad_weight_chunk");
            vp_t product32 = vp_to(sim, product, VP_FP32, "loss.fused_linear.grad_weight_chunk");
            vp_drop(sim, product);
            /* a 16-bit grad_weight += fp32 on the CPU: TensorIterator casts
             * self to the common dtype and computes into an fp32 temporary
             * it copies back (CUDA casts inside the kernel) */
            vp_t promoted[2] = {0, 0};
            if (!cuda && w_dtype != VP_FP32)
                for (unsigned i = 0; i < 2; i++)
                    promoted[i] = vp_new(sim, vp_at(sim, weight)->numel, VP_FP32, "loss.fused_linear.grad_weight_add");
            vp_drop(sim, promoted[0]);
            vp_drop(sim, promoted[1]);
            vp_drop(sim, product32);
        }
        vp_drop(sim, logits);
    }
    vp_drop(sim, storage);
    vp_t loss = vp_new(sim, 1, VP_FP32, "loss.fused_linear.loss");
    vp_t in[2] = {x, weight};
    vp_node *node = vp_record(sim, backward_fused_linear, "loss.fused_linear", in, 2, &loss, 1);
    if (node) {
        vp_save_at(sim, node, 0, grad_input);
        if (grad_weight) vp_save_at(sim, node, 1, grad_weight);
    }
    vp_drop(sim, grad_input);
    vp_drop(sim, grad_weight);
    vp_drop(sim, loss_1d);
    vp_drop(sim, mask);
    vp_drop(sim, wa);
    vp_drop(sim, target);
    vp_drop(sim, padded);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, 0); /* the outputs keep none */
    return loss;
}

/* ---- Apple's cut cross-entropy ---- */

/* Backward of cce's LinearCrossEntropyFunction (cut_cross_entropy/cce.py,
 * cce_backward.py): sort_logit_avg (torch.argsort, int64, then .to(int32))
 * orders the vocabulary; cce_backward_kernel makes de = zeros_like(e) and
 * dc = zeros_like(c) (accum_e_fp32 and accum_c_fp32 off by default) with
 * int32 lock tables of ceil(rows / 128) x ceil(H / 64) each, recomputes the
 * logits blockwise inside the kernel, and hands de and dc on: nothing
 * logits-sized is made. */
static void backward_cut(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    uint64_t vocab = node->aux[0], rows = node->aux[1], h = node->aux[2];
    vp_t order = vp_new(sim, vocab, VP_INT32, "loss.cut.vocab_ordering");
    vp_scratch(sim, vocab * 8, "loss.cut.argsort");
    uint64_t locks = ((rows + 127) / 128 + (vocab + 127) / 128) * ((h + 63) / 64);
    vp_t lock_tables = vp_new(sim, locks, VP_INT32, "loss.cut.locks");
    vp_t grads[2] = {0, 0};
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (vp_needs_grad(sim, node, i)) grads[i] = vp_grad_like(sim, node->in[i], "loss.cut.grad");
    }
    vp_drop(sim, lock_tables);
    vp_drop(sim, order);
    for (unsigned i = 0; i < 2; i++) {
        node = vp_node_at(sim, index);
        if (grads[i]) vp_give_grad(sim, node, i, grads[i]);
    }
}

/* apple/ml-cross-entropy, cut_cross_entropy/cce.py
 * (LinearCrossEntropyFunction.forward, with transformers' patch: e the
 * hidden states, c the head's weight, shift on): cce_lse_forward_kernel
 * computes each token's log-sum-exp blockwise (fp32) and, with the default
 * filter_eps "auto", the average logit of each vocabulary entry (fp32);
 * indexed_neg_dot_forward_kernel the target logit (fp32, the loss made in
 * it in place); it saves e, c, lse, the targets (a view of the labels),
 * the valid positions (taken as int64 per token) and logit_avg. No logits
 * exist at any time. */
static vp_t cut_loss(vp_step *step, vp_t x, vp_t weight) {
    vp_sim *sim = &step->sim;
    uint64_t bt = step->tokens, h = vp_at(sim, x)->numel / bt, vocab = vp_at(sim, weight)->numel / h;
    vp_t labels = vp_step_loss_labels(step);
    vp_t targets = vp_view(sim, labels, bt, "loss.cut.targets");
    vp_t valids = vp_new(sim, bt, VP_INT64, "loss.cut.valids");
    vp_t lse = vp_new(sim, bt, VP_FP32, "loss.cut.lse");
    vp_t logit_avg = vp_new(sim, vocab, VP_FP32, "loss.cut.logit_avg");
    vp_t neg_dot = vp_new(sim, bt, VP_FP32, "loss.cut.neg_dot");
    vp_t loss = vp_new(sim, 1, VP_FP32, "loss.cut.loss");
    vp_t in[2] = {x, weight};
    vp_node *node = vp_record(sim, backward_cut, "loss.cut", in, 2, &loss, 1);
    if (node) {
        node->aux[0] = vocab;
        node->aux[1] = bt;
        node->aux[2] = h;
        vp_save(sim, node, x);
        vp_save(sim, node, weight);
        vp_save(sim, node, lse);
        vp_save(sim, node, targets);
        vp_save(sim, node, valids);
        vp_save(sim, node, logit_avg);
    }
    vp_drop(sim, neg_dot);
    vp_drop(sim, logit_avg);
    vp_drop(sim, lse);
    vp_drop(sim, valids);
    vp_drop(sim, targets);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, 0); /* the outputs keep none */
    return loss;
}
