/* op_basic.c — dropout, the residual branch, projections and op chaining. */
#include "lora.h"
#include "ops.h"
#include "framework.h"

/* Linear8bitLt.forward (bitsandbytes 0.45+): bnb.matmul(x, self.weight,
 * bias=self.bias) on x as it comes, the bias cast to x's dtype and fused. */
static vp_t project_int8(vp_step *step, vp_t x, vp_t weight, uint64_t out_features, const char *label) {
    vp_sim *sim = &step->sim;
    uint64_t in = vp_at(sim, weight)->numel / out_features;
    vp_t y = vp_linear_int8(sim, x, weight, step->recipe->int8_threshold > 0, vp_at(sim, x)->numel / (in ? in : 1),
                            out_features, label);
    if (vp_at(sim, y)->requires_grad) vp_step_ctx_hold(step, x); /* ctx.tensors, until the graph goes */
    return y;
}

/* bnb.nn.Linear4bit.forward (bitsandbytes 0.45-0.46): x and the bias cast
 * to the compute dtype, matmul_4bit with the bias fused, the output cast
 * back to x's dtype. */
static vp_t project_4bit(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, const char *label) {
    vp_sim *sim = &step->sim;
    vp_dtype compute = (vp_dtype)vp_at(sim, weight)->dtype, input = (vp_dtype)vp_at(sim, x)->dtype;
    uint64_t in = vp_at(sim, weight)->numel / out_features;
    vp_t xc = vp_to(sim, x, compute, "linear4bit.cast_input");
    vp_t bc = bias ? vp_to(sim, bias, compute, "linear4bit.cast_bias") : 0;
    vp_t y = vp_linear_4bit(sim, xc, weight, vp_dequant_absmax_numel(step->recipe, vp_at(sim, weight)->numel),
                            vp_at(sim, x)->numel / (in ? in : 1), out_features, label);
    vp_t out = vp_to(sim, y, input, "linear4bit.cast_output");
    vp_drop(sim, y);
    vp_drop(sim, bc); /* the cast x and bias are forward's locals until it returns */
    vp_drop(sim, xc);
    return out;
}

/* Transformer Engine quantizes a GEMM's input rowwise (for the GEMM, then
 * dropped) and columnwise (saved for the weight gradient). Megatron's q, k
 * and v are one GEMM (linear_qkv), its gate and up one (linear_fc1): the
 * projections of one input within an op share one quantization. Returns
 * the columnwise copy (a new reference) and, on a new quantization, the
 * rowwise one in *rowwise. */
static vp_t fp8_input(vp_step *step, vp_t x, vp_t *rowwise) {
    vp_sim *sim = &step->sim;
    if (step->fp8_input == x) {
        vp_hold(sim, step->fp8_columnwise);
        return step->fp8_columnwise;
    }
    vp_step_clear_fp8(step);
    uint64_t n = vp_at(sim, x)->numel;
    vp_t columnwise = vp_new(sim, n, VP_FP8_E4M3, "fp8 input (columnwise)");
    *rowwise = vp_new(sim, n, VP_FP8_E4M3, "fp8 input (rowwise)");
    vp_hold(sim, x);
    vp_hold(sim, columnwise);
    step->fp8_input = x;
    step->fp8_columnwise = columnwise;
    return columnwise;
}

void vp_step_clear_fp8(vp_step *step) {
    vp_drop(&step->sim, step->fp8_input);
    vp_drop(&step->sim, step->fp8_columnwise);
    step->fp8_input = step->fp8_columnwise = 0;
}

/* torchtitan's plan with Float8 tensorwise (parallelize.py apply_tp,
 * enable_float8_tensorwise_tp; rowwise recipes keep the plain styles):
 * torchao's Float8ColwiseParallel, Float8RowwiseParallel and
 * PrepareFloat8ModuleInput (float8_tensor_parallel.py) on the linears
 * torchao swapped (`weight`'s fp8 flag). */
static bool float8_tp(vp_step *step, vp_t weight) {
    return weight && step->tp > 1 && vp_framework_of(step->recipe)->dtensor_tp && step->precision->fp8_dynamic &&
           step->recipe->fp8_recipe == VP_FLOAT8_TENSORWISE && vp_at(&step->sim, weight)->fp8;
}

