/* op_head.c — the language-model head and the loss HF computes from it. */
#include "ops.h"

/* ---- lm_head ---- */

enum { HEAD_VOCAB, HEAD_HIDDEN, HEAD_TIED, HEAD_BIAS, HEAD_SCALE_INPUT, HEAD_SCALE_LOGITS, HEAD_SOFTCAP, HEAD_FIELDS };

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
};

enum { HEAD_W, HEAD_B, HEAD_SLOTS };

/* Column-parallel over the padded vocabulary (Megatron's output layer). */
static unsigned head_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    uint64_t v = vp_padded_vocab(vp_op_u64(op, HEAD_VOCAB), tp) / tp, h = vp_op_u64(op, HEAD_HIDDEN);
    out[HEAD_W] = vp_param(vp_op_flag(op, HEAD_TIED) ? 0 : v * h, "lm_head.weight", VP_MODULE_LM_HEAD, v);
    out[HEAD_B] = vp_param(vp_op_flag(op, HEAD_BIAS) ? v : 0, "lm_head.bias", VP_MODULE_LM_HEAD, 0);
    return HEAD_SLOTS;
}

/* logits = self.lm_head(hidden_states): the model's outputs object keeps
 * them (CausalLMOutputWithPast.logits). */
static vp_t head_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_t weight = vp_op_flag(op, HEAD_TIED) ? step->tied_weight : leaves[HEAD_W];
    uint64_t vocab = vp_padded_vocab(vp_op_u64(op, HEAD_VOCAB), step->tp) / step->tp;
    /* T5ForConditionalGeneration: sequence_output * (self.model_dim**-0.5)
     * when the head is tied; the product is what lm_head keeps, and the
     * rebound name (sequence_output) until the model returns */
    bool scaled_input = vp_op_flag(op, HEAD_SCALE_INPUT);
    vp_t input = scaled_input ? vp_scale(&step->sim, x, "lm_head.scale_input") : (vp_hold(&step->sim, x), x);
    if (scaled_input) vp_step_keep_local(step, input, VP_LOCAL_OF_WRAPPER);
    vp_t logits = vp_project_column(step, input, weight, leaves[HEAD_B], vocab, "lm_head");
    vp_drop(&step->sim, input);
    if (vp_op_flag(op, HEAD_SCALE_LOGITS)) { /* logits = logits / self.config.logits_scaling */
        vp_t scaled = vp_scale(&step->sim, logits, "lm_head.logits_scaling");
        vp_drop(&step->sim, logits);
        logits = scaled;
    }
    /* Gemma2ForCausalLM: logits / cap, torch.tanh (kept), * cap */
    if (op->value[HEAD_SOFTCAP] > 0) logits = vp_softcap(&step->sim, logits, "lm_head.softcap");
    vp_hold(&step->sim, logits);
    step->logits = logits;
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

static vp_t ce_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_sim *sim = &step->sim;
    if (step->tp > 1) return vocab_parallel_ce(step, x);
    if (vp_op_u64(op, CE_SHIFT) == SHIFT_LOGITS) return shifted_logits_ce(step, x);
    if (vp_op_u64(op, CE_SHIFT) == SHIFT_NONE) return aligned_ce(step, x);
    vp_t logits32 = vp_op_flag(op, CE_UPCAST) ? vp_to(sim, x, VP_FP32, "loss.logits_float")
                                               : (vp_hold(sim, x), x);
    bool per_sequence = vp_op_flag(op, CE_PER_SEQUENCE); /* CrossEntropyLoss()(logits.view(-1, n), labels.view(-1)) */
    vp_t padded = per_sequence ? 0 : vp_new(sim, vp_numel(sim, step->batch, step->seq + 1), VP_INT64, "loss.labels_pad");
    /* one sequence: labels[..., 1:] is contiguous already, and .contiguous() returns it */
    vp_t labels = vp_step_loss_labels(step);
    vp_t shifted = per_sequence          ? (vp_hold(sim, labels), labels)
                   : step->batch == 1 ? vp_view(sim, padded, step->tokens, "loss.shift_labels")
                                      : vp_new(sim, step->tokens, VP_INT64, "loss.shift_labels");
    vp_t loss = log_softmax_nll(step, logits32, shifted);
    vp_drop(sim, shifted);
    vp_drop(sim, padded);
    vp_drop(sim, logits32);
    return loss;
}

const vp_op_kind vp_op_cross_entropy = {
    .name = "cross_entropy",
    .doc = "causal-LM cross-entropy over the logits as HF computes it, with the fp32 upcast",
    .fields = ce_fields,
    .n_fields = CE_FIELDS,
    .roles = VP_ROLE_HEAD | VP_ROLE_LOSS,
    .facts = ce_facts,
    .check = ce_check,
    .forward = ce_forward,
};
