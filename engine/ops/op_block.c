/* op_block.c — a block written in Lua: its parameters as leaves, and its
 * traced program (block.h) run primitive by primitive through the same
 * services the built-in ops use, so that autocast, LoRA, quantized and FP8
 * weights, tensor parallelism and checkpointing apply to it alike. */
#include "block.h"
#include "finetune_method.h"
#include "framework.h"
#include "kernel.h"
#include "kv_cache.h"
#include "ops.h"
#include "precision.h"
#include "sdpa.h"

/* What autograd keeps of each elementwise function
 * (tools/autograd/derivatives.yaml, PyTorch 2.x), the temporaries its
 * backward expression leaves alive beside the gradient, and whether
 * autocast runs it in fp32 (autocast_mode.cpp's CUDA fp32 list: exp,
 * rsqrt, pow, softmax, log_softmax). */
typedef struct {
    vp_saves saves;
    unsigned backward_temps;
    bool fp32;
} unary_rule;

static const unary_rule unary_rules[VP_BU_COUNT] = {
    [VP_BU_SILU] = {VP_SAVES_INPUT, 0, false},      /* silu_backward(grad, self) */
    [VP_BU_GELU] = {VP_SAVES_INPUT, 0, false},      /* gelu_backward(grad, self, approximate) */
    [VP_BU_GELU_TANH] = {VP_SAVES_INPUT, 0, false}, /* the same, approximate="tanh" */
    [VP_BU_RELU] = {VP_SAVES_OUTPUT, 0, false},     /* threshold_backward(grad, result, 0) */
    [VP_BU_SIGMOID] = {VP_SAVES_OUTPUT, 0, false},  /* sigmoid_backward(grad, result) */
    [VP_BU_TANH] = {VP_SAVES_OUTPUT, 0, false},     /* tanh_backward(grad, result) */
    [VP_BU_EXP] = {VP_SAVES_OUTPUT, 0, true},       /* grad * result.conj() */
    /* -0.5 * grad * result.pow(3): two temporaries (op_norm.c's rsqrt) */
    [VP_BU_RSQRT] = {VP_SAVES_OUTPUT, 2, true},
    /* pow_backward: grad * (exponent * self.pow(exponent - 1)): two */
    [VP_BU_POW] = {VP_SAVES_INPUT, 2, true},
    /* _softmax_backward_data(grad, result), _log_softmax_backward_data(grad,
     * result): the gradient alone; both on autocast's fp32 list */
    [VP_BU_SOFTMAX] = {VP_SAVES_OUTPUT, 0, true},
    [VP_BU_LOG_SOFTMAX] = {VP_SAVES_OUTPUT, 0, true},
    /* softplus_backward(grad, self, beta, threshold): one kernel, the
     * gradient alone; on CUDA autocast's fp32 list (autocast_mode.cpp
     * KERNEL_CUDA(softplus, fp32)) */
    [VP_BU_SOFTPLUS] = {VP_SAVES_INPUT, 0, true},
};

unsigned vp_block_prim_facts(unsigned prim, unsigned mode) {
    switch ((vp_block_prim)prim) {
    case VP_BP_UNARY: return mode < VP_BU_COUNT && unary_rules[mode].saves == VP_SAVES_OUTPUT ? VP_BLOCK_SAVES_OUTPUT : 0;
    case VP_BP_SOFTMAX_FP32: /* softmax_fp32: vp_unary(.., VP_SAVES_OUTPUT, ..) */
    case VP_BP_LOGSUMEXP:    /* vp_logsumexp, vp_var(std), vp_amax keep the result */
    case VP_BP_STD:
    case VP_BP_AMAX:
    case VP_BP_AMIN:
    case VP_BP_SDPA:   /* the flash and efficient kernels keep their output */
    case VP_BP_KERNEL: /* any declared kernel may (saves = { "output" }) */
    case VP_BP_TOPK:   /* its indices */
        return VP_BLOCK_SAVES_OUTPUT;
    case VP_BP_TO:      /* Tensor.to returns self when the dtype matches */
    case VP_BP_DROPOUT: /* x itself outside training (vp_dropout of p = 0) */
    case VP_BP_SPLIT:
    case VP_BP_SELECT:
    case VP_BP_SLICE:
    case VP_BP_EXPAND:
    case VP_BP_REPEAT_KV: /* one key/value head expanded, or x itself */
    case VP_BP_CACHE:     /* the layer's keys and values, which the cache holds */
    case VP_BP_MASK:      /* the step's mask, shared by every layer */
    case VP_BP_ALL_GATHER: /* x itself without sequence parallelism */
    case VP_BP_REDUCE_SCATTER:
        return VP_BLOCK_ALIASES_INPUT;
    default: return 0;
    }
}

static const vp_block_program *program_of(const vp_op *op) { return op->data; }

static uint64_t local_dim(uint64_t n, bool split, unsigned tp) { return split ? n / tp : n; }

static unsigned block_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    const vp_block_program *p = program_of(op);
    if (!p) return 0;
    for (unsigned k = 0; k < p->n_params; k++) {
        const vp_block_param *q = &p->param[k];
        uint64_t rows = local_dim(q->rows, q->split == VP_BLOCK_SPLIT_ROWS, split->tp);
        uint64_t columns = local_dim(q->columns, q->split == VP_BLOCK_SPLIT_COLUMNS, split->tp);
        out[k] = vp_param(rows * columns, q->label, (vp_module)q->module, q->linear ? rows : 0);
        out[k].trainable = q->trainable;
        out[k].buffer = q->buffer;
        out[k].keep_fp32 = q->keep_fp32;
        out[k].conv1d = q->conv1d;
        if (q->module == VP_MODULE_NONE) out[k].module_name = q->module_name;
        if (!q->linear && q->rows > 1) out[k].rows = rows;
    }
    return p->n_params;
}

static const char *block_check(const vp_op *op) {
    return program_of(op) ? NULL : "a block is made with block { name = ..., params = ..., forward = ... }";
}

