/* op_classify.c — a sequence-classification head (BertForSequenceClassification):
 * the pooler on the first token and the classifier over the labels. */
#include "ops.h"

/* ---- pooler ---- */

enum { POOLER_HIDDEN, POOLER_FIELDS };

static const vp_field pooler_fields[POOLER_FIELDS] = {
    [POOLER_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
};

static unsigned pooler_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    (void)split;
    uint64_t h = vp_op_u64(op, POOLER_HIDDEN);
    out[0] = vp_param(h * h, "pooler.dense.weight", VP_MODULE_DENSE, h); /* BertPooler.dense: a LoRA "dense" too */
    out[1] = vp_param(h, "pooler.dense.bias", VP_MODULE_DENSE, 0);
    return 2;
}

/* BertPooler: hidden_states[:, 0] (a view, which keeps the whole last
 * hidden state alive wherever it is kept; select_backward makes a zero
 * gradient of the whole), dense, tanh (keeps its output). */
static vp_t pooler_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, POOLER_HIDDEN);
    /* BertModel returns the sequence output beside the pooled one, and
     * the classifier's caller keeps both (outputs) until it returns */
    vp_step_keep_local(step, x, VP_LOCAL_OF_WRAPPER);
    vp_t first = vp_slice(sim, x, vp_numel(sim, step->batch, h), "pooler.first_token");
    vp_t dense = vp_project(step, first, leaves[0], leaves[1], h, "pooler.dense");
    vp_drop(sim, first);
    vp_t pooled = vp_unary(sim, dense, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, dense)->dtype, "pooler.tanh");
    vp_drop(sim, dense);
    return pooled;
}

const vp_op_kind vp_op_pooler = {
    .name = "pooler",
    .doc = "BERT's pooler: the first token through a dense layer and tanh",
    .fields = pooler_fields,
    .n_fields = POOLER_FIELDS,
    .leaves = pooler_leaves,
    .forward = pooler_forward,
};

/* ---- classifier ---- */

enum { CLASSIFIER_HIDDEN, CLASSIFIER_LABELS, CLASSIFIER_DROPOUT, CLASSIFIER_FIELDS };

static const vp_field classifier_fields[CLASSIFIER_FIELDS] = {
    [CLASSIFIER_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
    [CLASSIFIER_LABELS] = {"labels", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "num_labels"},
    [CLASSIFIER_DROPOUT] = {"dropout", VP_FIELD_NUMBER, false, 0, 0, 0.999999, NULL, "classifier_dropout"},
};

static unsigned classifier_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    (void)split;
    uint64_t h = vp_op_u64(op, CLASSIFIER_HIDDEN), n = vp_op_u64(op, CLASSIFIER_LABELS);
    out[0] = vp_param(n * h, "classifier.weight", VP_MODULE_CLASSIFIER, n);
    out[1] = vp_param(n, "classifier.bias", VP_MODULE_CLASSIFIER, 0);
    return 2;
}

/* dropout, then the labels' logits, which the model's output keeps
 * (SequenceClassifierOutput.logits). */
static vp_t classifier_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t dropped = vp_train_dropout(step, x, op->value[CLASSIFIER_DROPOUT], "classifier.dropout");
    vp_t logits = vp_project(step, dropped, leaves[0], leaves[1], vp_op_u64(op, CLASSIFIER_LABELS), "classifier");
    vp_drop(sim, dropped);
    vp_hold(sim, logits);
    vp_step_put_tensor(step, VP_TENSOR_LOGITS, logits);
    return logits;
}

const vp_op_kind vp_op_classifier = {
    .name = "classifier",
    .doc = "a sequence classifier: dropout and a linear layer to the labels' logits",
    .fields = classifier_fields,
    .n_fields = CLASSIFIER_FIELDS,
    .roles = VP_ROLE_HEAD,
    .cost = VP_COST_CLASSIFIER,
    .leaves = classifier_leaves,
    .forward = classifier_forward,
};