static vp_t project(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, bool gather,
                    const char *label) {
    vp_sim *sim = &step->sim;
    /* Linear4bit and Linear8bitLt.forward: `if self.bias.dtype != x.dtype:
     * self.bias.data = self.bias.data.to(x.dtype)`, for good: the step runs
     * again with that bias made in x's dtype */
    if (vp_at(sim, weight)->quantized && bias && vp_at(sim, bias)->dtype != vp_at(sim, x)->dtype)
        vp_step_recast_leaf(step, bias, (vp_dtype)vp_at(sim, x)->dtype);
    if (vp_at(sim, weight)->quantized && step->recipe->quant == VP_QUANT_INT8)
        return vp_lora_forward(step, x, weight, bias, project_int8(step, x, weight, out_features, label), label);
    if (vp_at(sim, weight)->quantized)
        return vp_lora_forward(step, x, weight, bias, project_4bit(step, x, weight, bias, out_features, label), label);
    vp_t xa = vp_autocast_low(step, x, label);
    vp_t wa = vp_autocast_low(step, weight, label);
    vp_t ba = bias ? vp_autocast_low(step, bias, label) : 0;
    uint64_t in = vp_at(sim, weight)->numel / out_features;
    uint64_t rows = vp_at(sim, x)->numel / (in ? in : 1);
    vp_t y;
    if (gather) { /* under sequence parallelism TE keeps the FP8 shard; modelled as the 16-bit one */
        y = vp_gathered_linear(sim, xa, wa, ba, step->tokens, out_features, step->tp, label);
    } else if (vp_at(sim, weight)->fp8 && step->precision->fp8_dynamic) {
        /* Float8Linear.forward: the GEMM, then `output + self.bias` */
        vp_t mm = vp_linear_float8(sim, xa, wa, step->recipe->fp8_all_gather, step->recipe->fp8_recipe,
                                   step->recipe->device == VP_DEVICE_CUDA, rows, out_features, label);
        y = ba ? vp_add(sim, mm, ba, vp_at(sim, mm)->numel, label) : mm;
        if (ba) vp_drop(sim, mm);
    } else if (vp_at(sim, weight)->fp8) {
        vp_t rowwise = 0, columnwise = fp8_input(step, xa, &rowwise);
        y = vp_linear_fp8(sim, xa, columnwise, wa, ba, rows, out_features, label);
        vp_drop(sim, rowwise);
        vp_drop(sim, columnwise);
    } else {
        y = vp_linear(sim, xa, wa, ba, rows, out_features, vp_at(sim, weight)->conv1d, label);
    }
    vp_drop(sim, xa);
    vp_drop(sim, wa);
    vp_drop(sim, ba);
    return vp_lora_forward(step, x, weight, bias, y, label);
}

vp_t vp_project(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, const char *label) {
    return project(step, x, weight, bias, out_features, false, label);
}

/* Megatron's column-parallel linear gathers its input itself under
 * sequence parallelism (and saves the shard); under DTensor's the module
 * gathered it (vp_module_input) and the linear saves the gathered rows. */
vp_t vp_project_column(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_local, const char *label) {
    bool gather = step->sp && !vp_framework_of(step->recipe)->dtensor_tp;
    if (!float8_tp(step, weight)) return project(step, x, weight, bias, out_local, gather, label);
    /* Float8ColwiseParallel: an input not yet float8 is cast here (the
     * module's float8 input passes as it is); the output's gradient is
     * cast to float8 once (NoopFwToFloat8BwDynamic) */
    vp_sim *sim = &step->sim;
    vp_t x8 = vp_at(sim, x)->dtype == VP_FP8_E4M3 ? 0 : vp_float8_input(sim, x, 1, 0, "float8.colwise_input");
    vp_t y = project(step, x8 ? x8 : x, weight, bias, out_local, false, label);
    vp_drop(sim, x8);
    vp_t out = vp_float8_grad(sim, y, label);
    vp_drop(sim, y);
    return out;
}

/* Inductor's micro-pipeline TP (async_tp, which needs compile): only in
 * the compiled blocks (torchtitan compiles each TransformerBlock; the
 * embeddings and the head run eagerly: `linears` 0). A module input's
 * gather is fused with the matmuls that read it (fuse_all_gather_matmul,
 * all of them in one op); its backward's reduce-scatter only where one
 * matmul produced the gradient (fuse_matmul_reduce_scatter's
 * _find_producer_matmul: the sum of q, k and v's, or of gate and up's, is
 * an add). torch/_inductor/fx_passes/micro_pipeline_tp.py, Dec 2024. */