static vp_sdpa_spec sdpa_spec(const vp_block_instr *in) {
    return (vp_sdpa_spec){.heads = in->heads,
                          .kv_heads = in->kv_heads,
                          .head_dim = in->width,
                          .dropout = in->number,
                          .upcast_softmax = in->mode & VP_SDPA_UPCAST,
                          .keeps_weights = in->mode & VP_SDPA_KEEPS_WEIGHTS,
                          .q_contiguous = in->mode & VP_SDPA_Q_CONTIGUOUS,
                          .k_contiguous = in->mode & VP_SDPA_K_CONTIGUOUS,
                          .v_contiguous = in->mode & VP_SDPA_V_CONTIGUOUS,
                          .q_gaps = in->mode & VP_SDPA_Q_GAPS,
                          .k_gaps = in->mode & VP_SDPA_K_GAPS,
                          .v_gaps = in->mode & VP_SDPA_V_GAPS};
}

static const char *block_check_tp(const vp_op *op, unsigned tp) {
    const vp_block_program *p = program_of(op);
    for (unsigned i = 0; p && i < p->n_tp_rules; i++)
        if (p->tp_count[i] % tp) return p->tp_why[i];
    for (unsigned k = 0; p && k < p->n_params; k++) {
        const vp_block_param *q = &p->param[k];
        uint64_t n = q->split == VP_BLOCK_SPLIT_ROWS ? q->rows : q->split == VP_BLOCK_SPLIT_COLUMNS ? q->columns : 0;
        if (n % tp) return "tp: must divide every split dimension of the block's parameters";
    }
    for (unsigned i = 0; p && i < p->n_code; i++) {
        const vp_block_instr *in = &p->code[i];
        if (in->prim != VP_BP_SDPA) continue;
        vp_sdpa_spec spec = sdpa_spec(in);
        const char *problem = vp_sdpa_check_tp(&spec, tp);
        if (problem) return problem;
        /* the attention op gives each rank one of fewer key/value heads than
         * ranks; a block's column-parallel k_proj cannot */
        if (in->kv_heads % tp) return "tp: must divide a Lua block's key/value heads";
    }
    for (unsigned i = 0; p && i < p->n_kernels; i++) {
        const vp_block_kernel *k = &p->kernel[i];
        if (!k->in_split) continue;
        uint64_t shares[] = {k->keep_width[0], k->keep_width[1], k->forward_workspace, k->backward_workspace,
                             k->forward_workspace_like, k->backward_workspace_like};
        for (unsigned j = 0; j < sizeof shares / sizeof shares[0]; j++)
            if (shares[j] % tp)
                return "tp: must divide a split kernel's kept tensors and workspaces (each rank runs it on its share)";
    }
    for (unsigned i = 0; p && i < p->n_code; i++) {
        if (p->code[i].prim == VP_BP_REPEAT_KV && p->code[i].kv_heads % tp)
            return "tp: must divide a Lua block's key/value heads";
        for (unsigned d = 0; d < p->code[i].n_dims; d++)
            if (p->code[i].dim[d] == VP_DIM_SPLIT && (unsigned)p->code[i].dim_add[d] % tp)
                return "tp: must divide every split dimension of a Lua block's shapes (heads, column-parallel outputs)";
    }
    return NULL;
}

static vp_t linear(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val) {
    const vp_block_param *w = &p->param[in->arg[1] - 1];
    vp_t bias = in->arg[2] >= 0 ? val[in->arg[2]] : 0;
    if (w->split == VP_BLOCK_SPLIT_ROWS)
        return vp_project_column(step, val[in->arg[0]], val[in->arg[1]], bias, vp_split_tp(step, w->rows), in->label);
    if (w->split == VP_BLOCK_SPLIT_COLUMNS)
        return vp_project_row(step, val[in->arg[0]], val[in->arg[1]], bias, w->rows, in->label);
    return vp_project(step, val[in->arg[0]], val[in->arg[1]], bias, w->rows, in->label);
}

static vp_t unary(vp_step *step, const vp_block_instr *in, vp_t x) {
    vp_sim *sim = &step->sim;
    const unary_rule *rule = &unary_rules[in->mode];
    vp_t xa = rule->fp32 ? vp_autocast_fp32(step, x, in->label) : x;
    vp_t y = vp_unary(sim, xa, rule->saves, rule->backward_temps, (vp_dtype)vp_at(sim, xa)->dtype, in->label);
    if (rule->fp32) vp_drop(sim, xa);
    return y;
}

static uint64_t larger(vp_sim *sim, vp_t a, vp_t b) {
    uint64_t na = vp_at(sim, a)->numel, nb = vp_at(sim, b)->numel;
    return na > nb ? na : nb;
}

/* A kernel's dtype: VP_BLOCK_LIKE is its first input's. */
static vp_dtype kernel_dtype(uint8_t dtype, vp_dtype first) { return dtype == VP_BLOCK_LIKE ? first : (vp_dtype)dtype; }

/* A kernel's workspace: bytes per row, and elements of its first input's
 * dtype per row. */
static uint64_t workspace(vp_sim *sim, uint64_t rows, uint64_t bytes, uint64_t like, vp_dtype first) {
    uint64_t like_bytes = 0;
    if (like && !vp_tensor_bytes(first, vp_numel(sim, rows, like), &like_bytes)) sim->status = VP_SIM_OVERFLOW;
    return vp_numel(sim, rows, bytes) + like_bytes;
}

