/* test_step.c — whole steps of a LLaMA-like model built in C: parameter
 * counts, model-state bytes, folded against unfolded evaluation, overflow,
 * and the foreach optimizer's temporaries. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops.h"
#include "optimizer.h"

/* ---- building a model the way the Lua binding does ---- */

static vp_op make_op(const vp_op_kind *kind) {
    vp_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    for (unsigned i = 0; i < kind->n_fields; i++) op.value[i] = kind->fields[i].fallback;
    return op;
}

static void set(vp_op *op, const char *field, double value) {
    int i = vp_field_index(op->kind, field);
    CHECK(i >= 0);
    if (i >= 0) op->value[i] = value;
}

static void set_enum(vp_op *op, const char *field, const char *option) {
    int i = vp_field_index(op->kind, field);
    CHECK(i >= 0 && op->kind->fields[i].options);
    if (i < 0) return;
    for (unsigned k = 0; op->kind->fields[i].options[k]; k++)
        if (strcmp(op->kind->fields[i].options[k], option) == 0) {
            op->value[i] = k;
            return;
        }
    CHECK(!"unknown enum option");
}

static vp_op *op_list(unsigned n) {
    vp_op *ops = calloc(n, sizeof *ops);
    if (!ops) abort();
    return ops;
}

typedef struct {
    unsigned hidden, layers, heads, kv_heads, intermediate, vocab;
    double attn_dropout;
    unsigned experts, top_k, shared; /* experts > 0: a mixture in place of the MLP */
    unsigned dense_layers;           /* with experts: leading layers that keep the MLP */
} llama_config;

static vp_op rmsnorm(unsigned hidden) {
    vp_op op = make_op(&vp_op_rmsnorm);
    set(&op, "hidden", hidden);
    return op;
}

/* One LLaMA layer: attention and a SwiGLU MLP, or experts in its place. */
static vp_op *llama_layer(const llama_config *c, bool experts) {
    unsigned head_dim = c->hidden / c->heads;
    vp_op *layer = op_list(2);
    vp_op *attn_branch = op_list(2), *mlp_branch = op_list(2);
    attn_branch[0] = rmsnorm(c->hidden);
    attn_branch[1] = make_op(&vp_op_attention);
    set(&attn_branch[1], "hidden", c->hidden);
    set(&attn_branch[1], "heads", c->heads);
    set(&attn_branch[1], "kv_heads", c->kv_heads);
    set(&attn_branch[1], "head_dim", head_dim);
    set(&attn_branch[1], "rotary", 1);
    set(&attn_branch[1], "dropout", c->attn_dropout);
    set_enum(&attn_branch[1], "mask", "additive");
    set(&attn_branch[1], "upcast_softmax", 1);
    CHECK(attn_branch[1].kind->check(&attn_branch[1]) == NULL);
    mlp_branch[0] = rmsnorm(c->hidden);
    if (experts) {
        mlp_branch[1] = make_op(&vp_op_moe);
        set(&mlp_branch[1], "hidden", c->hidden);
        set(&mlp_branch[1], "intermediate", c->intermediate);
        set(&mlp_branch[1], "experts", c->experts);
        set(&mlp_branch[1], "top_k", c->top_k);
        set(&mlp_branch[1], "shared_intermediate", c->shared);
        set(&mlp_branch[1], "shared_gate", c->shared > 0);
    } else {
        mlp_branch[1] = make_op(&vp_op_mlp);
        set(&mlp_branch[1], "hidden", c->hidden);
        set(&mlp_branch[1], "intermediate", c->intermediate);
        set_enum(&mlp_branch[1], "activation", "silu");
        set(&mlp_branch[1], "gated", 1);
    }
    layer[0] = make_op(&vp_op_residual);
    layer[0].children = attn_branch;
    layer[0].n_children = 2;
    layer[1] = make_op(&vp_op_residual);
    layer[1].children = mlp_branch;
    layer[1].n_children = 2;
    return layer;
}

/* models/arch/llama.lua, transcribed: pre-norm RMSNorm, rotary attention
 * with an additive mask and fp32 softmax, SwiGLU MLP (experts after the
 * first `dense_layers` when the config has them), untied head. */
