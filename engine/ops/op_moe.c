/* op_moe.c — a mixture of experts in place of the MLP: a router picks
 * top_k of `experts` gated MLPs for every token, optionally beside shared
 * experts (DeepSeekMoE's and Qwen-MoE's). This file holds the op: its
 * fields, its leaves and how they split over expert-parallel ranks, and the
 * pieces every implementation shares; moe_hf.c runs the plain-PyTorch
 * blocks, moe_megatron.c Megatron-Core's MoELayer. */
#include "moe.h"

#include "finetune_method.h"
#include "framework.h"
#include "optimizer.h"

static const char *const block_names[] = {"mixtral",        "deepseek", "deepseek_v3", "deepseek_v2",
                                          "deepseek_v2_hf", "gpt_oss",  NULL};
static const char *const expert_name_sets[] = {"w", "proj", NULL};

static const vp_field moe_fields[MOE_FIELDS] = {
    [MOE_HIDDEN] = {"hidden", VP_FIELD_INT, true, 0, 1, 1 << 20, NULL, "model width"},
    [MOE_INTERMEDIATE] = {"intermediate", VP_FIELD_INT, true, 0, 1, 1 << 22, NULL, "each expert's inner width"},
    [MOE_EXPERTS] = {"experts", VP_FIELD_INT, true, 0, 1, 1 << 14, NULL, "routed experts"},
    [MOE_TOP_K] = {"top_k", VP_FIELD_INT, true, 0, 1, 1 << 10, NULL, "experts per token"},
    [MOE_SHARED] = {"shared_intermediate", VP_FIELD_INT, false, 0, 0, 1 << 22, NULL,
                    "inner width of the always-on shared experts (0: none)"},
    [MOE_SHARED_GATE] = {"shared_gate", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                         "a sigmoid gate on the shared experts' output (Qwen2-MoE)"},
    [MOE_NORM_TOPK] = {"norm_topk", VP_FIELD_BOOL, false, 1, 0, 1, NULL,
                       "renormalize the top-k routing weights (Mixtral; DeepSeekMoE and Qwen-MoE do not)"},
    [MOE_CAPACITY] = {"capacity_factor", VP_FIELD_NUMBER, false, 0, 0, 64, NULL,
                      "Megatron: tokens an expert takes, as a multiple of its even share (0: dropless)"},
    [MOE_BLOCK] = {"block", VP_FIELD_ENUM, false, MOE_BLOCK_MIXTRAL, 0, 1, block_names,
                   "plain PyTorch: HF's token loop (mixtral, qwen2_moe), DeepSeekMoE's training path (deepseek), "
                   "DeepSeek-V3's (deepseek_v3) or DeepSeek-V2's own modeling code (deepseek_v2: DeepSeekMoE's path "
                   "behind an fp32 gate, routed_scaling_factor unless norm_topk) or transformers' DeepseekV2MoE "
                   "(deepseek_v2_hf: the same gate, always scaled, no auxiliary loss; the assignments sorted by "
                   "expert, transformers 4.56-4.57) or transformers' GptOssMLP (gpt_oss: a router with a bias "
                   "whose top-k logits are softmaxed, 3-D experts with biases in every release, the gate and up "
                   "columns interleaved, clamped, gate * sigmoid(1.702 gate) * (up + 1))"},
    [MOE_AUX_LOSS] = {"aux_loss", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                      "DeepSeekMoE's sequence-wise auxiliary loss (aux_loss_alpha > 0)"},
    [MOE_GROUPS] = {"groups", VP_FIELD_INT, false, 1, 1, 1 << 14, NULL,
                    "deepseek_v3: n_group, the expert groups the choice is limited by"},
    [MOE_TOPK_GROUPS] = {"topk_groups", VP_FIELD_INT, false, 1, 1, 1 << 14, NULL,
                         "deepseek_v3: topk_group, the groups a token's experts come from"},
    [MOE_EXPERT_NAMES] = {"expert_names", VP_FIELD_ENUM, false, MOE_NAMES_W, 0, 0, expert_name_sets,
                          "the experts' projections for LoRA targets: w (w1, w3, w2: Mixtral) or proj (gate_proj, "
                          "up_proj, down_proj: Qwen-MoE, DeepSeek)"},
    [MOE_ROUTER_LOGITS] = {"output_router_logits", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "mixtral block: the router logits go to the model's outputs for the load-balancing "
                           "loss (router_aux_loss), kept as long as the outputs are"},
    [MOE_GROUP_LIMITED] = {"group_limited", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                           "deepseek_v2: topk_method group_limited_greedy (the best expert of each of groups "
                           "picks topk_groups of them, the rest masked); false: greedy"},
    [MOE_LIGER] = {"liger", VP_FIELD_BOOL, false, 0, 0, 1, NULL,
                   "Liger-Kernel's patch for the model type swaps the experts' MLPs (Mixtral's "
                   "LigerBlockSparseTop2MLP, Qwen3-MoE's LigerQwen3MoeSwiGLUMLP; transformers 5's LigerExperts), "
                   "which recipe key liger_swiglu turns on"},
};