static vp_t kernel(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val) {
    vp_sim *sim = &step->sim;
    const vp_block_kernel *k = &p->kernel[in->mode];
    vp_t inputs[VP_BLOCK_ARGS], casts[VP_BLOCK_ARGS] = {0};
    for (unsigned a = 0; a < k->n_inputs; a++) inputs[a] = val[in->arg[a]];
    vp_dtype first = (vp_dtype)vp_at(sim, inputs[0])->dtype;
    uint64_t width = local_dim(k->in_width, k->in_split, step->tp);
    uint64_t rows = vp_at(sim, inputs[0])->numel / (width ? width : 1);
    /* a kernel on a column-parallel tensor runs on this rank's heads and
     * groups: its kept tensors and workspaces are its share (block_check_tp
     * has checked that tp divides them) */
    bool split = k->in_split;
    vp_kernel_call call = {
        .in = inputs,
        .n_in = k->n_inputs,
        .out_numel = vp_numel(sim, rows, local_dim(k->out_width, k->out_split, step->tp)),
        .out_dtype = k->out_dtype ? kernel_dtype(k->out_dtype, first) : first,
        .saves = (k->saves & ((1u << VP_BLOCK_ARGS) - 1)) | (k->saves >> VP_BLOCK_ARGS & 1u) << VP_KERNEL_INPUTS,
        .saved_as = casts,
        .forward_workspace = workspace(sim, rows, local_dim(k->forward_workspace, split, step->tp),
                                       local_dim(k->forward_workspace_like, split, step->tp), first),
        .backward_workspace = workspace(sim, rows, local_dim(k->backward_workspace, split, step->tp),
                                        local_dim(k->backward_workspace_like, split, step->tp), first),
    };
    for (unsigned j = 0; j < VP_BLOCK_KEEPS && j < VP_KERNEL_KEEPS; j++) {
        call.keep_numel[j] = vp_numel(sim, rows, local_dim(k->keep_width[j], split, step->tp));
        call.keep_dtype[j] = kernel_dtype(k->keep_dtype[j], first);
    }
    /* the forward's own .to(autocast dtype) of an fp32 input, or its
     * .contiguous() copy (no autograd node: a custom Function's forward
     * runs without grad) */
    for (unsigned a = 0; a < k->n_inputs; a++) {
        const vp_tensor *t = vp_at(sim, inputs[a]);
        if (k->copies >> a & 1u)
            casts[a] = vp_new(sim, t->numel, (vp_dtype)t->dtype, in->label);
        else if (k->casts >> a & 1u && step->autocast && t->dtype == VP_FP32)
            casts[a] = vp_new(sim, t->numel, step->low, in->label);
    }
    vp_t y = vp_kernel(sim, &call, in->label);
    for (unsigned a = 0; a < k->n_inputs; a++) vp_drop(sim, casts[a]);
    return y;
}

/* The block input's sequence on this rank: the step's (seq_len / cp), or
 * under sequence parallelism the rows the stream holds (seq / tp: Megatron's
 * scatter_to_sequence_parallel_region), read off the input itself. */
static uint64_t input_seq(vp_step *step, const vp_block_program *p, const vp_t *val) {
    uint64_t per_position = vp_numel(&step->sim, step->batch, p->width);
    if (!per_position || !val[0]) return step->seq;
    return vp_at(&step->sim, val[0])->numel / per_position;
}

/* The elements of an instruction's explicit shape at this step's batch
 * and sequence (block.h's vp_block_dim): the block input's sequence, or
 * the whole one a column-parallel linear gathered; split dimensions
 * divided over the tensor-parallel ranks. */
static uint64_t shape_numel(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val) {
    uint64_t chunk = in->chunk ? in->chunk : 1, own = input_seq(step, p, val), n = 1;
    for (unsigned d = 0; d < in->n_dims; d++) {
        uint64_t seq = (in->dim_gathered >> d & 1u) ? step->seq : own, chunks = (seq + chunk - 1) / chunk;
        const uint64_t size[VP_DIM_COUNT] = {[VP_DIM_BATCH] = step->batch, [VP_DIM_SEQ] = seq,
                                             [VP_DIM_CHUNKS] = chunks, [VP_DIM_PADDED] = chunks * chunk};
        uint64_t add = (uint64_t)(int64_t)in->dim_add[d];
        n = vp_numel(&step->sim, n, in->dim[d] == VP_DIM_SPLIT ? add / step->tp : size[in->dim[d]] + add);
    }
    return n;
}

/* An elementwise or reducing primitive's output size: its explicit shape,
 * else `fallback` (what its operands give). */
static uint64_t out_numel(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val,
                          uint64_t fallback) {
    return in->n_dims ? shape_numel(step, p, in, val) : fallback;
}

/* torch.tril(torch.ones(n, n, dtype=torch.bool), k): the ones, gone once
 * tril has made its result. */
static vp_t tril_mask(vp_step *step, uint64_t n, const vp_block_instr *in) {
    vp_t ones = vp_new(&step->sim, n, VP_BOOL, in->label);
    vp_t tril = vp_new(&step->sim, n, VP_BOOL, in->label);
    vp_drop(&step->sim, ones);
    return tril;
}

/* x.repeat_interleave(n, dim, output_size): index_select with an int64
 * index of the output dimension's size (`number`), which
 * IndexSelectBackward0 keeps (derivatives.yaml index_select:
 * index_select_backward(grad, self.sizes(), dim, index)). */
static vp_t repeat(vp_step *step, uint64_t n, const vp_block_instr *in, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t index = vp_new(sim, (uint64_t)in->number, VP_INT64, in->label);
    vp_t y = vp_index(sim, x, index, n, in->label);
    vp_drop(sim, index);
    return y;
}

/* F.conv1d under autocast: conv1d is on CUDA's lower-precision list
 * (autocast_mode.cpp KERNEL_CUDA(conv1d, lower_precision_fp)): input,
 * weight and bias cast down (the leaves' casts cached); a cast input is a
 * new contiguous tensor. */
static vp_t conv1d(vp_step *step, uint64_t n, const vp_block_instr *in, const vp_t *val) {
    vp_sim *sim = &step->sim;
    vp_t x = vp_autocast_low(step, val[in->arg[0]], in->label);
    vp_t w = vp_autocast_low(step, val[in->arg[1]], in->label);
    vp_t b = in->arg[2] >= 0 ? vp_autocast_low(step, val[in->arg[2]], in->label) : 0;
    bool strided = (in->mode & VP_BLOCK_STRIDED) && x == val[in->arg[0]];
    vp_t y = vp_conv1d_depthwise(sim, x, w, b, n, strided, in->label);
    vp_drop(sim, x);
    vp_drop(sim, w);
    vp_drop(sim, b);
    return y;
}