static void build_llama(vp_model *m, const llama_config *c) {
    memset(m, 0, sizeof *m);
    strcpy(m->name, "llama-test");

    vp_op *embed = op_list(2);
    embed[0] = make_op(&vp_op_token_embedding);
    set(&embed[0], "vocab", c->vocab);
    set(&embed[0], "hidden", c->hidden);
    embed[1] = make_op(&vp_op_rotary_embedding);
    set(&embed[1], "head_dim", c->hidden / c->heads);
    CHECK(embed[1].kind->check(&embed[1]) == NULL);

    vp_op *final = op_list(3);
    final[0] = rmsnorm(c->hidden);
    final[1] = make_op(&vp_op_lm_head);
    set(&final[1], "vocab", c->vocab);
    set(&final[1], "hidden", c->hidden);
    final[2] = make_op(&vp_op_cross_entropy);

    m->section[VP_SECTION_EMBED] = (vp_section){.ops = embed, .n_ops = 2};
    m->section[VP_SECTION_LAYER] = (vp_section){.ops = llama_layer(c, c->experts > 0), .n_ops = 2};
    m->section[VP_SECTION_FINAL] = (vp_section){.ops = final, .n_ops = 3};
    if (c->dense_layers) m->section[VP_SECTION_FIRST_LAYER] = (vp_section){.ops = llama_layer(c, false), .n_ops = 2};
    m->layers = c->layers;
    m->first_layers = c->dense_layers;
    CHECK(vp_model_finish(m) == NULL);
}

typedef struct {
    unsigned hidden, layers, heads, intermediate, vocab, positions;
    double dropout;
} gpt2_config;

static vp_op layernorm(unsigned hidden) {
    vp_op op = make_op(&vp_op_layernorm);
    set(&op, "hidden", hidden);
    return op;
}

/* models/arch/gpt2.lua, transcribed: learned positions, LayerNorm, fused
 * c_attn with biases, a per-layer bool-buffer mask, gelu_new, dropout
 * everywhere, and a head tied to the token embedding. */
static void build_gpt2(vp_model *m, const gpt2_config *c) {
    memset(m, 0, sizeof *m);
    strcpy(m->name, "gpt2-test");
    vp_op *embed = op_list(3);
    embed[0] = make_op(&vp_op_token_embedding);
    set(&embed[0], "vocab", c->vocab);
    set(&embed[0], "hidden", c->hidden);
    embed[1] = make_op(&vp_op_position_embedding);
    set(&embed[1], "positions", c->positions);
    set(&embed[1], "hidden", c->hidden);
    embed[2] = make_op(&vp_op_dropout);
    set(&embed[2], "p", c->dropout);

    vp_op *layer = op_list(2);
    vp_op *attn_branch = op_list(2), *mlp_branch = op_list(2);
    attn_branch[0] = layernorm(c->hidden);
    attn_branch[1] = make_op(&vp_op_attention);
    vp_op *a = &attn_branch[1];
    set(a, "hidden", c->hidden);
    set(a, "heads", c->heads);
    set(a, "qkv_bias", 1);
    set(a, "out_bias", 1);
    set(a, "fused_qkv", 1);
    set(a, "dropout", c->dropout);
    set(a, "resid_dropout", c->dropout);
    set_enum(a, "mask", "bool-buffer");
    set(a, "positions", c->positions);
    set(a, "upcast_softmax", 0);
    mlp_branch[0] = layernorm(c->hidden);
    mlp_branch[1] = make_op(&vp_op_mlp);
    set(&mlp_branch[1], "hidden", c->hidden);
    set(&mlp_branch[1], "intermediate", c->intermediate);
    set_enum(&mlp_branch[1], "activation", "gelu_new");
    set(&mlp_branch[1], "bias", 1);
    set(&mlp_branch[1], "resid_dropout", c->dropout);
    layer[0] = make_op(&vp_op_residual);
    layer[0].children = attn_branch;
    layer[0].n_children = 2;
    layer[1] = make_op(&vp_op_residual);
    layer[1].children = mlp_branch;
    layer[1].n_children = 2;

    vp_op *final = op_list(3);
    final[0] = layernorm(c->hidden);
    final[1] = make_op(&vp_op_lm_head);
    set(&final[1], "vocab", c->vocab);
    set(&final[1], "hidden", c->hidden);
    set(&final[1], "tied", 1);
    final[2] = make_op(&vp_op_cross_entropy);

    m->section[VP_SECTION_EMBED] = (vp_section){.ops = embed, .n_ops = 3};
    m->section[VP_SECTION_LAYER] = (vp_section){.ops = layer, .n_ops = 2};
    m->section[VP_SECTION_FINAL] = (vp_section){.ops = final, .n_ops = 3};
    m->layers = c->layers;
    CHECK(a->kind->check(a) == NULL);
    CHECK(vp_model_finish(m) == NULL);
}

