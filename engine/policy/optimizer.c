/* optimizer.c — the optimizer registry. Temporaries follow torch/optim in
 * PyTorch 2.x (adam.py, adamw.py, sgd.py) and, where recipe.torch_version
 * says so, 1.13. */
#include "optimizer.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* _single_tensor_adam: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
 * holds the sqrt and the quotient at once; Adam (not AdamW) with weight
 * decay first makes grad = grad.add(param, alpha=weight_decay).
 * _multi_tensor_adam (2.x): one list from _foreach_sqrt, divided and shifted
 * in place; the weight-decay copy of the gradients is deleted before it.
 * 1.13 also built denom = _foreach_add(exp_avg_sq_sqrt, eps): two lists. */
static unsigned adam_temporaries(const vp_recipe *recipe, double weight_decay, bool decoupled) {
    switch (recipe->optimizer_impl) {
    case VP_IMPL_FUSED: return 0;
    case VP_IMPL_FOREACH: return recipe->torch_version == VP_TORCH_1_13 ? 2 : 1;
    default: return 2 + (weight_decay != 0.0 && !decoupled);
    }
}

static unsigned adam_temps(const vp_recipe *recipe, double weight_decay) {
    return adam_temporaries(recipe, weight_decay, false);
}

static unsigned adamw_temps(const vp_recipe *recipe, double weight_decay) {
    return adam_temporaries(recipe, weight_decay, true);
}

/* _single_tensor_sgd / _multi_tensor_sgd: with weight decay the gradient is
 * first copied (grad.add(param) / _foreach_add); momentum updates its buffer
 * in place. */
static unsigned sgd_temps(const vp_recipe *recipe, double weight_decay) {
    if (recipe->optimizer_impl == VP_IMPL_FUSED) return 0;
    return weight_decay != 0.0;
}

static unsigned no_temps(const vp_recipe *recipe, double weight_decay) {
    (void)recipe;
    (void)weight_decay;
    return 0;
}

static uint64_t bytes_of(vp_dtype dtype, uint64_t numel) {
    uint64_t b;
    return vp_tensor_bytes(dtype, numel, &b) ? b : UINT64_MAX;
}

/* zeros_like(param) per state */
static uint64_t two_states(const vp_param_shape *p, vp_dtype dtype) { return 2 * bytes_of(dtype, p->numel); }
static uint64_t one_state(const vp_param_shape *p, vp_dtype dtype) { return bytes_of(dtype, p->numel); }
static uint64_t no_state(const vp_param_shape *p, vp_dtype dtype) {
    (void)p;
    (void)dtype;
    return 0;
}

/* bitsandbytes' 32-bit optimizers keep their states in fp32 whatever the
 * parameter's dtype (Optimizer2State.init_state, get_state_buffer(p,
 * dtype=torch.float32)); Lion one state, Adam two. */
static uint64_t fp32_two_states(const vp_param_shape *p, vp_dtype dtype) {
    (void)dtype;
    return 2 * bytes_of(VP_FP32, p->numel);
}
static uint64_t fp32_one_state(const vp_param_shape *p, vp_dtype dtype) {
    (void)dtype;
    return bytes_of(VP_FP32, p->numel);
}

/* bitsandbytes' 8-bit blockwise Adam (Optimizer2State with optim_bits=8):
 * state1 and state2 in uint8 with an fp32 absmax per block of 256
 * (blockwise quantization), for parameters of at least min_8bit_size =
 * 4096 elements; smaller ones keep fp32 states. The two 256-entry
 * quantization maps are shared by every parameter. */
static uint64_t adam_8bit_states(const vp_param_shape *p, vp_dtype dtype) {
    (void)dtype;
    if (p->numel < 4096) return 2 * bytes_of(VP_FP32, p->numel);
    return 2 * (p->numel + bytes_of(VP_FP32, (p->numel + 255) / 256));
}