static vp_t sdpa(vp_step *step, const vp_block_instr *in, const vp_t *val) {
    vp_sdpa_spec spec = sdpa_spec(in);
    return vp_sdpa(step, &spec, val[in->arg[0]], val[in->arg[1]], val[in->arg[2]]);
}

/* softmax(x, dim=-1, dtype=torch.float32): with a dtype argument autocast
 * leaves it alone; ATen converts the input first, except fp16 on CUDA,
 * which has a half-to-float kernel (aten/src/ATen/native/SoftMax.cpp).
 * Saves its output. */
static vp_t softmax_fp32(vp_step *step, const vp_block_program *p, const vp_block_instr *in, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_dtype dtype = (vp_dtype)vp_at(sim, x)->dtype;
    if (dtype == VP_FP32 || (dtype == VP_FP16 && step->recipe->device == VP_DEVICE_CUDA))
        return vp_unary(sim, x, VP_SAVES_OUTPUT, 0, VP_FP32, in->label);
    vp_t up = vp_to(sim, x, VP_FP32, p->aux_labels[in->aux]);
    vp_t y = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, in->label);
    vp_drop(sim, up);
    return y;
}

/* F.layer_norm(x, weight, bias) over the last dimension, as the layernorm
 * op's (op_norm.c: autocast's fp32 list). */
static vp_t layer_norm(vp_step *step, const vp_block_instr *in, const vp_t *val) {
    vp_sim *sim = &step->sim;
    vp_t x = val[in->arg[0]], w = val[in->arg[1]], b = in->arg[2] >= 0 ? val[in->arg[2]] : 0;
    uint64_t width = vp_at(sim, w)->numel;
    return vp_layer_norm_op(step, x, w, b, vp_at(sim, x)->numel / (width ? width : 1), in->label);
}

/* logsumexp, var, std, amax and amin over the last dimension: logsumexp
 * is on autocast's fp32 list (autocast_mode.cpp KERNEL_CUDA(logsumexp,
 * fp32)), the others on none (in x's dtype). */
static vp_t reduction(vp_step *step, const vp_block_instr *in, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t width = in->width ? in->width : 1;
    if (in->prim == VP_BP_AMAX || in->prim == VP_BP_AMIN)
        return vp_amax(sim, x, vp_at(sim, x)->numel / width, step->recipe->device, in->label);
    if (in->prim != VP_BP_LOGSUMEXP) return vp_var(sim, x, vp_at(sim, x)->numel / width, in->prim == VP_BP_STD, in->label);
    vp_t xa = vp_autocast_fp32(step, x, in->label);
    vp_t y = vp_logsumexp(sim, xa, vp_at(sim, xa)->numel / width, in->label);
    vp_drop(sim, xa);
    return y;
}

/* Megatron-LM's gather_from_sequence_parallel_region and
 * reduce_scatter_to_sequence_parallel_region (megatron/core/
 * tensor_parallel/mappings.py): along the sequence over the tensor-parallel
 * ranks under sequence parallelism (backward the other collective), x
 * itself otherwise (one rank: _gather_along_first_dim returns its input). */
static vp_t sequence_collective(vp_step *step, const vp_block_instr *in, vp_t x) {
    vp_sim *sim = &step->sim;
    if (!step->sp) {
        vp_hold(sim, x);
        return x;
    }
    return in->prim == VP_BP_ALL_GATHER ? vp_all_gather(sim, x, step->tp, in->label)
                                        : vp_scatter(sim, x, step->tp, in->label);
}

/* How a value lies when the step runs, beyond what the trace knew:
 * repeat_kv's copy is contiguous, its expanded single head a view with
 * gaps (whether it copies depends on the key/value heads per rank). */
enum { RUN_COPIED = 1, RUN_EXPANDED = 2 };

/* repeat_kv(hidden_states, n_rep) (transformers' modeling_llama.py):
 * expand then reshape, a contiguous copy; one key/value head (per rank)
 * reshapes to a zero-stride view instead. */
static vp_t repeat_kv(vp_step *step, const vp_block_instr *in, vp_t x, uint8_t *layout) {
    vp_sim *sim = &step->sim;
    unsigned rep = in->mode, kv_heads = in->kv_heads / step->tp;
    if (rep > 1 && kv_heads == 1) {
        *layout = RUN_EXPANDED;
        return vp_expand(sim, x, vp_numel(sim, vp_at(sim, x)->numel, rep), in->label);
    }
    if (rep > 1) {
        *layout = RUN_COPIED;
        return vp_repeat(sim, x, rep, in->label);
    }
    vp_hold(sim, x);
    return x;
}

/* torch.matmul of eager attention's operands: q @ k.transpose(2, 3) (the
 * scores' last dimension the keys': the sequence and any cached prefix)
 * or the probabilities @ v. */
static vp_t matmul(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val,
                   const uint8_t *layout) {
    vp_sim *sim = &step->sim;
    vp_attention_operand a = {.t = val[in->arg[0]],
                              .contiguous = (in->mode & VP_MATMUL_A_CONTIGUOUS) || layout[in->arg[0]] == RUN_COPIED,
                              .gaps = (in->mode & VP_MATMUL_A_GAPS) || layout[in->arg[0]] == RUN_EXPANDED,
                              .cast_label = p->aux_labels[in->aux],
                              .reshape_label = p->aux_labels[in->aux + 2]};
    vp_attention_operand b = {.t = val[in->arg[1]],
                              .contiguous = (in->mode & VP_MATMUL_B_CONTIGUOUS) || layout[in->arg[1]] == RUN_COPIED,
                              .gaps = (in->mode & VP_MATMUL_B_GAPS) || layout[in->arg[1]] == RUN_EXPANDED,
                              .transposed = in->mode & VP_MATMUL_B_TRANSPOSED,
                              .cast_label = p->aux_labels[in->aux + 1],
                              .reshape_label = p->aux_labels[in->aux + 3]};
    uint64_t keys = step->seq + step->past_tokens;
    uint64_t numel = vp_at(sim, a.t)->numel;
    uint64_t out = b.transposed ? vp_numel(sim, numel / in->width, keys) : vp_numel(sim, numel / keys, in->width);
    return vp_attention_matmul(step, &a, &b, out, in->label);
}