static unsigned module_input_funcol(const vp_step *step, unsigned linears) {
    if (!step->recipe->async_tp || !linears) return 0;
    return VP_FUNCOL_FUSED_FORWARD | (linears == 1 ? VP_FUNCOL_FUSED_BACKWARD : 0);
}

vp_t vp_module_input(vp_step *step, vp_t x, vp_t weight, unsigned linears) {
    if (!vp_framework_of(step->recipe)->dtensor_tp) return 0;
    unsigned funcol = module_input_funcol(step, linears);
    /* PrepareFloat8ModuleInput: cast to float8 before the all-gather, so
     * that the module's linears share one float8 gather */
    if (float8_tp(step, weight))
        return vp_float8_input(&step->sim, x, step->sp ? step->tp : 1, funcol, "all_gather.module_input (float8)");
    if (!step->sp) return 0;
    return vp_funcol_all_gather(&step->sim, x, step->tp, funcol, "all_gather.module_input");
}

vp_t vp_project_row(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t out_features, const char *label) {
    vp_sim *sim = &step->sim;
    /* Float8RowwiseParallel: the input cast to float8 before the linear
     * (which saves it in float8), the output's gradient cast after the
     * reduce-scatter and gathered in float8 (vp_scatter) */
    bool f8 = float8_tp(step, weight);
    vp_t x8 = f8 ? vp_float8_input(sim, x, 1, 0, "float8.rowwise_input") : 0;
    vp_t y = project(step, x8 ? x8 : x, weight, bias, out_features, false, label);
    vp_drop(sim, x8);
    if (step->sp) { /* else the all-reduce sums in place */
        /* DTensor's is funcol's (vp_funcol_reduce_scatter); a row-parallel
         * linear is in a compiled block, its matmul the reduce-scatter's
         * only producer, and its input gradient's matmul the only reader
         * of the gathered output gradient: both fused under async TP */
        unsigned funcol = step->recipe->async_tp ? VP_FUNCOL_FUSED_FORWARD | VP_FUNCOL_FUSED_BACKWARD : 0;
        vp_t shard = vp_framework_of(step->recipe)->dtensor_tp
                         ? vp_funcol_reduce_scatter(sim, y, step->tp, funcol, "reduce_scatter")
                         : vp_scatter(sim, y, step->tp, "reduce_scatter");
        vp_drop(sim, y);
        y = shard;
    }
    if (!f8) return y;
    vp_t out = vp_float8_grad(sim, y, label);
    vp_drop(sim, y);
    return out;
}

uint64_t vp_split_tp(const vp_step *step, uint64_t n) { return n / step->tp; }

/* Megatron-LM pads the vocabulary to a multiple of 128 x tp
 * (--make-vocab-size-divisible-by 128, _vocab_size_with_padding) so that
 * each tensor-parallel rank holds an equal slice. */
uint64_t vp_local_vocab(uint64_t vocab, unsigned tp, bool exact) {
    if (tp <= 1) return vocab;
    return exact ? (vocab + tp - 1) / tp : vp_padded_vocab(vocab, tp) / tp;
}

uint64_t vp_padded_vocab(uint64_t vocab, unsigned tp) {
    if (tp <= 1) return vocab;
    uint64_t m = 128u * tp;
    return (vocab + m - 1) / m * m;
}

vp_t vp_run_ops(vp_step *step, const vp_op *ops, unsigned n, const vp_t *leaves, vp_t x) {
    vp_t current = x;
    vp_hold(&step->sim, x);
    for (unsigned i = 0; i < n; i++) {
        vp_t next = ops[i].kind->forward(step, &ops[i], leaves + ops[i].slot, current);
        vp_drop(&step->sim, current);
        current = next;
        vp_step_clear_fp8(step); /* an op's GEMMs share their input's quantization, no further */
    }
    return current;
}

vp_t vp_train_dropout(vp_step *step, vp_t x, double p, const char *label) {
    return vp_dropout(&step->sim, x, step->recipe->training ? p : 0.0, label);
}

/* ---- dropout ---- */

enum { DROPOUT_P, DROPOUT_MODEL_LOCAL, DROPOUT_FIELDS };