/* torchao's low-bit Adam (torchao/optim/adam.py, _AdamBase._new_buffer):
 * exp_avg and exp_avg_sq are tensor subclasses (subclass_8bit.py,
 * subclass_4bit.py, subclass_fp8.py) holding codes, an fp32 scale per
 * block and, for the 8- and 4-bit ones, a 256- or 16-entry fp32 lookup
 * table of their own; a parameter (a DTensor's local shard) of fewer than
 * 4096 elements or not a whole number of blocks gets plain
 * torch.zeros_like(p) instead, in the dtype of the parameter it steps. */
typedef struct {
    uint64_t block;      /* elements per fp32 scale */
    unsigned code_bits;  /* 8: uint8 or float8_e4m3fn codes; 4: two codes per uint8 */
    uint64_t qmap_bytes; /* the state's own lookup table (fp32 entries); 0 for fp8 */
} torchao_format;

static uint64_t torchao_states(const vp_param_shape *p, vp_dtype dtype, torchao_format f) {
    if (p->numel < 4096 || p->numel % f.block) return 2 * bytes_of(dtype, p->numel);
    uint64_t codes = f.code_bits == 8 ? p->numel : p->numel / 2;
    return 2 * (codes + bytes_of(VP_FP32, p->numel / f.block) + f.qmap_bytes);
}

/* AdamW8bit: block_size 256, uint8 codes, 256-entry signed / unsigned maps */
static uint64_t torchao_8bit_states(const vp_param_shape *p, vp_dtype dtype) {
    return torchao_states(p, dtype, (torchao_format){256, 8, 256 * 4});
}

/* AdamW4bit: block_size 128, two 4-bit codes per byte (n_elems // 2),
 * 16-entry maps (create_dynamic_map(signed, 3, 4)) */
static uint64_t torchao_4bit_states(const vp_param_shape *p, vp_dtype dtype) {
    return torchao_states(p, dtype, (torchao_format){128, 4, 16 * 4});
}

/* AdamWFp8: block_size 256, float8_e4m3fn codes, no map */
static uint64_t torchao_fp8_states(const vp_param_shape *p, vp_dtype dtype) {
    return torchao_states(p, dtype, (torchao_format){256, 8, 0});
}

/* A matrix's columns (numel / rows); 0 for a vector (rows 0). */
static uint64_t matrix_cols(const vp_param_shape *p) { return p->rows ? p->numel / p->rows : 0; }

/* transformers' Adafactor (beta1=None, its default): a matrix keeps the
 * row and column means of the squared gradient (exp_avg_sq_row, _col), a
 * vector the full exp_avg_sq; fp32 either way, since the step turns a
 * 16-bit gradient into fp32 before it makes them. Any 2-D weight is
 * factored (len(shape) >= 2), a (1, n) one too: n + 1 values. state["RMS"]
 * is a 0-dim fp32 tensor (self._rms returns one). */
static uint64_t adafactor_states(const vp_param_shape *p, vp_dtype dtype) {
    (void)dtype;
    uint64_t rms = bytes_of(VP_FP32, 1);
    return bytes_of(VP_FP32, p->rows ? p->rows + matrix_cols(p) : p->numel) + rms;
}

/* Adafactor with beta1: exp_avg = torch.zeros_like(grad), of the gradient
 * the step has made fp32. The update is then rebound to it, so no
 * temporary is added. */
static uint64_t fp32_first_moment(const vp_param_shape *p, vp_dtype dtype) {
    (void)dtype;
    return bytes_of(VP_FP32, p->numel);
}

/* SM3 with momentum > 0: state['momentum_buffer'] = update.detach(), in
 * the gradient's dtype; the update becomes the new buffer, and the old one
 * stays in the loop's local m until the next tensor's step rebinds it
 * (moment_carried). */
static uint64_t own_first_moment(const vp_param_shape *p, vp_dtype dtype) { return bytes_of(dtype, p->numel); }

/* SM3 (torch-optimizer's, as in GPT-NeoX; momentum 0, its default): one
 * accumulator per dimension, (rows, 1) and (1, cols) for a matrix of any
 * shape (a (1, n) one keeps n + 1 values), in the gradient's dtype. */