static const char *moe_check(const vp_op *op) {
    uint64_t e = vp_op_u64(op, MOE_EXPERTS), g = vp_op_u64(op, MOE_GROUPS);
    if (vp_op_u64(op, MOE_TOP_K) > e) return "top_k cannot exceed experts";
    if (vp_op_flag(op, MOE_ROUTER_LOGITS) && vp_op_u64(op, MOE_BLOCK) != MOE_BLOCK_MIXTRAL)
        return "output_router_logits is transformers' sparse blocks' (block = \"mixtral\")";
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V3) {
        if (e % g || e / g < 2) return "groups must divide experts into groups of two or more";
        if (vp_op_u64(op, MOE_TOPK_GROUPS) > g) return "topk_groups cannot exceed groups";
    }
    if (vp_op_flag(op, MOE_GROUP_LIMITED)) {
        if (vp_op_u64(op, MOE_BLOCK) != MOE_BLOCK_DEEPSEEK_V2 && vp_op_u64(op, MOE_BLOCK) != MOE_BLOCK_DEEPSEEK_V2_HF)
            return "group_limited is DeepSeek-V2's gate (block = \"deepseek_v2\" or \"deepseek_v2_hf\")";
        if (e % g) return "groups must divide experts";
        if (vp_op_u64(op, MOE_TOPK_GROUPS) > g) return "topk_groups cannot exceed groups";
    }
    if (vp_moe_gpt_oss(op) && (vp_op_u64(op, MOE_SHARED) || vp_op_flag(op, MOE_AUX_LOSS) ||
                               vp_op_flag(op, MOE_ROUTER_LOGITS) || vp_op_u64(op, MOE_GROUPS) > 1))
        return "block = \"gpt_oss\" is GPT-OSS's: no shared experts, aux_loss, output_router_logits or groups";
    /* AddAuxiliaryLoss.apply(y, aux_loss) runs whatever alpha is: with no
     * loss (alpha = 0) its loss.numel() fails */
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V2 && !vp_op_flag(op, MOE_AUX_LOSS))
        return "DeepSeek-V2's modeling code trains only with its auxiliary loss (aux_loss_alpha > 0)";
    return NULL;
}

static const char *moe_check_tp(const vp_op *op, unsigned tp) {
    (void)tp;
    if (vp_op_u64(op, MOE_SHARED) % tp) return "tp: must divide the shared experts' intermediate width";
    return NULL;
}

enum {
    ROUTER,
    W1,
    W3,
    W2,
    SHARED_UP,
    SHARED_GATE_PROJ,
    SHARED_DOWN,
    SHARED_GATE,
    SCORE_BIAS,
    ROUTER_BIAS,
    W1_BIAS,
    W2_BIAS,
    MOE_SPECS
};

