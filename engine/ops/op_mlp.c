/* op_mlp.c — the feed-forward block: plain (GPT-2) or gated (SwiGLU), with
 * activation functions counted as the frameworks implement them. */
#include "framework.h"
#include "ops.h"

enum {
    MLP_HIDDEN,
    MLP_INTERMEDIATE,
    MLP_ACTIVATION,
    MLP_GATED,
    MLP_BIAS,
    MLP_RESID_DROPOUT,
    MLP_CONV1D,
    MLP_MODULE_NAMES,
    MLP_INNER_DROPOUT,
    MLP_HOLDS_ACTIVATION,
    MLP_HOLDS_OUTPUT,
    MLP_LIGER,
    MLP_FIELDS
};

enum { ACT_GELU, ACT_GELU_TANH, ACT_GELU_NEW, ACT_RELU, ACT_SILU, ACT_BLOOM_GELU, ACT_GELU_FAST, ACT_QUICK_GELU,
       ACT_RELU2 };
static const char *const activation_names[] = {"gelu", "gelu_pytorch_tanh", "gelu_new", "relu", "silu", "bloom_gelu",
                                               "gelu_fast", "quick_gelu", "relu2", NULL};

enum { NAMES_AUTO, NAMES_BLOOM, NAMES_T5, NAMES_PHI3, NAMES_PHI, NAMES_BERT, NAMES_MPT };
static const char *const module_name_sets[] = {"auto", "bloom", "t5", "phi3", "phi", "bert", "mpt", NULL};