/* One instruction that defines a value: its new reference. */
static vp_t run(vp_step *step, const vp_block_program *p, const vp_block_instr *in, const vp_t *val) {
    vp_sim *sim = &step->sim;
    vp_t a = in->arg[0] >= 0 ? val[in->arg[0]] : 0, b = in->arg[1] >= 0 ? val[in->arg[1]] : 0;
    switch ((vp_block_prim)in->prim) {
    case VP_BP_LINEAR: return linear(step, p, in, val);
    case VP_BP_UNARY: return unary(step, in, a);
    case VP_BP_MUL:
        if (in->mode) /* the dimensioned operand's dtype */
            return vp_mul_as(sim, a, b, larger(sim, a, b), (vp_dtype)vp_at(sim, in->mode == VP_BLOCK_ZERO_DIM_A ? b : a)->dtype,
                             in->label);
        return vp_mul(sim, a, b, out_numel(step, p, in, val, larger(sim, a, b)), in->label);
    case VP_BP_ADD: return vp_add(sim, a, b, out_numel(step, p, in, val, larger(sim, a, b)), in->label);
    case VP_BP_SCALE: return vp_scale(sim, a, in->label);
    case VP_BP_SHIFT: return vp_shift(sim, a, (vp_dtype)vp_at(sim, a)->dtype, vp_at(sim, a)->numel, in->label);
    case VP_BP_NEG: return vp_neg(sim, a, in->label);
    case VP_BP_MEAN:
    case VP_BP_SUM: {
        uint64_t width = local_dim(in->width, in->width_split, step->tp);
        uint64_t n = out_numel(step, p, in, val, vp_at(sim, a)->numel / (width ? width : 1));
        return in->prim == VP_BP_MEAN ? vp_reduce(sim, a, n, in->label) : vp_sum(sim, a, n, in->label);
    }
    case VP_BP_LOGSUMEXP:
    case VP_BP_VAR:
    case VP_BP_STD:
    case VP_BP_AMAX:
    case VP_BP_AMIN: return reduction(step, in, a);
    case VP_BP_TO:
        return vp_to(sim, a, in->mode == VP_BLOCK_LIKE ? (vp_dtype)vp_at(sim, b)->dtype : (vp_dtype)in->mode,
                     in->label);
    case VP_BP_DROPOUT: return vp_train_dropout(step, a, in->number, in->label);
    case VP_BP_CAT: return vp_cat(sim, a, b, in->label);
    case VP_BP_SWIGLU: return vp_glu(sim, a, in->label);
    case VP_BP_KERNEL: return kernel(step, p, in, val);
    case VP_BP_RMS_NORM: return vp_rms_norm(sim, a, b, vp_at(sim, a)->numel / vp_at(sim, b)->numel, in->label);
    case VP_BP_ROTARY: return vp_apply_rotary(step, a, in->label);
    case VP_BP_SUB: return vp_sub(sim, a, b, out_numel(step, p, in, val, larger(sim, a, b)), in->label);
    case VP_BP_CONV1D: return conv1d(step, shape_numel(step, p, in, val), in, val);
    case VP_BP_CUMSUM: return vp_cumsum(sim, a, in->label);
    case VP_BP_TRIL: return tril_mask(step, shape_numel(step, p, in, val), in);
    case VP_BP_NOT: return vp_new(sim, vp_at(sim, a)->numel, VP_BOOL, in->label);
    case VP_BP_CLAMP: return vp_clamp_scalar(sim, a, in->label);
    case VP_BP_PAD: return vp_pad(sim, a, shape_numel(step, p, in, val), in->label);
    case VP_BP_SLICE: {
        uint64_t n = shape_numel(step, p, in, val);
        if ((in->mode & VP_BLOCK_IF_PADDED) && n == vp_at(sim, a)->numel) {
            vp_hold(sim, a);
            return a;
        }
        return vp_slice(sim, a, n, in->label);
    }
    case VP_BP_EXPAND: return vp_expand(sim, a, shape_numel(step, p, in, val), in->label);
    case VP_BP_ZEROS: return vp_new(sim, shape_numel(step, p, in, val), (vp_dtype)vp_at(sim, a)->dtype, in->label);
    case VP_BP_REPEAT: return repeat(step, shape_numel(step, p, in, val), in, a);
    case VP_BP_SELECT: return vp_slice(sim, a, vp_at(sim, a)->numel / in->mode, in->label);
    case VP_BP_SDPA: return sdpa(step, in, val);
    case VP_BP_MASK: {
        vp_t mask = vp_attention_mask(step);
        vp_hold(sim, mask);
        return mask;
    }
    case VP_BP_MASK_ADD:
        return vp_shift(sim, a, vp_dtype_promote((vp_dtype)vp_at(sim, a)->dtype, (vp_dtype)vp_at(sim, b)->dtype),
                        vp_at(sim, a)->numel, in->label);
    case VP_BP_MASKED_FILL: return vp_where(sim, a, b, in->label);
    case VP_BP_SOFTMAX_FP32: return softmax_fp32(step, p, in, a);
    case VP_BP_COPY:
        if ((in->mode & VP_BLOCK_IF_BATCHED) && step->batch == 1) {
            vp_hold(sim, a);
            return a;
        }
        return vp_copy(sim, a, in->label);
    /* the index rules: derivatives.yaml (PyTorch 1.13), each checked on
     * 1.13's grad_fn: EmbeddingBackward0 keeps the indices (and the weight,
     * for its size: no memory), GatherBackward0 self and the index,
     * IndexBackward0 the indices, Scatter(Add)Backward0 the index */
    case VP_BP_EMBEDDING:
        return vp_embedding(sim, a, b, vp_at(sim, a)->numel, local_dim(in->width, in->width_split, step->tp),
                            step->recipe->device, in->label);
    case VP_BP_GATHER: return vp_gather(sim, a, b, vp_at(sim, b)->numel, in->label);
    case VP_BP_INDEX: return vp_index(sim, a, b, vp_numel(sim, vp_at(sim, b)->numel, in->width), in->label);
    case VP_BP_SCATTER: /* of a number (x.scatter(-1, index, 1.0)): no source */
        return vp_scatter_src(sim, a, b, in->arg[2] >= 0 ? val[in->arg[2]] : 0, in->label);
    case VP_BP_SCATTER_ADD: return vp_scatter_add(sim, a, b, val[in->arg[2]], in->label);
    /* IndexSelectBackward0 keeps the index (and self's sizes: no memory);
     * index_select_backward fills a zero gradient of all of x, as
     * IndexBackward0's (checked on 1.13's grad_fn: _saved_index,
     * _saved_self_sizes) */
    case VP_BP_INDEX_SELECT: return vp_index(sim, a, b, shape_numel(step, p, in, val), in->label);
    case VP_BP_INDEX_ADD: return vp_index_added(sim, a, val[in->arg[2]], b, in->label);
    /* in place (block_forward drops x's old reference): the nodes and
     * savings of the forms out of place, checked on 1.13's grad_fn */
    case VP_BP_SCATTER_: return vp_scatter_src_(sim, a, b, in->arg[2] >= 0 ? val[in->arg[2]] : 0, in->label);
    case VP_BP_SCATTER_ADD_: return vp_scatter_add_(sim, a, b, val[in->arg[2]], in->label);
    case VP_BP_INDEX_ADD_: return vp_index_add(sim, a, val[in->arg[2]], b, true, in->label);
    case VP_BP_INDEX_COPY_: return vp_index_copy_(sim, a, val[in->arg[2]], b, in->label);
    case VP_BP_MASKED_FILL_: return vp_masked_fill_(sim, a, b, in->label);
    case VP_BP_LAYER_NORM: return layer_norm(step, in, val);
    case VP_BP_ALL_GATHER:
    case VP_BP_REDUCE_SCATTER: return sequence_collective(step, in, a);
    default: return 0; /* DROP, RETURN and LAYER_KEEP define nothing (vp_block_check); TOPK two (topk) */
    }
}