/* `local` identical experts' copies of a weight, split over expert-parallel ranks. */
static vp_leaf_spec experts_of(vp_leaf_spec spec, unsigned local) {
    spec.count = local;
    spec.expert = true;
    return spec;
}

/* transformers 5's experts (MixtralExperts, Qwen3MoeExperts): gate_up_proj
 * [experts, 2 x intermediate, hidden] and down_proj [experts, hidden,
 * intermediate], bare parameters of one module (no nn.Linear: LoRA's
 * targets and bitsandbytes do not take them); dim 0 the experts, which
 * FSDP2 shards. The w3 slot stays empty. */
static void fused_experts(vp_leaf_spec *out, unsigned local, uint64_t f, uint64_t h) {
    out[W1] = experts_of(vp_param(local * 2 * f * h, "moe.experts.gate_up_proj", VP_MODULE_NONE, 0), 1);
    out[W3] = experts_of(vp_param(0, "moe.experts.w3", VP_MODULE_NONE, 0), 1);
    out[W2] = experts_of(vp_param(local * h * f, "moe.experts.down_proj", VP_MODULE_NONE, 0), 1);
    out[W1].rows = out[W2].rows = local;
    /* PEFT's target_parameters can adapt them (lora.ParamWrapper): each
     * expert maps hidden to 2 x intermediate, then intermediate to hidden,
     * whichever way round the parameter is stored (GPT-OSS's is_transposed) */
    out[W1].param_target = VP_PARAM_GATE_UP;
    out[W1].param_in = h;
    out[W1].param_out = 2 * f;
    out[W2].param_target = VP_PARAM_DOWN;
    out[W2].param_in = f;
    out[W2].param_out = h;
}

/* Experts are split over expert-parallel ranks, each one's width over
 * expert-tensor-parallel ranks; shared experts split like a dense MLP. */
static unsigned moe_leaves(const vp_op *op, const vp_ranks *split, vp_leaf_spec *out) {
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), e = vp_op_u64(op, MOE_EXPERTS);
    uint64_t f = vp_op_u64(op, MOE_INTERMEDIATE) / split->etp;
    uint64_t fs = vp_op_u64(op, MOE_SHARED) / split->tp;
    unsigned local = (unsigned)(e / split->ep);
    /* HF's routers are nn.Linear (LoRA's all-linear and bitsandbytes take
     * them); DeepSeek's MoEGate and transformers 5's TopKRouter hold a bare
     * weight for F.linear */
    bool gpt_oss = vp_moe_gpt_oss(op);
    bool linear_router = vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_MIXTRAL && !split->fused_experts;
    out[ROUTER] = vp_param(e * h, "moe.gate.weight", VP_MODULE_GATE, linear_router ? e : 0);
    out[ROUTER].rows = e; /* an (experts, hidden) matrix either way: factored optimizers factor it */
    bool proj = vp_op_u64(op, MOE_EXPERT_NAMES) == MOE_NAMES_PROJ;
    if (split->fused_experts || gpt_oss) {
        fused_experts(out, local, f, h);
    } else {
        out[W1] = experts_of(vp_param(f * h, "moe.experts.w1", proj ? VP_MODULE_GATE_PROJ : VP_MODULE_W1, f), local);
        out[W3] = experts_of(vp_param(f * h, "moe.experts.w3", proj ? VP_MODULE_UP_PROJ : VP_MODULE_W3, f), local);
        out[W2] = experts_of(vp_param(h * f, "moe.experts.w2", proj ? VP_MODULE_DOWN_PROJ : VP_MODULE_W2, h), local);
    }
    out[SHARED_UP] = vp_param(fs * h, "moe.shared_expert.up_proj", VP_MODULE_UP_PROJ, fs);
    out[SHARED_GATE_PROJ] = vp_param(fs * h, "moe.shared_expert.gate_proj", VP_MODULE_GATE_PROJ, fs);
    out[SHARED_DOWN] = vp_param(h * fs, "moe.shared_expert.down_proj", VP_MODULE_DOWN_PROJ, h);
    out[SHARED_GATE] = vp_param(vp_op_flag(op, MOE_SHARED_GATE) ? h : 0, "moe.shared_expert_gate",
                                VP_MODULE_SHARED_EXPERT_GATE, 1); /* nn.Linear(hidden, 1) */
    /* DeepseekV3TopkRouter's e_score_correction_bias, a buffer */
    bool v3 = vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V3;
    out[SCORE_BIAS] = (vp_leaf_spec){.numel = v3 ? e : 0, .dtype = VP_FP32, .buffer = true,
                                     .label = "moe.gate.e_score_correction_bias", .count = 1};
    /* GptOssTopKRouter.bias [experts]; GptOssExperts' gate_up_proj_bias
     * [experts, 2 x intermediate] and down_proj_bias [experts, hidden] */
    out[ROUTER_BIAS] = vp_param(gpt_oss ? e : 0, "moe.router.bias", VP_MODULE_NONE, 0);
    out[W1_BIAS] = experts_of(vp_param(gpt_oss ? local * 2 * f : 0, "moe.experts.gate_up_proj_bias", VP_MODULE_NONE, 0), 1);
    out[W2_BIAS] = experts_of(vp_param(gpt_oss ? local * h : 0, "moe.experts.down_proj_bias", VP_MODULE_NONE, 0), 1);
    out[W1_BIAS].rows = out[W2_BIAS].rows = gpt_oss ? local : 0;
    return MOE_SPECS;
}