static vp_recipe base_recipe(void) {
    vp_recipe r;
    vp_recipe_defaults(&r);
    r.optimizer = (unsigned)vp_optimizer_find("adamw");
    r.micro_batch = 2;
    r.seq_len = 64;
    return r;
}

/* ---- Llama-2-7B ---- */

/* Touvron et al. 2023 / HF meta-llama/Llama-2-7b-hf: 6,738,415,616
 * parameters. By hand: 2 x 32000 x 4096 (embedding, untied head) +
 * 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 4096. */
static const llama_config llama2_7b = {4096, 32, 32, 32, 11008, 32000, 0.0, 0, 0, 0, 0};

static void test_llama2_7b(void) {
    vp_model m;
    build_llama(&m, &llama2_7b);
    const uint64_t by_hand = 2ull * 32000 * 4096 + 32ull * (4ull * 4096 * 4096 + 3ull * 4096 * 11008 + 2 * 4096) + 4096;
    CHECK_EQ_U64(by_hand, 6738415616ull);
    CHECK_EQ_U64(vp_model_params(&m, false), 6738415616ull);
    CHECK_EQ_U64(vp_model_params(&m, true), 6738415616ull);

    /* Mixed-precision Adam (ZeRO, Rajbhandari et al. 2020, section 3.1):
     * 2 bytes of fp16/bf16 parameters, 2 of gradients, and 12 of optimizer
     * state: 4 fp32 master weights + 4 momentum + 4 variance. */
    vp_recipe r = base_recipe();
    r.precision = VP_PREC_MIXED_BF16;
    r.micro_batch = 1;
    r.seq_len = 2048;
    vp_step_result res;
    CHECK(vp_step_run(&m, &r, true, false, &res, NULL) == VP_STEP_OK);
    const uint64_t p = 6738415616ull;
    CHECK_EQ_U64(res.params, p);
    CHECK_EQ_U64(res.params_bytes, 2 * p);
    CHECK_EQ_U64(res.grads_bytes, 2 * p);
    CHECK_EQ_U64(res.master_bytes, 4 * p);
    CHECK_EQ_U64(res.optimizer_bytes, 8 * p);
    CHECK_EQ_U64(res.buffers_bytes, 64 * 4); /* rotary inv_freq: head_dim/2 fp32 */
    CHECK_EQ_U64(res.params_bytes + res.master_bytes + res.optimizer_bytes, 14 * p);
    vp_model_free(&m);
}

/* GPT-2 small (Radford et al. 2019; HF "gpt2"): 124,439,808 parameters.
 * By hand: wte 50257 x 768 + wpe 1024 x 768 + 12 x (2 LayerNorms of 2 x 768
 * + c_attn 768 x 2304 + 2304 + c_proj 768^2 + 768 + c_fc 768 x 3072 + 3072
 * + mlp c_proj 3072 x 768 + 768) + ln_f 2 x 768; the head is tied, and the
 * causal-mask buffers are not parameters. */
static void test_gpt2_small(void) {
    const gpt2_config c = {768, 12, 12, 3072, 50257, 1024, 0.1};
    vp_model m;
    build_gpt2(&m, &c);
    const uint64_t by_hand = 50257ull * 768 + 1024ull * 768 +
                             12ull * (4 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768) +
                             2 * 768;
    CHECK_EQ_U64(by_hand, 124439808ull);
    CHECK_EQ_U64(vp_model_params(&m, false), 124439808ull);
    vp_recipe r = base_recipe();
    r.seq_len = 1024;
    vp_step_result res;
    CHECK(vp_step_run(&m, &r, true, false, &res, NULL) == VP_STEP_OK);
    /* GPT2Attention's bias buffer: tril(ones(1024, 1024, dtype=bool)) per layer */
    CHECK_EQ_U64(res.buffers_bytes, 12ull * 1024 * 1024);
    vp_model_free(&m);
}