static const vp_field dropout_fields[DROPOUT_FIELDS] = {
    [DROPOUT_P] = {"p", VP_FIELD_NUMBER, true, 0, 0, 0.999999, NULL, "probability of zeroing an element"},
    [DROPOUT_MODEL_LOCAL] = {"model_local", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                             "the output is a local of the model's forward until the body returns (BertModel's "
                             "embedding_output, which BertEmbeddings' last dropout makes)"},
};

static vp_t dropout_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_t y = vp_train_dropout(step, x, op->value[DROPOUT_P], "dropout");
    if (vp_op_flag(op, DROPOUT_MODEL_LOCAL)) vp_step_keep_local(step, y, VP_LOCAL_OF_BODY);
    return y;
}

const vp_op_kind vp_op_dropout = {
    .name = "dropout",
    .doc = "nn.Dropout: a one-byte mask is kept for backward while training (CUDA's fused native_dropout)",
    .fields = dropout_fields,
    .n_fields = DROPOUT_FIELDS,
    .cost = VP_COST_DROPOUT,
    .forward = dropout_forward,
};

/* ---- scale ---- */

enum { SCALE_MODEL_LOCAL, SCALE_FIELDS };

static const vp_field scale_fields[SCALE_FIELDS] = {
    [SCALE_MODEL_LOCAL] = {"model_local", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "the product is a local of the model's forward until the body returns (Granite's "
                           "inputs_embeds = inputs_embeds * embedding_multiplier)"},
};

/* x * a constant: a new tensor; the product's backward keeps at most a
 * 0-dim constant (left out). Gemma's embeddings times sqrt(hidden_size)
 * (GemmaModel's normalizer, beside the inputs_embeds it keeps), Granite's
 * times embedding_multiplier (rebound to inputs_embeds). */
static vp_t scale_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    (void)leaves;
    vp_t y = vp_scale(&step->sim, x, "scale");
    if (vp_op_flag(op, SCALE_MODEL_LOCAL)) vp_step_keep_local(step, y, VP_LOCAL_OF_BODY);
    return y;
}

const vp_op_kind vp_op_scale = {
    .name = "scale",
    .doc = "x times a constant (Gemma's embedding normalizer, Granite's multipliers): a new tensor, nothing kept "
           "for backward",
    .fields = scale_fields,
    .n_fields = SCALE_FIELDS,
    .forward = scale_forward,
};

/* ---- residual ---- */

enum {
    RESIDUAL_SCALE,
    RESIDUAL_KEEPS_BRANCH,
    RESIDUAL_NAMES_LAST_INPUT,
    RESIDUAL_POST_NORM,
    RESIDUAL_ADDS_BRANCHES,
    RESIDUAL_FIELDS
};

static const vp_field residual_fields[RESIDUAL_FIELDS] = {
    [RESIDUAL_SCALE] = {"scale", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                        "the branch multiplied by a constant before the add (Granite's residual_multiplier): one "
                        "more branch-sized tensor, nothing kept; the branch itself lives through the add"},
    [RESIDUAL_KEEPS_BRANCH] = {"keeps_branch", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                               "the branch's result has a name of its own in the layer's forward, so it lives "
                               "until the layer returns (GPT2Block's attn_output); false: the add's result "
                               "takes its name (hidden_states = residual + hidden_states)"},
    [RESIDUAL_NAMES_LAST_INPUT] = {"names_last_input", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                                   "what the branch's last op (its dropout) takes has a name of its own, so it "
                                   "lives through the add (T5LayerFF's `hidden_states + "
                                   "self.dropout(forwarded_states)`)"},
    [RESIDUAL_POST_NORM] = {"post_norm", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                            "the norm after the add ends the block (BertSelfOutput, BertOutput: "
                            "self.LayerNorm(hidden_states + input_tensor)): the branch's result and the residual's "
                            "input are its locals until that norm returns"},
    [RESIDUAL_ADDS_BRANCHES] = {"adds_branches", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                                "the last op is a parallel block whose results are added to the input one by one, "
                                "left to right (CohereDecoderLayer: residual + hidden_states_attention + "
                                "hidden_states_mlp), not summed first"},
};

enum { PARALLEL_MAX_CHILDREN = 8 };
static unsigned run_branches(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x, vp_t *results);

/* x + r1 + r2 + ...: the branches of the parallel block that ends the
 * residual's ops, added to x in turn (adds_branches) */