/* Slots of each spec within the op, given the rank's expert count. */
static moe_slots slots_of(const vp_t *leaves, unsigned local) { /* local: 1 for fused experts */
    moe_slots s;
    s.router = leaves;
    s.w1 = leaves + 1;
    s.w3 = s.w1 + local;
    s.w2 = s.w3 + local;
    s.shared = s.w2 + local; /* up, gate, down, gate weight */
    s.score_bias = s.shared + 4;
    s.router_bias = s.score_bias + 1;
    s.w1_bias = s.router_bias + 1;
    s.w2_bias = s.w1_bias + 1;
    s.wrapped = NULL;
    return s;
}

/* softmax(logits, dim=-1, dtype=torch.float32): fp32, and ATen converts a
 * 16-bit input first (SoftMax.cpp; fp16 on CUDA has its own kernel). */
vp_t vp_moe_softmax_fp32(vp_step *step, vp_t logits, const char *label) {
    vp_sim *sim = &step->sim;
    vp_dtype dt = (vp_dtype)vp_at(sim, logits)->dtype;
    if (dt == VP_FP32 || (dt == VP_FP16 && step->recipe->device == VP_DEVICE_CUDA))
        return vp_unary(sim, logits, VP_SAVES_OUTPUT, 0, VP_FP32, label);
    vp_t up = vp_to(sim, logits, VP_FP32, label);
    vp_t p = vp_unary(sim, up, VP_SAVES_OUTPUT, 0, VP_FP32, label);
    vp_drop(sim, up);
    return p;
}

vp_t vp_moe_renormalize(vp_sim *sim, vp_t weights, uint64_t n) {
    vp_t sum = vp_sum(sim, weights, n, "moe.topk_sum");
    vp_t normed = vp_mul(sim, weights, sum, vp_at(sim, weights)->numel, "moe.topk_norm");
    vp_drop(sim, sum);
    vp_drop(sim, weights);
    return normed;
}

void vp_moe_where(vp_sim *sim, uint64_t tokens, vp_t *first, vp_t *second) {
    vp_t hits = vp_new(sim, vp_numel(sim, tokens, 2), VP_INT64, "moe.where");
    vp_t a = vp_view(sim, hits, tokens, "moe.where.first"), b = vp_view(sim, hits, tokens, "moe.where.second");
    /* nonzero(...).unbind(1): nonzero writes its [tokens, 2] result
     * transposed ([2, tokens].t()), so each column is contiguous, the
     * second `tokens` elements in */
    vp_at(sim, b)->offset = tokens;
    vp_drop(sim, hits);
    vp_moe_rebind(sim, first, a);
    vp_moe_rebind(sim, second, b);
}