/* ---- a small model, every tensor a multiple of 512 bytes in bf16 ---- */

/* hidden 256, 4 heads of 64, 2 kv heads, intermediate 512, vocab 1000, and
 * 7 layers: not a multiple of 3. Per layer: q, o 256x256; k, v 256x128;
 * gate, up, down 256x512; two norms of 256. */
static const llama_config small = {256, 7, 4, 2, 512, 1000, 0.0, 0, 0, 0, 0};
static const uint64_t small_params =
    1000 * 256 + 7 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 256 + 1000 * 256;

static void same_result(const vp_step_result *a, const vp_step_result *b) {
    CHECK_EQ_U64(a->rounded.peak, b->rounded.peak);
    CHECK_EQ_U64(a->raw.peak, b->raw.peak);
    CHECK_EQ_U64(a->activations_bytes, b->activations_bytes);
    CHECK_EQ_U64(a->resident_bytes, b->resident_bytes);
    for (int c = 0; c < VP_CAT_COUNT; c++) CHECK_EQ_U64(a->rounded.peak_breakdown[c], b->rounded.peak_breakdown[c]);
    for (int p = 0; p < VP_POOL_COUNT; p++) CHECK_EQ_U64(a->rounded.peak_pools[p], b->rounded.peak_pools[p]);
    CHECK(a->rounded.peak_place.phase == b->rounded.peak_place.phase);
    CHECK(a->rounded.peak_place.layer == b->rounded.peak_place.layer);
}

/* Folding evaluates one layer (or one chunk) and multiplies; it must give
 * exactly what evaluating every layer gives. */
static void test_fold_equals_unfold(void) {
    const vp_precision_id precisions[] = {VP_PREC_FP32, VP_PREC_BF16, VP_PREC_AMP_BF16, VP_PREC_MIXED_BF16, VP_PREC_FP8};
    const unsigned checkpoints[] = {0, 1, 3};
    const vp_attention_impl kernels[] = {VP_ATTN_EAGER, VP_ATTN_SDPA, VP_ATTN_FLASH};
    const vp_optimizer_impl impls[] = {VP_IMPL_FOR_LOOP, VP_IMPL_FOREACH};
    llama_config dropout_config = small;
    dropout_config.attn_dropout = 0.1;
    /* GPT-2-like: 5 layers (not a multiple of 3), tied head, dropout */
    const gpt2_config gpt2_small = {128, 5, 4, 512, 1000, 128, 0.1};
    /* a mixture with 5 experts, 2 per token, beside a shared expert: the
     * tokens do not split evenly */
    llama_config moe_config = small;
    moe_config.experts = 5;
    moe_config.top_k = 2;
    moe_config.shared = 384;
    moe_config.intermediate = 96;
    vp_model models[4];
    build_llama(&models[0], &small);
    build_llama(&models[1], &dropout_config);
    build_gpt2(&models[2], &gpt2_small);
    build_llama(&models[3], &moe_config);
    CHECK_EQ_U64(vp_model_params(&models[0], false), small_params);
    for (unsigned mi = 0; mi < 4; mi++)
        for (unsigned pi = 0; pi < 5; pi++)
            for (unsigned ci = 0; ci < 3; ci++)
                for (unsigned ki = 0; ki < 3; ki++)
                    for (unsigned ii = 0; ii < 2; ii++)
                        for (int tv = VP_TORCH_2; tv <= VP_TORCH_1_13; tv++) {
                            vp_recipe r = base_recipe();
                            r.precision = precisions[pi];
                            r.checkpoint_every = checkpoints[ci];
                            r.attention = kernels[ki];
                            r.optimizer_impl = impls[ii];
                            r.torch_version = (vp_torch_version)tv;
                            vp_step_result folded, unfolded;
                            vp_step_status sf = vp_step_run(&models[mi], &r, true, false, &folded, NULL);
                            vp_step_status su = vp_step_run(&models[mi], &r, false, false, &unfolded, NULL);
                            CHECK(sf == VP_STEP_OK);
                            CHECK(su == VP_STEP_OK);
                            same_result(&folded, &unfolded);
                            CHECK(folded.activations_bytes > 0);
                        }
    for (unsigned mi = 0; mi < 4; mi++) vp_model_free(&models[mi]);
}