static const vp_field mlp_fields[MLP_FIELDS] = {
    [MLP_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
    [MLP_INTERMEDIATE] = {"intermediate", VP_FIELD_INT, true, 0, 1, 1 << 22, NULL, "inner width"},
    [MLP_ACTIVATION] = {"activation", VP_FIELD_ENUM, false, ACT_GELU, 0, 0, activation_names,
                        "activation as HF names it (hidden_act / activation_function)"},
    [MLP_GATED] = {"gated", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "down(act(gate(x)) * up(x)) as LLaMA's MLP (SwiGLU with silu)"},
    [MLP_BIAS] = {"bias", VP_FIELD_BOOL, false, 0, 0, 1, NULL, "biases on the projections"},
    [MLP_RESID_DROPOUT] = {"resid_dropout", VP_FIELD_NUMBER, false, 0, 0, 0.999999, NULL,
                           "dropout on the output, inside the module (GPT-2's MLP dropout)"},
    [MLP_CONV1D] = {"conv1d", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                    "the projections are transformers' Conv1D (GPT-2), not nn.Linear"},
    [MLP_MODULE_NAMES] = {"module_names", VP_FIELD_ENUM, false, NAMES_AUTO, 0, 0, module_name_sets,
                          "the projections' names for LoRA targets: auto (gate_proj/up_proj/down_proj when gated, "
                          "else c_fc/c_proj), bloom (dense_h_to_4h, dense_4h_to_h, GPT-NeoX's too), t5 (wi, wo; gated "
                          "wi_0, wi_1), bert (both dense: BertIntermediate's and BertOutput's), phi3 (gated: one "
                          "gate_up_proj, whose output is chunked in two views, and "
                          "down_proj), phi (fc1, fc2: Phi-1/Phi-2) or mpt (up_proj, down_proj, not gated)"},
    [MLP_INNER_DROPOUT] = {"inner_dropout", VP_FIELD_NUMBER, false, 0, 0, 0.999999, NULL,
                           "dropout on the activation before the down projection (T5's DenseReluDense)"},
    [MLP_HOLDS_ACTIVATION] = {"holds_activation", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                              "the activation's output stays a local until the norm after the block returns "
                              "(BertLayer.feed_forward_chunk: intermediate_output while BertOutput runs), whether or "
                              "not autograd saves it"},
    [MLP_HOLDS_OUTPUT] = {"holds_output", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                          "the down projection's output stays a local through the dropout and the residual add "
                          "after it, until the layer returns (MptMLP's intermediate_output, added inside the "
                          "module)"},
    [MLP_LIGER] = {"liger", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "Liger-Kernel's patch for the model type swaps this gated MLP for its own (LigerSwiGLUMLP, "
                   "LigerPhi3SwiGLUMLP, Gemma's LigerGEGLUMLP), which recipe key liger_swiglu turns on"},
};

enum { UP_W, UP_B, GATE_W, GATE_B, DOWN_W, DOWN_B, MLP_SLOTS };

/* Megatron's split: up and gate column-parallel (f / tp outputs each), down
 * row-parallel (f / tp inputs), the down bias whole. */
static unsigned mlp_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    uint64_t h = vp_op_u64(op, MLP_HIDDEN), f = vp_op_u64(op, MLP_INTERMEDIATE) / tp;
    bool bias = vp_op_flag(op, MLP_BIAS), gated = vp_op_flag(op, MLP_GATED);
    /* gated: LLaMA's names; plain: GPT-2's c_fc and c_proj, or BLOOM's, or T5's */
    unsigned names = (unsigned)vp_op_u64(op, MLP_MODULE_NAMES);
    vp_module up_module = gated ? VP_MODULE_UP_PROJ : VP_MODULE_C_FC;
    vp_module gate_module = VP_MODULE_GATE_PROJ;
    vp_module down_module = gated ? VP_MODULE_DOWN_PROJ : VP_MODULE_C_PROJ;
    if (names == NAMES_BLOOM) {
        up_module = VP_MODULE_DENSE_H_TO_4H;
        down_module = VP_MODULE_DENSE_4H_TO_H;
    } else if (names == NAMES_PHI) {
        up_module = VP_MODULE_FC1;
        down_module = VP_MODULE_FC2;
    } else if (names == NAMES_BERT) {
        up_module = down_module = VP_MODULE_DENSE;
    } else if (names == NAMES_MPT) {
        up_module = VP_MODULE_UP_PROJ;
        down_module = VP_MODULE_DOWN_PROJ;
    } else if (names == NAMES_T5) {
        up_module = gated ? VP_MODULE_WI_1 : VP_MODULE_WI;
        gate_module = VP_MODULE_WI_0;
        down_module = VP_MODULE_WO;
    } else if (names == NAMES_PHI3) { /* Phi3MLP: gate_up_proj, 2f outputs, in the gate's slots */
        out[UP_W] = vp_param(0, "mlp.gate_up_proj", VP_MODULE_NONE, 0);
        out[UP_B] = vp_param(0, "mlp.gate_up_proj", VP_MODULE_NONE, 0);
        out[GATE_W] = vp_param(h * 2 * f, "mlp.gate_up_proj.weight", VP_MODULE_GATE_UP_PROJ, 2 * f);
        out[GATE_B] = vp_param(bias ? 2 * f : 0, "mlp.gate_up_proj.bias", VP_MODULE_GATE_UP_PROJ, 0);
        out[DOWN_W] = vp_param(f * h, "mlp.down_proj.weight", down_module, h);
        out[DOWN_B] = vp_param(bias ? h : 0, "mlp.down_proj.bias", down_module, 0);
        return MLP_SLOTS;
    }
    out[UP_W] = vp_param(h * f, "mlp.up_proj.weight", up_module, f);
    out[UP_B] = vp_param(bias ? f : 0, "mlp.up_proj.bias", up_module, 0);
    out[GATE_W] = vp_param(gated ? h * f : 0, "mlp.gate_proj.weight", gate_module, f);
    out[GATE_B] = vp_param(gated && bias ? f : 0, "mlp.gate_proj.bias", gate_module, 0);
    out[DOWN_W] = vp_param(f * h, "mlp.down_proj.weight", down_module, h);
    out[DOWN_B] = vp_param(bias ? h : 0, "mlp.down_proj.bias", down_module, 0);
    /* T5PreTrainedModel._keep_in_fp32_modules = ["wo"] */
    out[DOWN_W].keep_fp32 = names == NAMES_T5;
    for (unsigned i = 0; i < MLP_SLOTS; i++) out[i].conv1d = vp_op_flag(op, MLP_CONV1D);
    return MLP_SLOTS;
}