/* torch.split's views of the last dimension, in values out, out + 1, ...:
 * with more than one row, each part's rows have gaps between them */
static void split(vp_step *step, const vp_block_instr *in, vp_t *val) {
    vp_sim *sim = &step->sim;
    vp_t x = val[in->arg[0]];
    uint64_t width = local_dim(in->width, in->width_split, step->tp);
    uint64_t rows = vp_at(sim, x)->numel / (width ? width : 1);
    uint64_t numels[VP_BLOCK_PARTS];
    for (unsigned o = 0; o < in->mode; o++) numels[o] = vp_numel(sim, rows, local_dim(in->part[o], in->width_split, step->tp));
    if (rows > 1) vp_split_columns_sizes(sim, x, in->mode, numels, val + in->out, in->label);
    else vp_split_sizes(sim, x, in->mode, numels, val + in->out, in->label);
}

/* torch.topk(x, k) along the last dimension (torch.max(x, -1) is k = 1):
 * the values in value out, the int64 indices in out + 1; TopkBackward0
 * keeps the indices (derivatives.yaml, PyTorch 1.13:
 * value_selecting_reduction_backward(grad, dim, indices, self.sizes(),
 * true), a zero-filled gradient of all of x). */
static void topk(vp_step *step, const vp_block_instr *in, vp_t *val) {
    vp_sim *sim = &step->sim;
    vp_t x = val[in->arg[0]];
    uint64_t rows = vp_at(sim, x)->numel / (in->width ? in->width : 1);
    val[in->out] = vp_topk(sim, x, vp_numel(sim, rows, in->part[0]), &val[in->out + 1], in->label);
}

/* past_key_value.update(k, v): the cache keeps them (and behind a cached
 * prefix would join them to it: refused, block_recipe_problem); the
 * layer's keys and values, new references, in values out and out + 1. */
static void cache(vp_step *step, const vp_block_instr *in, vp_t *val) {
    vp_t k = val[in->arg[0]], v = val[in->arg[1]];
    vp_hold(&step->sim, k);
    vp_hold(&step->sim, v);
    vp_kv_cache_update(step, &k, &v);
    val[in->out] = k;
    val[in->out + 1] = v;
}

/* The instructions [first, end) the recipe runs: the block's second
 * forward is written for Megatron's modules. */
static void running(const vp_block_program *p, const vp_recipe *recipe, unsigned *first, unsigned *end) {
    bool megatron = p->megatron_start && !vp_framework_of(recipe)->hf_modeling;
    *first = megatron ? p->megatron_start : 0;
    *end = p->megatron_start && !megatron ? p->megatron_start : p->n_code;
}

