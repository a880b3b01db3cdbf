/* op_norm.c — LayerNorm (one native kernel) and RMSNorm (HF's composite). */
#include <math.h>

#include "framework.h"
#include "ops.h"

/* ---- LayerNorm ---- */

enum { LN_HIDDEN, LN_BIAS, LN_EPS, LN_LAYER_LOCAL, LN_STYLE, LN_FIELDS };

enum { LN_NATIVE, LN_COHERE };
static const char *const layernorm_styles[] = {"native", "cohere", NULL};

static const vp_field layernorm_fields[LN_FIELDS] = {
    [LN_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "normalized width"},
    [LN_BIAS] = {"bias", VP_FIELD_BOOL, false, 1, 0, 1, NULL, "learned bias beside the weight"},
    [LN_EPS] = {"eps", VP_FIELD_NUMBER, false, 1e-5, 0, 1, NULL, "variance epsilon"},
    [LN_LAYER_LOCAL] = {"layer_local", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                        "the output stays bound to a name of the layer's forward until the layer returns, "
                        "through the residual's add (PhiDecoderLayer's hidden_states)"},
    [LN_STYLE] = {"style", VP_FIELD_ENUM, false, LN_NATIVE, 0, 0, layernorm_styles,
                  "native: nn.LayerNorm's one kernel; cohere: CohereLayerNorm (transformers 4.5x), written out in "
                  "fp32 (the input cast up, the mean subtracted twice, pow, mean, rsqrt, the weight made fp32, the "
                  "result cast back), without a bias"},
};

static const char *layernorm_check(const vp_op *op) {
    if (vp_op_u64(op, LN_STYLE) == LN_COHERE && vp_op_flag(op, LN_BIAS))
        return "style = \"cohere\" is CohereLayerNorm, which has no bias: needs bias = false";
    return NULL;
}

/* CohereLayerNorm.forward (models/cohere/modeling_cohere.py, transformers
 * commit 015bfeb of the 4.5x line), line by line:
 *   input_dtype = hidden_states.dtype
 *   hidden_states = hidden_states.to(torch.float32)
 *   mean = hidden_states.mean(-1, keepdim=True)
 *   variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
 *   hidden_states = (hidden_states - mean) * torch.rsqrt(variance + eps)
 *   hidden_states = self.weight.to(torch.float32) * hidden_states
 *   return hidden_states.to(input_dtype)
 * mean (2.x) and the subtractions keep nothing, pow keeps its input, rsqrt
 * its output, the products both operands; mean and variance are locals
 * until it returns. */
vp_t vp_cohere_layer_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows) {
    vp_sim *sim = &step->sim;
    vp_t h32 = vp_to(sim, x, VP_FP32, "cohere_layernorm.upcast");
    uint64_t n = vp_at(sim, h32)->numel;
    vp_t mean = vp_reduce(sim, h32, rows, "cohere_layernorm.mean");
    vp_t centered = vp_add(sim, h32, mean, n, "cohere_layernorm.sub");
    vp_t squared = vp_unary(sim, centered, VP_SAVES_INPUT, 2, VP_FP32, "cohere_layernorm.pow");
    vp_drop(sim, centered);
    vp_t variance = vp_reduce(sim, squared, rows, "cohere_layernorm.variance");
    vp_drop(sim, squared);
    vp_t again = vp_add(sim, h32, mean, n, "cohere_layernorm.sub");
    vp_t shifted = vp_shift(sim, variance, VP_FP32, rows, "cohere_layernorm.add_eps");
    vp_t inverse = vp_unary(sim, shifted, VP_SAVES_OUTPUT, 2, VP_FP32, "cohere_layernorm.rsqrt");
    vp_drop(sim, shifted);
    vp_t normed = vp_mul(sim, again, inverse, n, "cohere_layernorm.mul");
    vp_drop(sim, again);
    vp_drop(sim, inverse);
    vp_drop(sim, h32);
    vp_t w32 = vp_to(sim, weight, VP_FP32, "cohere_layernorm.weight_float");
    vp_t scaled = vp_mul(sim, w32, normed, n, "cohere_layernorm.weight");
    vp_drop(sim, w32);
    vp_drop(sim, normed);
    vp_t y = vp_to(sim, scaled, (vp_dtype)vp_at(sim, x)->dtype, "cohere_layernorm.downcast");
    vp_drop(sim, scaled);
    vp_drop(sim, variance);
    vp_drop(sim, mean);
    return y;
}