/* The tokens expert e gets out of n assignments (an even routing; the sum
 * over experts is exact whatever the routing, the share of one is not). */
uint64_t vp_moe_share(uint64_t n, unsigned experts, unsigned e) { return n / experts + (e < n % experts); }

/* HF's expert MLP: w2(act_fn(w1(x)) * w3(x)) */
vp_t vp_moe_expert(vp_step *step, const vp_op *op, vp_t x, vp_t w1, vp_t w3, vp_t w2, uint64_t f, uint64_t h) {
    vp_sim *sim = &step->sim;
    if (step->recipe->liger_swiglu && vp_op_flag(op, MOE_LIGER)) {
        vp_t gate = vp_project(step, x, w1, 0, f, "moe.expert.w1");
        vp_t up = vp_project(step, x, w3, 0, f, "moe.expert.w3");
        vp_t m = vp_liger_swiglu(sim, gate, up, "moe.expert.liger_swiglu");
        vp_drop(sim, gate);
        vp_drop(sim, up);
        vp_t o = vp_project(step, m, w2, 0, h, "moe.expert.w2");
        vp_drop(sim, m);
        return o;
    }
    vp_t g = vp_project(step, x, w1, 0, f, "moe.expert.w1");
    vp_t a = vp_unary(sim, g, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, g)->dtype, "moe.expert.silu");
    vp_drop(sim, g);
    vp_t u = vp_project(step, x, w3, 0, f, "moe.expert.w3");
    vp_t m = vp_mul(sim, a, u, vp_at(sim, u)->numel, "moe.expert.mul");
    vp_drop(sim, a);
    vp_drop(sim, u);
    vp_t o = vp_project(step, m, w2, 0, h, "moe.expert.w2");
    vp_drop(sim, m);
    return o;
}

vp_t vp_moe_shared_mlp(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x) {
    vp_sim *sim = &step->sim;
    uint64_t h = vp_op_u64(op, MOE_HIDDEN), fs = vp_split_tp(step, vp_op_u64(op, MOE_SHARED));
    vp_t g = vp_project_column(step, x, shared[1], 0, fs, "moe.shared.gate_proj");
    vp_t a = vp_unary(sim, g, VP_SAVES_INPUT, 0, (vp_dtype)vp_at(sim, g)->dtype, "moe.shared.silu");
    vp_drop(sim, g);
    vp_t u = vp_project_column(step, x, shared[0], 0, fs, "moe.shared.up_proj");
    vp_t m = vp_mul(sim, a, u, vp_at(sim, u)->numel, "moe.shared.mul");
    vp_drop(sim, a);
    vp_drop(sim, u);
    vp_t o = vp_project_row(step, m, shared[2], 0, h, "moe.shared.down_proj");
    vp_drop(sim, m);
    return o;
}

vp_t vp_moe_shared_gated(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x, vp_t o) {
    if (!vp_op_flag(op, MOE_SHARED_GATE)) return o;
    vp_sim *sim = &step->sim;
    vp_t logit = vp_project(step, x, shared[3], 0, 1, "moe.shared_expert_gate");
    vp_t gate = vp_unary(sim, logit, VP_SAVES_OUTPUT, 0, (vp_dtype)vp_at(sim, logit)->dtype, "moe.shared.sigmoid");
    vp_drop(sim, logit);
    vp_t scaled = vp_mul(sim, gate, o, vp_at(sim, o)->numel, "moe.shared.gate_mul");
    vp_drop(sim, gate);
    vp_drop(sim, o);
    return scaled;
}

vp_t vp_moe_plus_shared(vp_step *step, const vp_op *op, const vp_t *shared, vp_t x, vp_t routed) {
    if (!vp_op_u64(op, MOE_SHARED)) return routed;
    vp_sim *sim = &step->sim;
    vp_t y = vp_moe_shared_gated(step, op, shared, x, vp_moe_shared_mlp(step, op, shared, x));
    vp_t sum = vp_add(sim, routed, y, vp_at(sim, routed)->numel, "moe.add_shared");
    vp_drop(sim, y);
    vp_drop(sim, routed);
    return sum;
}