static vp_t block_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    const vp_block_program *p = program_of(op);
    vp_t val[VP_BLOCK_VALUES] = {0};
    uint8_t layout[VP_BLOCK_VALUES] = {0};
    val[0] = x;
    for (unsigned k = 0; k < p->n_params; k++) val[k + 1] = leaves[k];
    /* the named inputs, which the branch running the block lends (borrowed
     * as x is) */
    static const vp_tensor_slot stream_slot[VP_BLOCK_STREAMS] = {
        [VP_BLOCK_SHIFTED_EMBEDDINGS] = VP_TENSOR_SHIFTED_EMBEDDINGS,
        [VP_BLOCK_BRANCH_INPUT] = VP_TENSOR_BRANCH_INPUT,
    };
    for (unsigned j = 0; j < p->n_inputs; j++)
        val[p->n_params + 1 + j] = p->input[j] == VP_BLOCK_INPUT_IDS ? vp_step_input_ids(step)
                                                                      : vp_step_tensor(step, stream_slot[p->input[j]]);
    /* under DTensor's plan (block_plan.c) a block that needs the whole
     * sequence is given its input gathered (PrepareModuleInput's
     * all-gather, or torchao's float8 one): the forward's argument until
     * it returns */
    vp_t gathered = 0;
    if (p->dtensor_gathers && step->tp > 1 && vp_framework_of(step->recipe)->dtensor_tp)
        gathered = vp_module_input(step, x, p->dtensor_weight ? leaves[p->dtensor_weight - 1] : 0, p->dtensor_linears);
    if (gathered) val[0] = gathered;
    vp_t result = 0;
    unsigned first, end;
    running(p, step->recipe, &first, &end);
    for (unsigned i = first; i < end; i++) {
        const vp_block_instr *in = &p->code[i];
        if (in->prim == VP_BP_DROP) {
            vp_drop(&step->sim, val[in->arg[0]]);
            val[in->arg[0]] = 0;
        } else if (in->prim == VP_BP_RETURN) {
            result = val[in->arg[0]];
            /* the input, a parameter or a named input returned as it is: a new reference */
            if ((unsigned)in->arg[0] <= vp_block_borrowed(p)) vp_hold(&step->sim, result);
            else val[in->arg[0]] = 0;
        } else if (in->prim == VP_BP_SPLIT) {
            split(step, in, val);
        } else if (in->prim == VP_BP_CACHE) {
            cache(step, in, val);
        } else if (in->prim == VP_BP_TOPK) {
            topk(step, in, val);
        } else if (in->prim == VP_BP_REPEAT_KV) {
            val[in->out] = repeat_kv(step, in, val[in->arg[0]], &layout[in->out]);
        } else if (in->prim == VP_BP_MATMUL) {
            val[in->out] = matmul(step, p, in, val, layout);
        } else if (in->prim == VP_BP_LAYER_KEEP) {
            vp_step_keep_local(step, val[in->arg[0]], VP_LOCAL_OF_LAYER);
        } else if (vp_block_in_place(in->prim)) { /* x's new version in its value, the old reference gone */
            vp_t old = val[in->out];
            val[in->out] = run(step, p, in, val);
            vp_drop(&step->sim, old);
        } else {
            val[in->out] = run(step, p, in, val);
        }
    }
    vp_drop(&step->sim, gathered);
    if (p->norm) vp_step_norm_returns(step);
    return result;
}

/* The causal mask of F.sdpa's eager path, made once per step. */
static void block_prepare(vp_step *step, const vp_op *op) {
    const vp_block_program *p = program_of(op);
    unsigned first, end;
    running(p, step->recipe, &first, &end);
    for (unsigned i = first; i < end; i++) {
        if (p->code[i].prim == VP_BP_MASK)
            vp_attention_mask_prepare(step, (vp_attention_mask_kind)p->code[i].mode, p->code[i].width);
        if (p->code[i].prim != VP_BP_SDPA) continue;
        vp_sdpa_spec spec = sdpa_spec(&p->code[i]);
        vp_sdpa_prepare(step, &spec);
    }
}

static const vp_block_instr *find_prim(const vp_block_program *p, vp_block_prim prim) {
    for (unsigned i = 0; p && i < p->n_code; i++)
        if (p->code[i].prim == prim) return &p->code[i];
    return NULL;
}

/* The layers' first block that attends speaks for the model's attention,
 * as the attention op's first does (called for every block: facts_each). */
static void block_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    const vp_block_program *p = program_of(op);
    const vp_block_instr *in = find_prim(p, VP_BP_SDPA);
    /* or eager attention written out: its scores' matmul, its keys' heads
     * repeat_kv's */
    const vp_block_instr *scores = in ? NULL : find_prim(p, VP_BP_MATMUL), *repeat = find_prim(p, VP_BP_REPEAT_KV);
    for (unsigned i = 0; p && i < p->n_code; i++) /* PaliGemma's mask reads the batch's token_type_ids */
        if (p->code[i].prim == VP_BP_MASK && p->code[i].mode == VP_MASK_PREFIX) facts->token_type_ids = true;
    if (section != VP_SECTION_LAYER || (!in && !scores) || facts->attention) return;
    uint64_t heads = in ? in->heads : scores->heads, width = in ? in->width : scores->width;
    uint64_t kv_heads = in ? in->kv_heads : repeat ? repeat->kv_heads : heads;
    facts->attention = true;
    facts->caches = find_prim(p, VP_BP_CACHE) != NULL;
    facts->peft_defaults = true; /* q_proj and v_proj, when the block names them so */
    facts->kv_width = kv_heads * width;
    facts->splits_hidden = p->width == heads * width;
}

/* Whether a program calls `prim`. */
static bool program_calls(const vp_block_program *p, vp_block_prim prim) { return find_prim(p, prim) != NULL; }

/* A layout's problem a program carries ("" for none). */
typedef const char *(*program_problem)(const vp_block_program *p);

static const char *cp_problem(const vp_block_program *p) { return p->cp_problem; }
static const char *dtensor_problem(const vp_block_program *p) { return p->dtensor_problem; }
static const char *dtensor_float8_problem(const vp_block_program *p) { return p->dtensor_float8_problem; }
static const char *megatron_sp_problem(const vp_block_program *p) { return p->megatron_sp_problem; }

/* The first problem of `kind` among these ops' blocks, or NULL. */
static const char *ops_problem(const vp_op *ops, unsigned n, program_problem kind) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind == &vp_op_block && kind(program_of(&ops[i]))[0]) return kind(program_of(&ops[i]));
        const char *problem = ops_problem(ops[i].children, ops[i].n_children, kind);
        if (problem) return problem;
    }
    return NULL;
}

static const char *model_problem(const vp_model *model, program_problem kind) {
    for (unsigned s = 0; s < VP_SECTION_COUNT; s++) {
        const char *problem = ops_problem(model->section[s].ops, model->section[s].n_ops, kind);
        if (problem) return problem;
    }
    return NULL;
}

/* A fused kernel (F.kernel) on a column-parallel tensor in the code a
 * DTensor framework runs (the block's `forward`): torchtitan's plans give
 * no custom autograd.Function its shards (Mamba-2's fused mixer splits as
 * Megatron-LM's MambaMixer does, in its `megatron` forward). */