static unsigned layernorm_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    (void)tp; /* norms are replicated on every tensor-parallel rank */
    uint64_t h = vp_op_u64(op, LN_HIDDEN);
    out[0] = vp_param(h, "layernorm.weight", VP_MODULE_NORM, 0);
    out[1] = vp_param(vp_op_flag(op, LN_BIAS) ? h : 0, "layernorm.bias", VP_MODULE_NORM, 0);
    return 2;
}

vp_t vp_layer_norm_op(vp_step *step, vp_t x, vp_t weight, vp_t bias, uint64_t rows, const char *label) {
    vp_sim *sim = &step->sim;
    vp_t xa = vp_autocast_fp32(step, x, label);
    vp_t wa = weight ? vp_autocast_fp32(step, weight, label) : 0;
    vp_t ba = bias ? vp_autocast_fp32(step, bias, label) : 0;
    vp_t y = vp_layer_norm(sim, xa, wa, ba, rows, step->recipe->device, label);
    vp_drop(sim, ba);
    vp_drop(sim, wa);
    vp_drop(sim, xa);
    return y;
}

static vp_t layernorm_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_t y = vp_op_u64(op, LN_STYLE) == LN_COHERE ? vp_cohere_layer_norm(step, x, leaves[0], step->rows)
                                                  : vp_layer_norm_op(step, x, leaves[0], leaves[1], step->rows,
                                                                     "layernorm");
    if (vp_op_flag(op, LN_LAYER_LOCAL)) vp_step_keep_local(step, y, VP_LOCAL_OF_LAYER);
    vp_step_norm_returns(step);
    return y;
}

const vp_op_kind vp_op_layernorm = {
    .name = "layernorm",
    .doc = "nn.LayerNorm: saves its input and fp32 per-row mean and rstd",
    .fields = layernorm_fields,
    .n_fields = LN_FIELDS,
    .check = layernorm_check,
    .roles = VP_ROLE_NORM,
    .cost = VP_COST_NORM,
    .leaves = layernorm_leaves,
    .forward = layernorm_forward,
};

/* ---- RMSNorm ---- */

enum { RMS_HIDDEN, RMS_EPS, RMS_STYLE, RMS_KEEP_FP32, RMS_LIGER, RMS_LIGER_INSTANCE, RMS_FIELDS };

enum { STYLE_LLAMA, STYLE_T5, STYLE_GEMMA, STYLE_OLMO2 };
static const char *const style_names[] = {"llama", "t5", "gemma", "olmo2", NULL};

/* What Liger-Kernel's patch for the model type does with the norm
 * (src/liger_kernel/transformers/monkey_patch.py, rms_norm.py): nothing,
 * LigerRMSNorm's in-place backward (Llama's kind, Gemma 1's, GPT-OSS's),
 * or an out-of-place one (LigerRMSNormForGemma2 / Gemma3, ForOlmo2). */
const char *const vp_liger_norm_names[] = {"none", "in_place", "out_of_place", NULL};
/* liger_instance's values: vp_liger_norm_names', then as the class swap */
enum { LIGER_AS_CLASS = VP_LIGER_NORM_OUT_OF_PLACE + 1 };
static const char *const liger_instance_names[] = {"none", "in_place", "out_of_place", "as_class", NULL};