/* The experts held as 3-D parameters: transformers 5's under
 * experts_implementation eager or grouped_mm, GPT-OSS's always. */
static bool holds_3d_experts(const vp_op *op, const vp_recipe *recipe) {
    return vp_recipe_fused_experts(recipe) || vp_moe_gpt_oss(op);
}

static vp_t moe_forward(vp_step *step, const vp_op *op, const vp_t *leaves, vp_t x) {
    unsigned local = (unsigned)(vp_op_u64(op, MOE_EXPERTS) / step->ep);
    bool fused = holds_3d_experts(op, step->recipe);
    moe_slots s = slots_of(leaves, fused ? 1 : local);
    if (fused) return vp_moe_fused(step, op, &s, x);
    if (vp_framework_of(step->recipe)->token_dispatcher) return vp_moe_megatron(step, op, &s, x);
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK) return vp_moe_deepseek(step, op, &s, x);
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V3) return vp_moe_deepseek_v3(step, op, &s, x);
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V2) return vp_moe_deepseek_v2(step, op, &s, x);
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V2_HF) return vp_moe_deepseek_v2_hf(step, op, &s, x);
    return vp_moe_mixtral(step, op, &s, x);
}

/* GPT-OSS's experts are 3-D parameters in every transformers release
 * (4.55 on): there is no module form to fall back to. */
static const char *gpt_oss_problem(const vp_recipe *recipe) {
    if (vp_framework_of(recipe)->token_dispatcher || vp_recipe_model_code(recipe) != VP_CODE_TRANSFORMERS)
        return "framework: GPT-OSS is modelled as transformers runs it (its GptOssMLP; model_code transformers)";
    if (recipe->experts_impl == VP_EXPERTS_MODULES)
        return "experts_implementation: GPT-OSS holds its experts as 3-D parameters in every transformers release "
               "(no modules form): use auto, eager or grouped_mm";
    if (vp_finetune_method_of(recipe)->quantizes_base)
        return "finetune: a quantized base of GPT-OSS (bitsandbytes leaves its 3-D experts unquantized; the hub's "
               "MXFP4 experts dequantize for training) is not modelled: use lora on the 16-bit model";
    if (vp_optimizer_at(recipe->optimizer)->beside_temps)
        return "optimizer: the factored states of GPT-OSS's 3-D experts are not modelled; use an optimizer with "
               "elementwise states";
    return NULL;
}

/* What transformers 5's experts are modelled for: its Mixtral, Qwen3-MoE,
 * Qwen2-MoE (with its gated shared expert), DeepSeek-V2 and DeepSeek-V3
 * blocks, in
 * transformers' code, with optimizers that keep whole-tensor or
 * elementwise states. */