static vp_t add_branches(vp_step *step, const vp_op *op, const vp_t *children, vp_t x) {
    vp_sim *sim = &step->sim;
    const vp_op *last = &op->children[op->n_children - 1];
    if (last->kind != &vp_op_parallel) {
        sim->status = VP_SIM_LIMIT; /* a family script's bug: see the field's doc */
        return 0;
    }
    vp_t input = vp_run_ops(step, op->children, op->n_children - 1, children, x);
    vp_t results[PARALLEL_MAX_CHILDREN] = {0};
    unsigned n = run_branches(step, last, children + last->slot, input, results);
    vp_drop(sim, input);
    vp_t sum = x;
    vp_hold(sim, x);
    for (unsigned i = 0; i < n; i++) {
        vp_t next = vp_add(sim, sum, results[i], vp_at(sim, sum)->numel, "residual.add");
        vp_drop(sim, sum);
        vp_drop(sim, results[i]);
        sum = next;
    }
    return sum;
}

/* x + f(x): the children run in order on x, and the branch's result is
 * added to x (HF decoder layers: `residual = hidden_states ... hidden_states
 * = residual + hidden_states`). */
static vp_t residual_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    /* children's slots are numbered within the section, after this op's own */
    const vp_t *children = leaves - op->slot;
    if (vp_op_flag(op, RESIDUAL_ADDS_BRANCHES)) return add_branches(step, op, children, x);
    unsigned n = op->n_children;
    vp_t named = 0; /* the last op's input, a local until the sub-layer returns */
    if (vp_op_flag(op, RESIDUAL_NAMES_LAST_INPUT) && n > 1) named = vp_run_ops(step, op->children, --n, children, x);
    vp_t branch = named ? vp_run_ops(step, op->children + n, 1, children, named)
                        : vp_run_ops(step, op->children, n, children, x);
    if (vp_op_flag(op, RESIDUAL_KEEPS_BRANCH)) vp_step_keep_local(step, branch, VP_LOCAL_OF_LAYER);
    if (vp_op_flag(op, RESIDUAL_POST_NORM)) {
        vp_step_keep_local(step, branch, VP_LOCAL_OF_POST_NORM_BLOCK);
        vp_step_keep_local(step, x, VP_LOCAL_OF_POST_NORM_BLOCK);
    }
    /* hidden_states = residual + hidden_states * self.residual_multiplier:
     * the name is rebound once the add is done */
    vp_t scaled = vp_op_flag(op, RESIDUAL_SCALE) ? vp_scale(sim, branch, "residual.scale") : 0;
    vp_t y = vp_add(sim, x, scaled ? scaled : branch, vp_at(sim, x)->numel, "residual.add");
    vp_drop(sim, scaled);
    vp_drop(sim, branch);
    vp_drop(sim, named);
    return y;
}

/* ---- sequence and parallel branches ---- */

/* f(x) for children f1, f2, ... run in order (a branch of a parallel
 * block: GPT-NeoX's input_layernorm, attention and dropout). */
static vp_t sequence_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    return vp_run_ops(step, op->children, op->n_children, leaves - op->slot, x);
}

const vp_op_kind vp_op_sequence = {
    .name = "sequence",
    .doc = "its ops run in order on the input, nothing added back (a branch of a parallel block)",
    .container = true,
    .forward = sequence_forward,
};

/* ---- parallel ---- */

enum { PARALLEL_IN_PLACE, PARALLEL_INPUTS_FIRST, PARALLEL_FIELDS };

static const vp_field parallel_fields[PARALLEL_FIELDS] = {
    [PARALLEL_IN_PLACE] = {"in_place", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "each result after the first takes the sum so far in place, no new tensor "
                           "(FalconDecoderLayer's mlp_output += attention_output)"},
    [PARALLEL_INPUTS_FIRST] = {"inputs_first", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                               "every child (at most eight) is a sequence of two ops or more whose first op "
                               "(a norm) runs on the input before any child's rest runs (FalconDecoderLayer's "
                               "ln_attn and ln_mlp, both made before the attention)"},
};

/* The first op of each sequence child, on x, in order (inputs_first). */
static bool run_first_ops(vp_step *step, const vp_op *op, const vp_t *section, vp_t x, vp_t *firsts) {
    bool fits = op->n_children <= PARALLEL_MAX_CHILDREN;
    for (unsigned i = 0; fits && i < op->n_children; i++)
        fits = op->children[i].kind == &vp_op_sequence && op->children[i].n_children >= 2;
    if (!fits) {
        step->sim.status = VP_SIM_LIMIT; /* a family script's bug: see the field's doc */
        return false;
    }
    for (unsigned i = 0; i < op->n_children; i++) {
        const vp_op *first = &op->children[i].children[0];
        firsts[i] = first->kind->forward(step, first, section + first->slot, x);
        vp_step_clear_fp8(step);
    }
    return true;
}