static const vp_field rmsnorm_fields[RMS_FIELDS] = {
    [RMS_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "normalized width"},
    [RMS_EPS] = {"eps", VP_FIELD_NUMBER, false, 1e-6, 0, 1, NULL, "variance epsilon"},
    [RMS_STYLE] = {"style", VP_FIELD_ENUM, false, STYLE_LLAMA, 0, 0, style_names,
                   "llama: the input cast to fp32 and normalized there (LlamaRMSNorm); t5: only the variance in "
                   "fp32, the input itself multiplied (T5LayerNorm); gemma: normalized and scaled by 1 + weight "
                   "in fp32, cast back last (GemmaRMSNorm); olmo2: the weight applied to the fp32 rows, cast back "
                   "last (Olmo2RMSNorm)"},
    [RMS_KEEP_FP32] = {"keep_fp32", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                       "the weight is among the model's _keep_in_fp32_modules (GPT-OSS's norms): fp32 when "
                       "from_pretrained loads the model in fp16 or quantized"},
    [RMS_LIGER] = {"liger", VP_FIELD_ENUM, false, VP_LIGER_NORM_NONE, 0, 0, vp_liger_norm_names,
                   "what Liger-Kernel's patch for the model type puts here, which recipe key liger_rms_norm "
                   "turns on: none (no patch), in_place (LigerRMSNorm: Llama's kind, Gemma 1, GPT-OSS) or "
                   "out_of_place (Gemma 2 and 3, OLMo-2: its backward makes dX anew)"},
    [RMS_LIGER_INSTANCE] = {"liger_instance", VP_FIELD_ENUM, false, LIGER_AS_CLASS, 0, 0, liger_instance_names,
                            "what Liger's patch of a built model (liger_before_load false: the Trainer's) puts "
                            "here where it differs from its class swap: as_class, or none, in_place, "
                            "out_of_place (OLMo-2's final norm: a LigerRMSNorm in place)"},
};

static unsigned rmsnorm_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    unsigned tp = split->tp;
    (void)tp;
    out[0] = vp_param(vp_op_u64(op, RMS_HIDDEN), "rmsnorm.weight", VP_MODULE_NORM, 0);
    out[0].keep_fp32 = vp_op_flag(op, RMS_KEEP_FP32);
    return 1;
}

/* LlamaRMSNorm.forward (transformers 4.4x-4.5x), line by line:
 *   input_dtype = hidden_states.dtype
 *   hidden_states = hidden_states.to(torch.float32)
 *   variance = hidden_states.pow(2).mean(-1, keepdim=True)
 *   hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
 *   return self.weight * hidden_states.to(input_dtype)
 * pow, mean and rsqrt are on autocast's fp32 list; their inputs are fp32
 * already. pow's backward builds grad * (2 * self.pow(1)): two temporaries;
 * rsqrt's builds -0.5 * grad * result.pow(3): two more. */
/* The steps HF's RMSNorms share in fp32: x.to(float32), pow(2),
 * mean(-1), + eps, rsqrt and their product, which it returns; the fp32
 * copy goes once the product is made (the name is rebound to it).
 * `variance` is a local of Llama's and OLMo 2's forward, alive until it
 * returns: handed to *variance_local for the caller to drop then; a
 * temporary in Gemma's _norm (variance_local NULL). */
typedef struct {
    const char *upcast, *pow, *mean, *add_eps, *rsqrt, *mul;
} norm_labels;

static vp_t normalize_fp32(vp_step *step, vp_t x, uint64_t rows, vp_t *variance_local, const norm_labels *label) {
    vp_sim *sim = &step->sim;
    vp_t h32 = vp_to(sim, x, VP_FP32, label->upcast);
    vp_t squared = vp_unary(sim, h32, VP_SAVES_INPUT, 2, VP_FP32, label->pow);
    vp_t variance = vp_reduce(sim, squared, rows, label->mean);
    vp_drop(sim, squared);
    vp_t shifted = vp_shift(sim, variance, VP_FP32, rows, label->add_eps);
    if (variance_local)
        *variance_local = variance;
    else
        vp_drop(sim, variance);
    vp_t inverse = vp_unary(sim, shifted, VP_SAVES_OUTPUT, 2, VP_FP32, label->rsqrt);
    vp_drop(sim, shifted);
    vp_t normed = vp_mul(sim, h32, inverse, vp_at(sim, h32)->numel, label->mul);
    vp_drop(sim, inverse);
    vp_drop(sim, h32);
    return normed;
}

vp_t vp_hf_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows) {
    static const norm_labels labels = {"rmsnorm.upcast", "rmsnorm.pow",   "rmsnorm.mean",
                                       "rmsnorm.add_eps", "rmsnorm.rsqrt", "rmsnorm.mul"};
    vp_sim *sim = &step->sim;
    vp_t variance;
    vp_t normed = normalize_fp32(step, x, rows, &variance, &labels);
    vp_t cast = vp_to(sim, normed, (vp_dtype)vp_at(sim, x)->dtype, "rmsnorm.downcast");
    vp_t y = vp_mul(sim, weight, cast, vp_at(sim, cast)->numel, "rmsnorm.weight");
    vp_drop(sim, cast);
    vp_drop(sim, normed);
    vp_drop(sim, variance);
    return y;
}