/* use_reentrant=false: the frames' holders, reruns and early stops run the
 * same folded and layer by layer, and every step returns to its resident
 * state (the run's own check), for dense, dropout, tied and mixture models,
 * alone and inside FSDP units. */
static void test_nonreentrant(void) {
    const vp_precision_id precisions[] = {VP_PREC_FP32, VP_PREC_BF16, VP_PREC_AMP_BF16, VP_PREC_MIXED_BF16, VP_PREC_FP8};
    const unsigned checkpoints[] = {1, 2, 3};
    llama_config dropout_config = small;
    dropout_config.attn_dropout = 0.1;
    const gpt2_config gpt2_small = {128, 5, 4, 512, 1000, 128, 0.1};
    llama_config moe_config = small;
    moe_config.experts = 5;
    moe_config.top_k = 2;
    moe_config.shared = 384;
    moe_config.intermediate = 96;
    vp_model models[4];
    build_llama(&models[0], &small);
    build_llama(&models[1], &dropout_config);
    build_gpt2(&models[2], &gpt2_small);
    build_llama(&models[3], &moe_config);
    for (unsigned mi = 0; mi < 4; mi++)
        for (unsigned pi = 0; pi < 5; pi++)
            for (unsigned ci = 0; ci < 4; ci++)
                for (int early_stop = 0; early_stop <= 1; early_stop++)
                    for (int tv = VP_TORCH_2; tv <= VP_TORCH_1_13; tv++) {
                        vp_recipe r = base_recipe();
                        r.precision = precisions[pi];
                        /* the fourth: one layer a call inside FSDP units */
                        r.checkpoint_every = ci < 3 ? checkpoints[ci] : 1;
                        if (ci == 3) {
                            r.framework = VP_FRAMEWORK_FSDP;
                            r.fsdp = VP_FSDP_FULL_SHARD;
                            r.dp = 4;
                        }
                        r.use_reentrant = false;
                        r.checkpoint_early_stop = early_stop;
                        r.torch_version = (vp_torch_version)tv;
                        vp_step_result folded, unfolded;
                        CHECK(vp_step_run(&models[mi], &r, true, false, &folded, NULL) == VP_STEP_OK);
                        CHECK(vp_step_run(&models[mi], &r, false, false, &unfolded, NULL) == VP_STEP_OK);
                        same_result(&folded, &unfolded);
                        CHECK(folded.activations_bytes > 0);
                    }
    for (unsigned mi = 0; mi < 4; mi++) vp_model_free(&models[mi]);
}

/* Megatron's MoE layer with experts over expert-parallel ranks: the
 * experts' weights are 1/ep of them, the rest whole, and the folded
 * evaluation agrees with the unfolded one. */
static void test_expert_parallel(void) {
    llama_config c = small;
    c.experts = 8;
    c.top_k = 2;
    c.intermediate = 128;
    vp_model m;
    build_llama(&m, &c);
    const uint64_t expert_params = (uint64_t)c.layers * c.experts * 3 * c.hidden * c.intermediate;
    const uint64_t total = vp_model_params(&m, false);
    const unsigned eps[] = {1, 2, 8};
    for (unsigned i = 0; i < 3; i++) {
        vp_recipe r = base_recipe();
        r.framework = VP_FRAMEWORK_MEGATRON;
        r.precision = VP_PREC_MIXED_BF16;
        r.dp = 8;
        r.ep = eps[i];
        r.distributed_optimizer = true;
        vp_step_result folded, unfolded;
        CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
        CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
        same_result(&folded, &unfolded);
        CHECK_EQ_U64(folded.params_bytes, 2 * (total - expert_params + expert_params / eps[i]));
    }
    vp_model_free(&m);
}

/* micro_batch x seq_len near 2^48 tokens: the hidden states alone are
 * 2^48 x 256 elements; scores or projections leave 64 bits. */
static void expect_overflow(const vp_model *m, uint64_t batch, uint64_t seq, vp_attention_impl kernel, bool fold) {
    vp_recipe r = base_recipe();
    r.micro_batch = batch;
    r.seq_len = seq;
    r.attention = kernel;
    vp_step_result res;
    CHECK(vp_step_run(m, &r, fold, false, &res, NULL) == VP_STEP_OVERFLOW);
}