static const char *dtensor_kernel_problem(const vp_block_program *p) {
    unsigned end = p->megatron_start ? p->megatron_start : p->n_code;
    for (unsigned i = 0; i < end; i++)
        if (p->code[i].prim == VP_BP_KERNEL && p->kernel[p->code[i].mode].in_split)
            return "tp: a Lua block's fused kernel (F.kernel) on a column-parallel tensor is modelled under "
                   "Megatron-LM's tensor parallelism, not DTensor's (framework = fsdp2)";
    return "";
}

/* Under DTensor's tensor parallelism (framework = fsdp2): the blocks'
 * plans (block_plan.c) with sequence parallelism, and with torchao's
 * float8 tensor-parallel styles (tensorwise: step.c's own check). */
static const char *dtensor_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    if (recipe->tp <= 1 || !vp_framework_of(recipe)->dtensor_tp) return NULL;
    const char *problem = model_problem(model, dtensor_kernel_problem);
    if (!problem && recipe->sequence_parallel) problem = model_problem(model, dtensor_problem);
    const vp_precision *precision = vp_precision_get(recipe->precision);
    if (!problem && precision && precision->fp8_dynamic && recipe->fp8_recipe == VP_FLOAT8_TENSORWISE)
        problem = model_problem(model, dtensor_float8_problem);
    return problem;
}

/* Any block of these ops that calls `prim`. */
static bool ops_call(const vp_op *ops, unsigned n, vp_block_prim prim) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind == &vp_op_block && program_calls(program_of(&ops[i]), prim)) return true;
        if (ops_call(ops[i].children, ops[i].n_children, prim)) return true;
    }
    return false;
}

static bool model_calls(const vp_model *model, vp_block_prim prim) {
    for (unsigned s = 0; s < VP_SECTION_COUNT; s++)
        if (ops_call(model->section[s].ops, model->section[s].n_ops, prim)) return true;
    return false;
}

/* Whether a program names `stream` (VP_BLOCK_STREAMS: any a branch makes). */
static bool program_names(const vp_block_program *p, vp_block_stream stream) {
    for (unsigned j = 0; p && j < p->n_inputs; j++)
        if (p->input[j] == stream || (stream == VP_BLOCK_STREAMS && p->input[j] != VP_BLOCK_INPUT_IDS)) return true;
    return false;
}

/* A block that names a branch's inputs among ops outside any branch. */
static bool inputs_outside_branch(const vp_op *ops, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind == &vp_op_branch) continue;
        if (ops[i].kind == &vp_op_block && program_names(program_of(&ops[i]), VP_BLOCK_STREAMS)) return true;
        if (inputs_outside_branch(ops[i].children, ops[i].n_children)) return true;
    }
    return false;
}

/* Any block of these ops that names the batch's input ids. */
static bool ops_name_ids(const vp_op *ops, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].kind == &vp_op_block && program_names(program_of(&ops[i]), VP_BLOCK_INPUT_IDS)) return true;
        if (ops_name_ids(ops[i].children, ops[i].n_children)) return true;
    }
    return false;
}

/* The batch's input ids are [b, s] of the whole sequence on the first
 * pipeline stage (step.c), without prompt tuning's virtual tokens: a block
 * reading them beside a stream of another length is refused. */
static const char *ids_problem(const vp_model *model, const vp_recipe *recipe) {
    bool named = false;
    for (unsigned s = 0; s < VP_SECTION_COUNT; s++) named |= ops_name_ids(model->section[s].ops, model->section[s].n_ops);
    if (!named) return NULL;
    if (recipe->pp > 1) return "pp: a Lua block's input_ids are the first pipeline stage's only";
    if (recipe->tp > 1 && recipe->sequence_parallel)
        return "sequence_parallel: a Lua block's input_ids are the whole sequence, its stream a share of it";
    if (vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PROMPT)
        return "finetune: a Lua block's input_ids have no virtual tokens, its stream has";
    return NULL;
}

static const char *block_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    for (unsigned s = 0; s < VP_SECTION_COUNT; s++)
        if (inputs_outside_branch(model->section[s].ops, model->section[s].n_ops))
            return "model: a block that names inputs a branch makes (shifted_embeddings, branch_input) runs inside a "
                   "branch { }, which makes them";
    const char *ids = ids_problem(model, recipe);
    if (ids) return ids;
    const char *dtensor = dtensor_recipe_problem(model, recipe);
    if (dtensor) return dtensor;
    if (recipe->tp > 1 && recipe->sequence_parallel && !vp_framework_of(recipe)->dtensor_tp) {
        const char *megatron = model_problem(model, megatron_sp_problem);
        if (megatron) return megatron;
    }
    if (model_calls(model, VP_BP_ROTARY) &&
        !vp_section_find(&model->section[VP_SECTION_EMBED], &vp_op_rotary_embedding))
        return "model: a Lua block's F.rotary needs the model's rotary_embedding { } among its embeddings";
    /* a shape's sequence is this rank's (shape_numel): seq_len / cp, and
     * under sequence parallelism the block input's rows; a chunked scan
     * cannot be cut over cp ranks */
    if (recipe->cp > 1) {
        const char *problem = model_problem(model, cp_problem);
        if (problem) return problem;
    }
    bool attends = model_calls(model, VP_BP_SDPA);
    if (attends && vp_finetune_method_of(recipe)->virtual_tokens == VP_VIRTUAL_PREFIX)
        return "finetune: prefix tuning of a Lua block's attention is not modelled (its keys behind a cached prefix)";
    return NULL;
}

static const char *block_title(const vp_op *op) { return program_of(op) ? program_of(op)->name : NULL; }

const vp_op_kind vp_op_block = {
    .name = "block",
    .doc = "a block written in Lua with the tensor vocabulary (F.linear, F.silu, ...): block { name, params, "
           "forward } in an architecture script (docs/writing-blocks.md)",
    .check = block_check,
    .check_tp = block_check_tp,
    .leaves = block_leaves,
    .facts = block_facts,
    .facts_each = true,
    .recipe_problem = block_recipe_problem,
    .prepare = block_prepare,
    .forward = block_forward,
    .title = block_title,
    .cost = VP_COST_BLOCK,
};