/* The tanh approximations' last three ops, consuming `inner` and `half`:
 * half * (1 + tanh(inner)); tanh keeps its output, the product both of its
 * operands; the labels name them (mlp.gelu_new.*, mlp.gelu_fast.*). */
static vp_t tanh_tail(vp_sim *sim, vp_t half, vp_t inner, uint64_t n, const char *tanh_label, const char *add_label,
                      const char *mul_label) {
    vp_t t = vp_unary(sim, inner, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, inner)->dtype, tanh_label);
    vp_drop(sim, inner);
    vp_t one_plus = vp_shift(sim, t, (vp_dtype)vp_at(sim, t)->dtype, n, add_label);
    vp_drop(sim, t);
    vp_t y = vp_mul(sim, half, one_plus, n, mul_label);
    vp_drop(sim, half);
    vp_drop(sim, one_plus);
    return y;
}

/* HF's NewGELUActivation (gelu_new):
 *   0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))
 * evaluated left to right: eight elementwise ops. pow keeps its input (in
 * fp32: pow is on autocast's fp32 list), tanh its output, and the final
 * multiply both of its operands; the other results are freed at once. */
static vp_t gelu_new(vp_step *step, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel;
    vp_t half = vp_scale(sim, x, "mlp.gelu_new.half");
    vp_t xa = vp_autocast_fp32(step, x, "mlp.gelu_new.pow");
    vp_t cube = vp_unary(sim, xa, VP_SAVES_INPUT, 2, (vp_dtype)vp_at(sim, xa)->dtype, "mlp.gelu_new.pow");
    vp_drop(sim, xa);
    vp_t scaled_cube = vp_scale(sim, cube, "mlp.gelu_new.mul");
    vp_drop(sim, cube);
    vp_t inner = vp_add(sim, x, scaled_cube, n, "mlp.gelu_new.add");
    vp_drop(sim, scaled_cube);
    vp_t scaled = vp_scale(sim, inner, "mlp.gelu_new.mul");
    vp_drop(sim, inner);
    return tanh_tail(sim, half, scaled, n, "mlp.gelu_new.tanh", "mlp.gelu_new.add", "mlp.gelu_new.mul");
}

/* HF's FastGELUActivation (gelu_fast, GPT-NeoX-20B's config):
 *   0.5 * input * (1.0 + torch.tanh(input * 0.7978845608 * (1.0 + 0.044715 * input * input)))
 * evaluated left to right. Unlike gelu_new there is no pow, so nothing runs
 * in fp32 under autocast; but three tensor-by-tensor multiplies each keep
 * both operands: 0.044715 * input (with input), input * 0.7978845608 with
 * 1 + 0.044715 * input^2, and 0.5 * input with 1 + tanh; tanh keeps its
 * output. Six input-sized tensors besides the input. */
static vp_t gelu_fast(vp_step *step, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel;
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    vp_t half = vp_scale(sim, x, "mlp.gelu_fast.mul");
    vp_t scaled = vp_scale(sim, x, "mlp.gelu_fast.mul");
    vp_t small = vp_scale(sim, x, "mlp.gelu_fast.mul");
    vp_t square = vp_mul(sim, small, x, n, "mlp.gelu_fast.mul");
    vp_drop(sim, small);
    vp_t one_plus_square = vp_shift(sim, square, dt, n, "mlp.gelu_fast.add");
    vp_drop(sim, square);
    vp_t inner = vp_mul(sim, scaled, one_plus_square, n, "mlp.gelu_fast.mul");
    vp_drop(sim, scaled);
    vp_drop(sim, one_plus_square);
    return tanh_tail(sim, half, inner, n, "mlp.gelu_fast.tanh", "mlp.gelu_fast.add", "mlp.gelu_fast.mul");
}

/* HF's QuickGELUActivation (quick_gelu, CLIP's): input * torch.sigmoid(1.702
 * * input). The scaled copy is freed once sigmoid has run; sigmoid keeps its
 * output and the product keeps both operands: the input and the sigmoid. */