static uint64_t sm3_states(const vp_param_shape *p, vp_dtype dtype) {
    return bytes_of(dtype, p->rows ? p->rows + matrix_cols(p) : p->numel);
}

/* Adafactor.step: update = grad**2 + eps is alive while _approx_sq_grad's
 * outer product is made, and that one while p_data_fp32.add_(-update) makes
 * -update: two fp32 tensors; a 16-bit gradient and parameter are copied to
 * fp32 first (grad.float(), p.float()): two more (upcast_temps); a factored
 * matrix's factors beside them (adafactor_factors). */
static unsigned two_temps(const vp_recipe *recipe, double weight_decay) {
    (void)recipe;
    (void)weight_decay;
    return 2;
}

/* _approx_sq_grad: the reciprocal square roots of the row statistics over
 * their mean (r_factor, rows) and of the column ones (c_factor, cols) are
 * alive while their outer product is made beside update. */
static uint64_t adafactor_factors(const vp_param_shape *p, vp_dtype dtype) {
    return bytes_of(dtype, p->rows + matrix_cols(p));
}

/* SM3.step: update = acc_0.clone(), then torch.min with the column
 * accumulator broadcasts it to the parameter's size; the rest is in place. */
static unsigned one_temp(const vp_recipe *recipe, double weight_decay) {
    (void)recipe;
    (void)weight_decay;
    return 1;
}

/* SM3.step: each accumulator takes update's max over the other dimension
 * (update.max(dim=d, keepdim=True).values), whose values and int64
 * indices are alive beside update: the larger of rows and columns. A
 * vector's accumulator is update itself. */
static uint64_t sm3_reductions(const vp_param_shape *p, vp_dtype dtype) {
    uint64_t cols = matrix_cols(p), longer = p->rows > cols ? p->rows : cols;
    return bytes_of(dtype, longer) + bytes_of(VP_INT64, longer);
}

/* In the order a recipe's `optimizer` key lists them. Fields left out are
 * none: no temporary of their dtype's own, nothing carried or beside. */