static const char *fused_experts_problem(const vp_op *op, const vp_recipe *recipe) {
    if (vp_moe_gpt_oss(op)) return gpt_oss_problem(recipe);
    if (vp_framework_of(recipe)->token_dispatcher)
        return "experts_implementation: framework megatron runs Megatron-Core's MoE layer; leave it auto";
    if (vp_recipe_model_code(recipe) != VP_CODE_TRANSFORMERS)
        return "experts_implementation: eager and grouped_mm are transformers 5's experts (model_code transformers)";
    uint64_t block = vp_op_u64(op, MOE_BLOCK);
    bool deepseek = block == MOE_BLOCK_DEEPSEEK_V3 || block == MOE_BLOCK_DEEPSEEK_V2_HF;
    bool sparse = block == MOE_BLOCK_MIXTRAL && (!vp_op_u64(op, MOE_SHARED) || vp_op_flag(op, MOE_SHARED_GATE));
    if (!deepseek && !sparse)
        return "experts_implementation: transformers 5's experts are modelled for the Mixtral, Qwen3-MoE, "
               "Qwen2-MoE (block mixtral, any shared expert gated), DeepSeek-V2 (block deepseek_v2_hf: "
               "transformers' own class) and DeepSeek-V3 (block deepseek_v3) blocks only; use modules";
    /* DeepseekV2Moe's router is an nn.Linear that forward never calls
     * (F.linear of its weight): PEFT would adapt it, and the adapter would
     * hold weights that get no gradient and no optimizer state */
    if (block == MOE_BLOCK_DEEPSEEK_V2_HF && vp_finetune_method_of(recipe)->adapts_linear &&
        vp_module_in(vp_lora_targets(recipe), VP_MODULE_GATE))
        return "lora_targets: under experts_implementation eager or grouped_mm, transformers 5's DeepSeek-V2 router "
               "is an nn.Linear its block never calls (F.linear on its weight), so LoRA's adapter there (all-linear's, "
               "or gate's) would never train: not modelled; name the targets without gate";
    if (vp_finetune_method_of(recipe)->quantizes_base)
        return "experts_implementation: a quantized base with transformers 5's 3-D experts is not modelled (whether "
               "bitsandbytes quantizes them depends on its version); use modules";
    /* Adafactor's and SM3's states follow a matrix's rows and columns
     * (their beside_temps); a 3-D parameter's factors are not modelled */
    if (vp_optimizer_at(recipe->optimizer)->beside_temps)
        return "experts_implementation: the factored states of transformers 5's 3-D experts are not modelled; use "
               "modules, or an optimizer with elementwise states";
    return NULL;
}

/* experts_implementation = auto: transformers 5 runs the experts of its
 * classes by grouped_mm when none is asked for
 * (PreTrainedModel.get_correct_experts_implementation); under it
 * (transformers_major, from the stacks) auto is grouped_mm where the
 * model's block is modelled for the recipe (fused_experts_problem), and
 * stays 4.x's modules otherwise: remote code (DeepSeekMoE's, DeepSeek-V2's
 * own), Megatron-Core, torchtitan, and what 5.x's experts are not modelled
 * under (a quantized base, factored optimizer states). */
static void moe_resolve_recipe(const vp_model *model, vp_recipe *recipe) {
    if (recipe->experts_impl != VP_EXPERTS_AUTO) return;
    const vp_op *op = vp_section_find(&model->section[VP_SECTION_LAYER], &vp_op_moe);
    /* GPT-OSS under 4.55-4.57: the experts' own training loop (eager) */
    if (op && vp_moe_gpt_oss(op) && recipe->transformers_major != 5) recipe->experts_impl = VP_EXPERTS_EAGER;
    if (recipe->transformers_major != 5) return;
    /* (fused_experts_problem reads experts_implementation only to refuse
     * modules for GPT-OSS, which auto is not) */
    if (op && !fused_experts_problem(op, recipe)) recipe->experts_impl = VP_EXPERTS_GROUPED_MM;
}

/* DeepseekMoE.forward in training: y = torch.empty_like(hidden_states),
 * then y[flat_topk_idx == i] = expert(...) for each expert. Under autocast
 * the residual stream is fp32 and the experts' outputs 16-bit, and
 * index_put_ refuses the mix ("Index put requires the source and
 * destination dtypes match"): such a run never trains. */