static void test_overflow(void) {
    vp_model m;
    build_llama(&m, &small);
    const uint64_t sizes[][2] = {{1u << 24, 1u << 24}, {(1u << 24) - 1, (1u << 24) - 3}};
    const vp_attention_impl kernels[] = {VP_ATTN_EAGER, VP_ATTN_SDPA, VP_ATTN_FLASH};
    for (unsigned s = 0; s < 2; s++)
        for (unsigned k = 0; k < 3; k++) {
            /* folded and unfolded: the fold's scaled deltas are checked too */
            expect_overflow(&m, sizes[s][0], sizes[s][1], kernels[k], false);
            expect_overflow(&m, sizes[s][0], sizes[s][1], kernels[k], true);
        }
    /* one sequence of 2^24 tokens: eager's b*heads*s*s scores are 2^50 bf16
     * elements = 2^51 bytes, large but representable: a number, not an error */
    vp_recipe r = base_recipe();
    r.micro_batch = 1;
    r.seq_len = 1u << 24;
    r.attention = VP_ATTN_EAGER;
    vp_step_result res;
    CHECK(vp_step_run(&m, &r, true, false, &res, NULL) == VP_STEP_OK);
    CHECK(res.rounded.peak > (UINT64_C(1) << 51));
    vp_model_free(&m);
}

/* ---- the optimizer's temporaries ---- */

/* The highest live total (rounded) from the end of backward on: the
 * optimizer phase, zero_grad and the end of the loop body. */
static uint64_t optimizer_phase_peak(const vp_ledger *l) {
    uint64_t before = 0, peak = 0;
    for (unsigned i = 0; i < l->n_events; i++) {
        if (l->events[i].place.phase != VP_PHASE_OPTIMIZER) before = l->events[i].live;
        else if (l->events[i].live > peak) peak = l->events[i].live;
    }
    return peak > before ? peak : before;
}

static uint64_t run_optimizer_peak(const vp_model *m, vp_precision_id precision, vp_optimizer_impl impl,
                                   vp_torch_version version, const char *optimizer, double weight_decay) {
    vp_recipe r = base_recipe();
    r.precision = precision;
    r.optimizer_impl = impl;
    r.torch_version = version;
    r.optimizer = (unsigned)vp_optimizer_find(optimizer);
    r.weight_decay = weight_decay;
    vp_step_result res;
    vp_ledger ledger;
    CHECK(vp_step_run(m, &r, true, true, &res, &ledger) == VP_STEP_OK);
    uint64_t peak = optimizer_phase_peak(&ledger);
    vp_ledger_free(&ledger);
    return peak;
}

/* torch/optim/adamw.py, _multi_tensor_adamw: in 2.x one list from
 * _foreach_sqrt(exp_avg_sqs), divided and shifted in place; 1.13 also made
 * denom = _foreach_add(exp_avg_sq_sqrt, eps): two lists. Each list holds a
 * state-dtype copy of every trainable parameter; the fused kernel none.
 * _single_tensor_adamw holds sqrt and its quotient for one tensor at a time:
 * two copies of the largest (the 1000 x 256 embedding or head), beside the
 * denom the tensor before it left in the loop's local (the head's: the final
 * norm's 256). Adam with weight decay first copies the gradient
 * (grad.add(param)): a third, rebound before the next tensor's. */
static void test_optimizer_temporaries(void) {
    vp_model m;
    build_llama(&m, &small);
    const struct {
        vp_precision_id precision;
        uint64_t elem; /* the state dtype's bytes */
    } cases[] = {{VP_PREC_FP32, 4}, {VP_PREC_BF16, 2}};
    for (unsigned i = 0; i < 2; i++) {
        uint64_t copy = cases[i].elem * small_params; /* every tensor is a multiple of 512 B */
        uint64_t largest = cases[i].elem * 1000 * 256, before_head = cases[i].elem * 256;
        uint64_t fused = run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FUSED, VP_TORCH_2, "adamw", -1);
        uint64_t fused_113 = run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FUSED, VP_TORCH_1_13, "adamw", -1);
        CHECK_EQ_U64(run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FOREACH, VP_TORCH_2, "adamw", -1) - fused,
                     copy);
        CHECK_EQ_U64(
            run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FOREACH, VP_TORCH_1_13, "adamw", -1) - fused_113,
            2 * copy);
        CHECK_EQ_U64(run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FOR_LOOP, VP_TORCH_2, "adamw", -1) - fused,
                     2 * largest + before_head);
        CHECK_EQ_U64(run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FOR_LOOP, VP_TORCH_2, "adam", 0.01) - fused,
                     3 * largest + before_head);
        CHECK_EQ_U64(run_optimizer_peak(&m, cases[i].precision, VP_IMPL_FOR_LOOP, VP_TORCH_2, "adam", 0.0) - fused,
                     2 * largest + before_head);
    }
    vp_model_free(&m);
}