static vp_t quick_gelu(vp_step *step, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel;
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    vp_t scaled = vp_scale(sim, x, "mlp.quick_gelu.mul");
    vp_t sig = vp_unary(sim, scaled, VP_SAVES_OUTPUT, 0, dt, "mlp.quick_gelu.sigmoid");
    vp_drop(sim, scaled);
    vp_t y = vp_mul(sim, x, sig, n, "mlp.quick_gelu.mul");
    vp_drop(sim, sig);
    return y;
}

/* HF's ReLUSquaredActivation (relu2): torch.square(relu(input)). relu keeps
 * its output; square is pow(x, 2), on autocast's fp32 list like gelu_new's
 * pow, and keeps its (upcast) input. */
static vp_t relu2(vp_step *step, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t r = vp_unary(sim, x, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, x)->dtype, "mlp.relu2.relu");
    vp_t ra = vp_autocast_fp32(step, r, "mlp.relu2.square");
    vp_drop(sim, r);
    vp_t y = vp_unary(sim, ra, VP_SAVES_INPUT, 2, (vp_dtype)vp_at(sim, ra)->dtype, "mlp.relu2.square");
    vp_drop(sim, ra);
    return y;
}

/* BLOOM's GeLUFunction (modeling_bloom.py): an autograd.Function that
 * saves its input and computes
 *   x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))
 * without autograd: at most four input-sized temporaries are alive at once
 * (x * 0.5, 0.79788456 * x, 0.044715 * x and its product with x) before the
 * output. Its backward (bloom_gelu_back) holds at most five, counting
 * tanh_out and the gradient it returns: four beside the gradient. */
static vp_t bloom_gelu(vp_step *step, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, x)->numel;
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    bool grad_mode = sim->grad_mode;
    sim->grad_mode = false;
    vp_t temps[4];
    for (unsigned i = 0; i < 4; i++) temps[i] = vp_new(sim, n, dt, "mlp.bloom_gelu.temporary");
    for (unsigned i = 0; i < 4; i++) vp_drop(sim, temps[i]);
    sim->grad_mode = grad_mode;
    return vp_unary(sim, x, VP_SAVES_INPUT, 4, dt, "mlp.bloom_gelu");
}

/* One-kernel activations: gelu (erf or tanh approximation) and silu keep
 * their input, relu its output (threshold_backward). None is on an autocast
 * list: they run in their input's dtype. */
static vp_t activate(vp_step *step, unsigned kind, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_dtype dt = (vp_dtype)vp_at(sim, x)->dtype;
    switch (kind) {
    case ACT_GELU_NEW: return gelu_new(step, x);
    case ACT_BLOOM_GELU: return bloom_gelu(step, x);
    case ACT_GELU_FAST: return gelu_fast(step, x);
    case ACT_QUICK_GELU: return quick_gelu(step, x);
    case ACT_RELU2: return relu2(step, x);
    case ACT_RELU: return vp_unary(sim, x, VP_SAVES_OUTPUT, 0, dt, "mlp.relu");
    case ACT_SILU: return vp_unary(sim, x, VP_SAVES_INPUT, 0, dt, "mlp.silu");
    case ACT_GELU_TANH: return vp_unary(sim, x, VP_SAVES_INPUT, 0, dt, "mlp.gelu_tanh");
    default: return vp_unary(sim, x, VP_SAVES_INPUT, 0, dt, "mlp.gelu");
    }
}

/* Liger's gated MLPs (src/liger_kernel/transformers/swiglu.py, geglu.py):
 * LigerSwiGLUMLP's down_proj(LigerSiLUMulFunction.apply(gate_proj(x),
 * up_proj(x))) (LigerGEGLUMLP's LigerGELUMulFunction keeps and writes the
 * same tensors), and LigerPhi3SwiGLUMLP's, which chunks gate_up_proj's
 * output in two views that the function's @ensure_contiguous copies (the
 * copies saved); the views are the module's locals (`gate`, `up_states`),
 * keeping the whole output until it returns. */