static const char *moe_recipe_problem(const vp_model *model, const vp_recipe *recipe) {
    if (recipe->tp > 1 && vp_framework_of(recipe)->dtensor_tp)
        return "tp: mixtures are modelled with Megatron-LM's tensor parallelism, not DTensor's (framework = fsdp2)";
    const vp_op *op = vp_section_find(&model->section[VP_SECTION_LAYER], &vp_op_moe);
    /* LigerExperts.forward reads the 3-D weights itself: PEFT's
     * ParamWrappers (target_parameters) around the experts never run */
    if (op && recipe->liger_swiglu && vp_op_flag(op, MOE_LIGER) && holds_3d_experts(op, recipe) &&
        vp_finetune_method_of(recipe)->peft && recipe->n_lora_params)
        return "liger_swiglu: Liger's LigerExperts reads the experts' 3-D weights itself, so PEFT's "
               "target_parameters there would never train: not modelled";
    if (op && holds_3d_experts(op, recipe)) return fused_experts_problem(op, recipe);
    if (!op || vp_framework_of(recipe)->token_dispatcher) return NULL;
    const vp_precision *precision = vp_precision_get(recipe->precision);
    /* DeepseekV2MoE in training (modeling_deepseek.py): the fp32 gate's
     * weights times 16-bit expert rows promote y to fp32, which the
     * residual add spreads to the stream, and the next layer's 16-bit
     * linear refuses it ("expected mat1 and mat2 to have the same dtype",
     * deepseek-ai/DeepSeek-Coder-V2 issue 6, OpenRLHF issue 306); under
     * autocast y[mask] = 16-bit output into fp32 rows fails as
     * DeepseekMoE's does (hiyouga/LlamaFactory issue 3886) */
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V2 && (precision->autocast || precision->params != VP_FP32))
        return "precision: DeepSeek-V2's own modeling code trains only in fp32 (its fp32 gate promotes the experts' "
               "16-bit sum to fp32, which the next 16-bit layer refuses; under autocast y[mask] = 16-bit output into "
               "fp32 rows fails): use fp32, or transformers' own DeepseekV2ForCausalLM, which trains in 16-bit "
               "(models deepseek-v2-hf and deepseek-v2-lite-hf; a config.json without auto_map)";
    /* over 16-bit weights too (bf16-autocast): the fp32 softmax weights
     * make the first MoE layer's output fp32, the residual add the stream,
     * and the next MoE layer's rows fp32 (seen in the harness) */
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK && precision->autocast)
        return "precision: DeepseekMoE writes the experts' 16-bit outputs into fp32 rows by index under autocast "
               "(its fp32 routing weights make the stream fp32 after the first MoE layer over 16-bit weights), "
               "which PyTorch refuses: use bf16, fp16 or a mixed-* precision";
    /* DeepseekV3MoE sums into rows of the router weights' dtype (16-bit under
     * autocast); bitsandbytes' layers return their fp32 input's dtype, so
     * index_add_ meets an fp32 source and fails */
    if (vp_op_u64(op, MOE_BLOCK) == MOE_BLOCK_DEEPSEEK_V3 && vp_finetune_method_of(recipe)->quantizes_base &&
        precision->autocast && precision->params == VP_FP32)
        return "precision: DeepseekV3MoE adds the quantized experts' fp32 outputs into the router's 16-bit rows by "
               "index, which PyTorch refuses under autocast: use bf16 or fp16";
    return NULL;
}

static const char *moe_check_ep(const vp_op *op, const vp_ranks *split) {
    if (vp_op_u64(op, MOE_EXPERTS) % split->ep) return "ep: must divide the experts";
    if (vp_op_u64(op, MOE_INTERMEDIATE) % split->etp) return "etp: must divide each expert's intermediate width";
    return NULL;
}

static void moe_facts(const vp_op *op, vp_section_id section, vp_model_facts *facts) {
    (void)section;
    facts->experts = true;
    if (vp_moe_gpt_oss(op)) facts->mxfp4_experts = true;
}

const vp_op_kind vp_op_moe = {
    .name = "moe",
    .doc = "a mixture of gated-MLP experts with a top-k router, optionally with shared experts",
    .fields = moe_fields,
    .n_fields = MOE_FIELDS,
    .cost = VP_COST_MOE,
    .check = moe_check,
    .check_tp = moe_check_tp,
    .check_ep = moe_check_ep,
    .facts = moe_facts,
    .recipe_problem = moe_recipe_problem,
    .resolve_recipe = moe_resolve_recipe,
    .leaves = moe_leaves,
    .forward = moe_forward,
};