/* The order model.parameters() meets a layer's slots in, as each family
 * registers its norms: the order is a permutation of the slots, and each
 * op's slots stay together in their own order. */
static void append_op_slots(unsigned *expected, unsigned *n, const vp_op *op) {
    for (unsigned i = 0; i < op->n_slots; i++) expected[(*n)++] = op->slot + i;
}

static void test_norms_registered(void) {
    vp_model m;
    build_llama(&m, &small);
    const vp_section *layer = &m.section[VP_SECTION_LAYER];
    CHECK(layer->registered == NULL); /* in place: slot order */
    const vp_op *attn_norm = &layer->ops[0].children[0], *attention = &layer->ops[0].children[1];
    const vp_op *mlp_norm = &layer->ops[1].children[0], *mlp = &layer->ops[1].children[1];
    const struct {
        vp_norm_registration how;
        const vp_op *order[4];
    } cases[] = {
        {VP_NORMS_LAST, {attention, mlp, attn_norm, mlp_norm}},      /* LlamaDecoderLayer */
        {VP_NORMS_FIRST, {attn_norm, mlp_norm, attention, mlp}},     /* GPTNeoXLayer */
        {VP_NORMS_AFTER_BRANCH, {attention, attn_norm, mlp, mlp_norm}}, /* T5's sub-layers */
    };
    for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        m.norms_registered = cases[c].how;
        CHECK(vp_model_finish(&m) == NULL);
        unsigned expected[256], n = 0;
        for (unsigned i = 0; i < 4; i++) append_op_slots(expected, &n, cases[c].order[i]);
        CHECK_EQ_U64(n, layer->n_slots);
        CHECK(layer->registered != NULL);
        for (unsigned i = 0; i < n && layer->registered; i++) CHECK_EQ_U64(layer->registered[i], expected[i]);
        CHECK(m.section[VP_SECTION_EMBED].registered == NULL && m.section[VP_SECTION_FINAL].registered == NULL);
        /* the order changes where the optimizer meets the parameters, not what the step keeps */
        vp_recipe r = base_recipe();
        vp_step_result folded, unfolded;
        CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
        CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
        same_result(&folded, &unfolded);
    }
    m.norms_registered = VP_NORMS_IN_PLACE;
    CHECK(vp_model_finish(&m) == NULL);
    CHECK(layer->registered == NULL);
    vp_model_free(&m);
}

/* DeepSeek's layout: dense layers first, then experts. Parameters count
 * each kind of layer; pipeline stages and checkpointed chunks that straddle
 * the boundary agree with the unfolded evaluation. */
static void test_first_layers(void) {
    llama_config c = small, one_dense = small, two_dense = small, one_sparse = small;
    c.experts = one_sparse.experts = 4;
    c.top_k = one_sparse.top_k = 2;
    c.dense_layers = 3;
    one_dense.layers = one_sparse.layers = 1;
    two_dense.layers = 2;
    vp_model m, d1, d2, s1;
    build_llama(&m, &c);
    build_llama(&d1, &one_dense);
    build_llama(&d2, &two_dense);
    build_llama(&s1, &one_sparse);
    /* homogeneous models give a dense layer, a sparse one and the rest */
    uint64_t dense = vp_model_params(&d2, false) - vp_model_params(&d1, false);
    uint64_t outside = vp_model_params(&d1, false) - dense;
    uint64_t sparse = vp_model_params(&s1, false) - outside;
    CHECK_EQ_U64(vp_model_params(&m, false), outside + 3 * dense + 4 * sparse);
    const unsigned checkpoints[] = {0, 2, 4};
    for (unsigned i = 0; i < 3; i++) {
        vp_recipe r = base_recipe();
        r.checkpoint_every = checkpoints[i];
        vp_step_result folded, unfolded;
        CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
        CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
        same_result(&folded, &unfolded);
        CHECK_EQ_U64(folded.params_bytes, 2 * (outside + 3 * dense + 4 * sparse)); /* bf16 by default */
    }
    vp_model_free(&m);
    vp_model_free(&d1);
    vp_model_free(&d2);
    vp_model_free(&s1);
}