/* Every child on the same x, each result bound to a name of the layer's
 * forward (it lives until the layer returns); returns how many, or 0 with
 * the simulator's status set. */
static unsigned run_branches(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x, vp_t *results) {
    const vp_t *section = leaves - op->slot; /* children's slots are numbered within the section */
    bool inputs_first = vp_op_flag(op, PARALLEL_INPUTS_FIRST);
    vp_t firsts[PARALLEL_MAX_CHILDREN] = {0};
    if (op->n_children > PARALLEL_MAX_CHILDREN) {
        step->sim.status = VP_SIM_LIMIT; /* see the field's doc */
        return 0;
    }
    if (inputs_first && !run_first_ops(step, op, section, x, firsts)) return 0;
    for (unsigned i = 0; i < op->n_children; i++) {
        const vp_op *child = &op->children[i];
        results[i] = inputs_first ? vp_run_ops(step, child->children + 1, child->n_children - 1, section, firsts[i])
                                  : child->kind->forward(step, child, section + child->slot, x);
        vp_drop(&step->sim, firsts[i]);
        vp_step_clear_fp8(step);
        vp_step_keep_local(step, results[i], VP_LOCAL_OF_LAYER);
    }
    return op->n_children;
}

/* f1(x) + f2(x) + ...: every child runs on the same x, its result kept
 * while the next runs, then the results are summed left to right, each sum
 * a new tensor (Phi's attn_outputs + feed_forward_hidden_states, GPT-NeoX's
 * mlp_output + attn_output; the residual around them adds x last), or
 * in place (in_place). */
static vp_t parallel_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t results[PARALLEL_MAX_CHILDREN] = {0};
    unsigned n = run_branches(step, op, leaves, x, results);
    vp_t sum = n ? results[0] : 0;
    for (unsigned i = 1; i < n; i++) {
        vp_t next = vp_op_flag(op, PARALLEL_IN_PLACE) ? vp_add_(sim, results[i], sum, "parallel.add_")
                                                      : vp_add(sim, sum, results[i], vp_at(sim, sum)->numel, "parallel.add");
        vp_drop(sim, sum);
        vp_drop(sim, results[i]);
        sum = next;
    }
    return sum;
}

/* Containers' checks of their children run when the model copies them in
 * (lua_model.c); an op being made has none yet. */
static const char *parallel_check(const vp_op *op) {
    if (op->n_children > PARALLEL_MAX_CHILDREN) return "at most 8 branches";
    for (unsigned i = 0; vp_op_flag(op, PARALLEL_INPUTS_FIRST) && i < op->n_children; i++)
        if (op->children[i].kind != &vp_op_sequence || op->children[i].n_children < 2)
            return "inputs_first: each branch is a sequence of two ops or more (its first runs on the input first)";
    return NULL;
}

static const char *residual_check(const vp_op *op) {
    if (vp_op_flag(op, RESIDUAL_ADDS_BRANCHES) && op->n_children &&
        op->children[op->n_children - 1].kind != &vp_op_parallel)
        return "adds_branches: the residual's last op must be a parallel block (its branches are added one by one)";
    return NULL;
}

static void parallel_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    (void)op, (void)section;
    facts->parallel_branches = true;
}

const vp_op_kind vp_op_parallel = {
    .name = "parallel",
    .doc = "its ops each run on the same input and their results are summed (Phi's and GPT-NeoX's parallel "
           "attention and MLP); the results are locals of the layer until it returns",
    .fields = parallel_fields,
    .n_fields = PARALLEL_FIELDS,
    .container = true,
    .cost = VP_COST_RESIDUAL,
    .check = parallel_check,
    .facts = parallel_facts,
    .forward = parallel_forward,
};

const vp_op_kind vp_op_residual = {
    .name = "residual",
    .doc = "a residual branch: its ops run on the input and their result is added back",
    .fields = residual_fields,
    .n_fields = RESIDUAL_FIELDS,
    .container = true,
    .cost = VP_COST_RESIDUAL,
    .check = residual_check,
    .forward = residual_forward,
};