/* Olmo2RMSNorm.forward (transformers 4.4x-4.5x): LlamaRMSNorm's steps, but
 *   return (self.weight * hidden_states).to(input_dtype)
 * the weight multiplies the fp32 rows (a 16-bit weight promotes to fp32),
 * so the product keeps them in fp32, and the cast comes last; the
 * normalized rows (hidden_states) live through it. */
vp_t vp_olmo2_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows) {
    static const norm_labels labels = {"olmo2_rmsnorm.upcast", "olmo2_rmsnorm.pow",   "olmo2_rmsnorm.mean",
                                       "olmo2_rmsnorm.add_eps", "olmo2_rmsnorm.rsqrt", "olmo2_rmsnorm.mul"};
    vp_sim *sim = &step->sim;
    vp_t variance;
    vp_t normed = normalize_fp32(step, x, rows, &variance, &labels);
    vp_t scaled = vp_mul(sim, weight, normed, vp_at(sim, normed)->numel, "olmo2_rmsnorm.weight");
    vp_t y = vp_to(sim, scaled, (vp_dtype)vp_at(sim, x)->dtype, "olmo2_rmsnorm.downcast");
    vp_drop(sim, scaled);
    vp_drop(sim, normed);
    vp_drop(sim, variance);
    return y;
}

/* T5LayerNorm.forward (transformers 4.4x-4.5x):
 *   variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
 *   hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
 *   if self.weight.dtype in [torch.float16, torch.bfloat16]:
 *       hidden_states = hidden_states.to(self.weight.dtype)
 *   return self.weight * hidden_states
 * The fp32 copy is a temporary that pow keeps; the input itself is
 * multiplied by the fp32 rsqrt (a 16-bit input's product promotes to
 * fp32). In fp32 this is LlamaRMSNorm's sequence exactly. */
static vp_t t5_layer_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows) {
    vp_sim *sim = &step->sim;
    vp_t h32 = vp_to(sim, x, VP_FP32, "t5_layer_norm.upcast");
    vp_t squared = vp_unary(sim, h32, VP_SAVES_INPUT, 2, VP_FP32, "t5_layer_norm.pow");
    vp_drop(sim, h32);
    vp_t variance = vp_reduce(sim, squared, rows, "t5_layer_norm.mean");
    vp_drop(sim, squared);
    vp_t shifted = vp_shift(sim, variance, VP_FP32, rows, "t5_layer_norm.add_eps");
    vp_drop(sim, variance);
    vp_t inverse = vp_unary(sim, shifted, VP_SAVES_OUTPUT, 2, VP_FP32, "t5_layer_norm.rsqrt");
    vp_drop(sim, shifted);
    vp_t normed = vp_mul(sim, x, inverse, vp_at(sim, x)->numel, "t5_layer_norm.mul");
    vp_drop(sim, inverse);
    vp_dtype wdt = (vp_dtype)vp_at(sim, weight)->dtype;
    vp_t cast = wdt == VP_FP16 || wdt == VP_BF16 ? vp_to(sim, normed, wdt, "t5_layer_norm.downcast")
                                                 : (vp_hold(sim, normed), normed);
    vp_drop(sim, normed);
    vp_t y = vp_mul(sim, weight, cast, vp_at(sim, cast)->numel, "t5_layer_norm.weight");
    vp_drop(sim, cast);
    return y;
}

/* GemmaRMSNorm.forward (transformers 4.4x-4.5x):
 *   output = self._norm(x.float())      # x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
 *   output = output * (1.0 + self.weight.float())
 *   return output.type_as(x)
 * LlamaRMSNorm's steps in fp32, but the weight is applied before the cast
 * back: the product keeps the normalized rows in fp32, not in x's dtype. */