/* LoRA: adapters beside q and v, frozen base; under ZeRO-3 the first
 * layer's input needs no gradient and its gathered weights are released
 * when backward ends. Folded and unfolded agree; the base keeps no
 * gradient or optimizer state. */
static void test_lora(void) {
    vp_model m;
    build_llama(&m, &small);
    const vp_framework frameworks[] = {VP_FRAMEWORK_TORCH, VP_FRAMEWORK_DEEPSPEED, VP_FRAMEWORK_FSDP};
    for (unsigned i = 0; i < 3; i++)
        for (unsigned ckpt = 0; ckpt < 2; ckpt++) {
            vp_recipe r = base_recipe();
            r.finetune = VP_FINETUNE_LORA;
            r.lora_dropout = 0.1;
            r.framework = frameworks[i];
            r.precision = i ? VP_PREC_MIXED_BF16 : VP_PREC_BF16;
            r.zero = i == 1 ? 3 : 0;
            r.dp = i ? 4 : 1;
            r.checkpoint_every = ckpt;
            vp_step_result folded, unfolded;
            CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
            CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
            same_result(&folded, &unfolded);
            /* q: 256 -> 256, v: 256 -> 128 (two key/value heads of 64) */
            CHECK_EQ_U64(folded.trainable_params, 7u * 8u * ((256 + 256) + (256 + 128)));
        }
    /* QLoRA: the same adapters over a 4-bit base, every linear weight but
     * the head packed; bitsandbytes' paged AdamW */
    for (unsigned ckpt = 0; ckpt < 2; ckpt++) {
        vp_recipe r = base_recipe();
        r.finetune = VP_FINETUNE_QLORA;
        r.precision = VP_PREC_AMP_BF16;
        r.optimizer = (unsigned)vp_optimizer_find("paged-adamw-32bit");
        r.checkpoint_every = ckpt;
        vp_step_result folded, unfolded;
        CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
        CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
        same_result(&folded, &unfolded);
        CHECK(folded.optimizer_bytes == 0); /* paged: host-backed */
    }
    vp_model_free(&m);
}

/* Context parallelism: seq_len / cp tokens per rank and the ring's
 * buffers; the folded evaluation agrees with the unfolded one. */
static void test_context_parallel(void) {
    vp_model m;
    build_llama(&m, &small);
    uint64_t activations[2] = {0};
    const unsigned cps[] = {1, 4};
    for (unsigned i = 0; i < 2; i++) {
        vp_recipe r = base_recipe();
        r.framework = VP_FRAMEWORK_MEGATRON;
        r.precision = VP_PREC_MIXED_BF16;
        r.attention = VP_ATTN_FLASH;
        r.seq_len = 256;
        r.cp = cps[i];
        vp_step_result folded, unfolded;
        CHECK(vp_step_run(&m, &r, true, false, &folded, NULL) == VP_STEP_OK);
        CHECK(vp_step_run(&m, &r, false, false, &unfolded, NULL) == VP_STEP_OK);
        same_result(&folded, &unfolded);
        activations[i] = folded.activations_bytes;
    }
    /* every saved tensor is per token: a quarter, to within the few
     * per-layer bytes that are not */
    CHECK(activations[1] * 4 <= activations[0] + activations[0] / 100);
    CHECK(activations[1] * 4 >= activations[0] - activations[0] / 100);
    vp_model_free(&m);
}

int main(void) {
    test_llama2_7b();
    test_gpt2_small();
    test_fold_equals_unfold();
    test_nonreentrant();
    test_overflow();
    test_optimizer_temporaries();
    test_expert_parallel();
    test_context_parallel();
    test_first_layers();
    test_norms_registered();
    test_lora();
    return check_summary("test_step");
}