static vp_t liger_swiglu(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x, uint64_t f, vp_t locals[2]) {
    vp_sim *sim = &step->sim;
    vp_t gate, up;
    if (vp_op_u64(op, MLP_MODULE_NAMES) == NAMES_PHI3) {
        vp_t both = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], 2 * f, "mlp.gate_up_proj");
        vp_t halves[2];
        vp_split_columns(sim, both, 2, halves, "mlp.chunk");
        vp_drop(sim, both);
        gate = vp_copy(sim, halves[0], "mlp.liger.contiguous");
        up = vp_copy(sim, halves[1], "mlp.liger.contiguous");
        locals[0] = halves[0];
        locals[1] = halves[1];
    } else {
        gate = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], f, "mlp.gate_proj");
        up = vp_project_column(step, x, leaves[UP_W], leaves[UP_B], f, "mlp.up_proj");
    }
    vp_t inner = vp_liger_swiglu(sim, gate, up, "mlp.liger_swiglu");
    vp_drop(sim, gate);
    vp_drop(sim, up);
    return inner;
}

static vp_t mlp_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t given) {
    vp_sim *sim = &step->sim;
    /* DTensor's PrepareModuleInput: the input gathered once for gate and up */
    unsigned linears = vp_op_flag(op, MLP_GATED) && vp_op_u64(op, MLP_MODULE_NAMES) != NAMES_PHI3 ? 2 : 1;
    vp_t gathered = vp_module_input(step, given, leaves[vp_op_flag(op, MLP_GATED) ? GATE_W : UP_W], linears),
         x = gathered ? gathered : given;
    uint64_t h = vp_op_u64(op, MLP_HIDDEN), f = vp_split_tp(step, vp_op_u64(op, MLP_INTERMEDIATE));
    unsigned kind = (unsigned)vp_op_u64(op, MLP_ACTIVATION);
    vp_t inner;
    bool fused = vp_op_u64(op, MLP_MODULE_NAMES) == NAMES_PHI3, t5 = vp_op_u64(op, MLP_MODULE_NAMES) == NAMES_T5;
    /* the module's locals until it returns: T5DenseGatedActDense's
     * hidden_gelu and hidden_linear, Phi3MLP's gate */
    vp_t locals[2] = {0, 0};
    if (vp_op_flag(op, MLP_GATED) && vp_framework_of(step->recipe)->fused_swiglu) {
        /* Megatron's MLP: one linear_fc1 GEMM makes gate and up side by side
         * (2f), and the fused bias_swiglu keeps that whole output */
        vp_t fc1;
        if (fused) {
            fc1 = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], 2 * f, "mlp.linear_fc1");
        } else {
            vp_t gate = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], f, "mlp.linear_fc1");
            vp_t up = vp_project_column(step, x, leaves[UP_W], leaves[UP_B], f, "mlp.linear_fc1");
            fc1 = vp_cat(sim, gate, up, "mlp.linear_fc1");
            vp_drop(sim, gate);
            vp_drop(sim, up);
        }
        inner = vp_glu(sim, fc1, "mlp.swiglu");
        vp_drop(sim, fc1);
    } else if (vp_op_flag(op, MLP_GATED) && vp_op_flag(op, MLP_LIGER) && step->recipe->liger_swiglu) {
        inner = liger_swiglu(step, op, leaves, x, f, locals);
    } else if (fused) {
        /* Phi3MLP: gate, up_states = self.gate_up_proj(x).chunk(2, dim=-1);
         * up_states * self.activation_fn(gate): the activation keeps the
         * gate's view and the product the up half's, so the whole output
         * stays; and the local `gate` keeps it until the module returns,
         * through down_proj, even where nothing is saved on the GPU
         * (save_on_cpu) */
        vp_t both = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], 2 * f, "mlp.gate_up_proj");
        vp_t halves[2];
        vp_split_columns(sim, both, 2, halves, "mlp.chunk");
        vp_drop(sim, both);
        vp_t act = activate(step, kind, halves[0]);
        inner = vp_mul(sim, halves[1], act, vp_at(sim, act)->numel, "mlp.gate_mul");
        locals[0] = halves[0];
        vp_drop(sim, halves[1]);
        vp_drop(sim, act);
    } else if (vp_op_flag(op, MLP_GATED)) {
        /* self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)); T5
         * names them (hidden_gelu, hidden_linear): locals until it returns */
        vp_t gate = vp_project_column(step, x, leaves[GATE_W], leaves[GATE_B], f, "mlp.gate_proj");
        vp_t act = activate(step, kind, gate);
        vp_drop(sim, gate);
        vp_t up = vp_project_column(step, x, leaves[UP_W], leaves[UP_B], f, "mlp.up_proj");
        inner = vp_mul(sim, act, up, vp_at(sim, up)->numel, "mlp.gate_mul");
        if (t5) {
            locals[0] = act;
            locals[1] = up;
        } else {
            vp_drop(sim, act);
            vp_drop(sim, up);
        }
    } else {
        /* hidden = self.act(self.c_fc(hidden)) */
        vp_t up = vp_project_column(step, x, leaves[UP_W], leaves[UP_B], f, "mlp.up_proj");
        inner = activate(step, kind, up);
        vp_drop(sim, up);
    }
    if (vp_op_flag(op, MLP_HOLDS_ACTIVATION)) vp_step_keep_local(step, inner, VP_LOCAL_OF_POST_NORM_BLOCK);
    /* T5's DenseReluDense: self.dropout(hidden_states) before self.wo */
    vp_t dropped_inner = vp_train_dropout(step, inner, op->value[MLP_INNER_DROPOUT], "mlp.dropout");
    vp_drop(sim, inner);
    if (t5) {
        /* hidden_states.to(self.wo.weight.dtype) where they differ: under
         * autocast an fp32 copy, which wo's autocast casts back */
        vp_t cast = vp_to(sim, dropped_inner, (vp_dtype)vp_at(sim, leaves[DOWN_W])->dtype, "mlp.wo_dtype");
        vp_drop(sim, dropped_inner);
        dropped_inner = cast;
    }
    vp_t out = vp_project_row(step, dropped_inner, leaves[DOWN_W], leaves[DOWN_B], h, "mlp.down_proj");
    vp_drop(sim, dropped_inner);
    vp_drop(sim, locals[0]);
    vp_drop(sim, locals[1]);
    if (vp_op_flag(op, MLP_HOLDS_OUTPUT)) vp_step_keep_local(step, out, VP_LOCAL_OF_POST_NORM_BLOCK);
    vp_t dropped = vp_train_dropout(step, out, op->value[MLP_RESID_DROPOUT], "mlp.resid_dropout");
    vp_drop(sim, out);
    /* the gathered input is forward's argument until it returns
     * (PrepareModuleInput's pre-hook: nn.Module._call_impl's `args`) */
    vp_drop(sim, gathered);
    return dropped;
}

static const char *mlp_check(const vp_op *op) {
    if (vp_op_u64(op, MLP_MODULE_NAMES) == NAMES_PHI3 && !vp_op_flag(op, MLP_GATED))
        return "module_names = \"phi3\" names a fused gate_up_proj: needs gated";
    if (vp_op_u64(op, MLP_MODULE_NAMES) == NAMES_PHI && vp_op_flag(op, MLP_GATED))
        return "module_names = \"phi\" names Phi-2's fc1 and fc2: not gated";
    return NULL;
}

static const char *mlp_check_tp(const vp_op *op, unsigned tp) {
    return vp_op_u64(op, MLP_INTERMEDIATE) % tp ? "tp: must divide the MLP's intermediate width" : NULL;
}

const vp_op_kind vp_op_mlp = {
    .name = "mlp",
    .doc = "feed-forward block: up, activation, down; gated variants multiply act(gate(x)) by up(x)",
    .fields = mlp_fields,
    .n_fields = MLP_FIELDS,
    .cost = VP_COST_MLP,
    .check = mlp_check,
    .check_tp = mlp_check_tp,
    .leaves = mlp_leaves,
    .forward = mlp_forward,
};