static const vp_optimizer_kind registry[] = {
    {.name = "adamw", .doc = "AdamW: exp_avg and exp_avg_sq per parameter, decoupled weight decay (default 0.01)",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = two_states, .temporaries = adamw_temps,
     .carried = 1},
    {.name = "adam", .doc = "Adam: exp_avg and exp_avg_sq per parameter (weight decay default 0)", .steps = true,
     .state_bytes = two_states, .temporaries = adam_temps, .carried = 1},
    {.name = "sgd", .doc = "plain SGD: no state", .steps = true, .state_bytes = no_state, .temporaries = sgd_temps},
    {.name = "sgd-momentum", .doc = "SGD with momentum: one momentum buffer per parameter", .steps = true,
     .state_bytes = one_state, .temporaries = sgd_temps},
    {.name = "adamw-hf",
     .doc = "transformers' own AdamW (Trainer's adamw_hf): a loop whose denom = exp_avg_sq.sqrt().add_(eps) is its one "
            "temporary",
     .steps = true, .state_bytes = two_states, .temporaries = one_temp, .per_tensor = true, .carried = 1},
    {.name = "adamw-8bit",
     .doc = "bitsandbytes AdamW8bit: uint8 states with an fp32 absmax per 256 elements (fp32 below 4096 elements), "
            "fused",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = adam_8bit_states, .temporaries = no_temps,
     .bitsandbytes = true},
    {.name = "paged-adamw-8bit",
     .doc = "bitsandbytes PagedAdamW8bit: the 8-bit states in CUDA unified memory, paged in per tensor at the step",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = adam_8bit_states, .temporaries = no_temps,
     .per_tensor = true, .paged = true, .bitsandbytes = true},
    {.name = "paged-adamw-32bit",
     .doc = "bitsandbytes PagedAdamW32bit: fp32 states in CUDA unified memory, paged in per tensor at the step",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = fp32_two_states, .temporaries = no_temps,
     .per_tensor = true, .paged = true, .bitsandbytes = true},
    /* The step is single_param_adam, torch.compile'd per parameter
     * (fullgraph): Inductor fuses the dequantize, the update and the
     * requantize, and no parameter-sized buffer is counted. Published check:
     * torchao's README (torchao/optim/README.md, Llama-2-7B in torchtune,
     * full bf16, A100) measures AdamW8bit's peak 0.2 GB below bitsandbytes'
     * AdamW8bit, whose fused kernel keeps none, with states of the same size
     * but the lookup tables. */
    {.name = "adamw-8bit-torchao",
     .doc = "torchao AdamW8bit (transformers' adamw_torch_8bit): uint8 states with an fp32 scale per 256 elements and "
            "a 1 KiB map each (like the parameter below 4096 elements), a compiled step",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = torchao_8bit_states, .temporaries = no_temps,
     .per_tensor = true},
    {.name = "adamw-4bit-torchao",
     .doc = "torchao AdamW4bit (transformers' adamw_torch_4bit): 4-bit states with an fp32 scale per 128 elements and "
            "a 64-byte map each (like the parameter below 4096 elements), a compiled step",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = torchao_4bit_states, .temporaries = no_temps,
     .per_tensor = true},
    {.name = "adamw-fp8-torchao",
     .doc = "torchao AdamWFp8: float8_e4m3fn states with an fp32 scale per 256 elements (like the parameter below "
            "4096 elements), a compiled step",
     .default_weight_decay = 0.01, .steps = true, .state_bytes = torchao_fp8_states, .temporaries = no_temps,
     .per_tensor = true},
    {.name = "lion", .doc = "bitsandbytes Lion (32-bit): one fp32 momentum per parameter, fused", .steps = true,
     .state_bytes = fp32_one_state, .temporaries = no_temps, .bitsandbytes = true},
    {.name = "adafactor",
     .doc = "transformers Adafactor: factored fp32 second moments (and with first_moment an fp32 exp_avg, its beta1), "
            "a loop over parameters",
     .steps = true, .state_bytes = adafactor_states, .temporaries = two_temps, .temp_dtype = VP_FP32,
     .per_tensor = true, .carried_early = 1, .upcast_temps = 2, .beside_temps = adafactor_factors,
     .first_moment = fp32_first_moment},
    {.name = "sm3",
     .doc = "SM3 (torch-optimizer): one accumulator per dimension (and with first_moment a momentum buffer), a loop "
            "over parameters",
     .steps = true, .state_bytes = sm3_states, .temporaries = one_temp, .per_tensor = true,
     .beside_temps = sm3_reductions, .first_moment = own_first_moment, .moment_carried = 1},
    {.name = "none", .doc = "no optimizer step: forward and backward only", .state_bytes = no_state,
     .temporaries = no_temps},
};

unsigned vp_optimizer_count(void) { return sizeof registry / sizeof registry[0]; }

const vp_optimizer_kind *vp_optimizer_at(unsigned index) {
    return index < vp_optimizer_count() ? &registry[index] : NULL;
}

int vp_optimizer_find(const char *name) {
    for (unsigned i = 0; i < vp_optimizer_count(); i++)
        if (strcmp(registry[i].name, name) == 0) return (int)i;
    return -1;
}

uint64_t vp_optimizer_state_bytes(const vp_optimizer_kind *kind, const vp_recipe *recipe, const vp_param_shape *p,
                                  vp_dtype dtype) {
    uint64_t bytes = kind->state_bytes(p, dtype);
    if (vp_optimizer_first_moment(kind, recipe)) bytes += kind->first_moment(p, dtype);
    return bytes;
}

const char *vp_optimizer_problem(const vp_recipe *recipe) {
    const vp_optimizer_kind *kind = vp_optimizer_at(recipe->optimizer);
    if (recipe->first_moment && (!kind || !kind->first_moment))
        return "first_moment: only adafactor (beta1) and sm3 (momentum) keep a first moment on request";
    return NULL;
}

double vp_optimizer_weight_decay(const vp_optimizer_kind *kind, const vp_recipe *recipe) {
    return recipe->weight_decay >= 0.0 ? recipe->weight_decay : kind->default_weight_decay;
}