vp_t vp_gemma_rms_norm(vp_step *step, vp_t x, vp_t weight, uint64_t rows) {
    static const norm_labels labels = {"gemma_rmsnorm.float",   "gemma_rmsnorm.pow",   "gemma_rmsnorm.mean",
                                       "gemma_rmsnorm.add_eps", "gemma_rmsnorm.rsqrt", "gemma_rmsnorm.mul"};
    vp_sim *sim = &step->sim;
    vp_t normed = normalize_fp32(step, x, rows, NULL, &labels);
    vp_t w32 = vp_to(sim, weight, VP_FP32, "gemma_rmsnorm.weight_float");
    vp_t one_plus = vp_shift(sim, w32, VP_FP32, vp_at(sim, w32)->numel, "gemma_rmsnorm.one_plus");
    vp_drop(sim, w32);
    vp_t scaled = vp_mul(sim, normed, one_plus, vp_at(sim, normed)->numel, "gemma_rmsnorm.scale");
    vp_drop(sim, normed);
    vp_drop(sim, one_plus);
    vp_t y = vp_to(sim, scaled, (vp_dtype)vp_at(sim, x)->dtype, "gemma_rmsnorm.type_as");
    vp_drop(sim, scaled);
    return y;
}

/* LigerRMSNorm's backward spreads the rows over one program per
 * streaming multiprocessor (rms_norm_backward's sm_count: 1 on the CPU).
 * The step does not know the GPU: 132, an H100 SXM's (NVIDIA's H100
 * datasheet); its _dW is [132, h] fp32, 2.6 MiB at h = 5120, and a GPU
 * with fewer multiprocessors makes it smaller by 4 h bytes each. */
enum { LIGER_CUDA_PROGRAMS = 132 };

vp_t vp_liger_rms_norm_op(vp_step *step, vp_t x, vp_t weight, uint64_t rows, bool in_place, const char *label) {
    uint64_t programs = step->recipe->device == VP_DEVICE_CPU ? 1 : LIGER_CUDA_PROGRAMS;
    return vp_liger_rms_norm(&step->sim, x, weight, rows, in_place, programs, label);
}

/* What Liger's patch puts on this norm under the recipe: its class swap's,
 * or what its patch of a built model names here when that differs. */
static unsigned liger_kind(const vp_step *step, const vp_op *op) {
    unsigned instance = (unsigned)vp_op_u64(op, RMS_LIGER_INSTANCE);
    if (!step->recipe->liger_before_load && instance != LIGER_AS_CLASS) return instance;
    return (unsigned)vp_op_u64(op, RMS_LIGER);
}

static vp_t liger_rms_norm(vp_step *step, const vp_op *op, vp_t x, vp_t weight) {
    bool in_place = liger_kind(step, op) == VP_LIGER_NORM_IN_PLACE;
    return vp_liger_rms_norm_op(step, x, weight, step->rows, in_place, "rmsnorm.liger");
}

static vp_t rms_normalized(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    /* Megatron-LM runs a fused kernel (Transformer Engine / apex) */
    if (vp_framework_of(step->recipe)->fused_rmsnorm) return vp_rms_norm(&step->sim, x, leaves[0], step->rows, "rmsnorm");
    if (step->recipe->liger_rms_norm && liger_kind(step, op) != VP_LIGER_NORM_NONE)
        return liger_rms_norm(step, op, x, leaves[0]);
    if (vp_op_u64(op, RMS_STYLE) == STYLE_T5) return t5_layer_norm(step, x, leaves[0], step->rows);
    if (vp_op_u64(op, RMS_STYLE) == STYLE_GEMMA) return vp_gemma_rms_norm(step, x, leaves[0], step->rows);
    if (vp_op_u64(op, RMS_STYLE) == STYLE_OLMO2) return vp_olmo2_rms_norm(step, x, leaves[0], step->rows);
    return vp_hf_rms_norm(step, x, leaves[0], step->rows);
}

static vp_t rmsnorm_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    vp_t y = rms_normalized(step, op, leaves, x);
    vp_step_norm_returns(step);
    return y;
}

const vp_op_kind vp_op_rmsnorm = {
    .name = "rmsnorm",
    .doc = "HF's RMSNorm: an fp32 upcast, pow, mean, rsqrt and two multiplies, each keeping its own tensors",
    .fields = rmsnorm_fields,
    .n_fields = RMS_FIELDS,
    .roles = VP_ROLE_NORM,
    .cost = VP_COST_NORM,
    .leaves = rmsnorm_leaves,
    .forward = rmsnorm_forward,
};
