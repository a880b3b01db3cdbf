/* lua_recipe.c — recipe keys: one declaration each (parser, printer, doc),
 * read from a script's table or from --set strings. */
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_vramplan.h"
#include "optimizer.h"
#include "estimate.h"
#include "step.h"

/* Recipe errors carry no position of their own: the caller knows where the
 * key was set (a recipe file's line, a --set) and prefixes that. */
static int recipe_error(lua_State *L, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    lua_pushvfstring(L, fmt, args);
    va_end(args);
    return lua_error(L);
}

/* Pushes a value as an error message shows it: scalars as tostring writes
 * them, a table or function by its kind rather than its address. */
static const char *shown(lua_State *L, int idx) {
    switch (lua_type(L, idx)) {
    case LUA_TTABLE: return lua_pushliteral(L, "a table");
    case LUA_TFUNCTION: return lua_pushliteral(L, "a function");
    default: return luaL_tolstring(L, idx, NULL);
    }
}

/* Values arrive as Lua values from recipe scripts or as strings from --set:
 * both are accepted where they mean the same. */
static lua_Integer read_int(lua_State *L, const char *key, lua_Integer min, lua_Integer max) {
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) recipe_error(L, "%s: must be a whole number (got %s)", key, shown(L, -1));
    if (v < min || v > max) recipe_error(L, "%s: must be between %I and %I (got %I)", key, min, max, v);
    return v;
}

static double read_number(lua_State *L, const char *key, double min, double max) {
    int ok;
    lua_Number v = lua_tonumberx(L, -1, &ok);
    if (!ok) recipe_error(L, "%s: must be a number (got %s)", key, shown(L, -1));
    /* lua_pushfstring's %f is a lua_Number in LUAI_NUMFFORMAT (%.14g) */
    if (!(v >= min && v <= max)) recipe_error(L, "%s: must be between %f and %f (got %f)", key, min, max, v);
    return v;
}

static bool read_bool(lua_State *L, const char *key) {
    if (lua_isboolean(L, -1)) return lua_toboolean(L, -1);
    if (lua_type(L, -1) == LUA_TSTRING) {
        const char *s = lua_tostring(L, -1);
        if (strcmp(s, "true") == 0) return true;
        if (strcmp(s, "false") == 0) return false;
    }
    recipe_error(L, "%s: must be true or false (got %s)", key, shown(L, -1));
    return false;
}

static int read_option(lua_State *L, const char *key, const char *const *options) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    unsigned n = 0;
    for (; options[n]; n++)
        if (s && strcmp(options[n], s) == 0) return (int)n;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (unsigned i = 0; i < n; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, options[i]);
    }
    luaL_pushresult(&b);
    const char *choices = lua_tostring(L, -1);
    const char *guess = s ? vp_lua_suggest(s, options, n) : NULL;
    if (guess) recipe_error(L, "%s: '%s' is not one of %s (did you mean '%s'?)", key, s, choices, guess);
    /* its own statement: shown pushes, so it must not share an argument
     * list with a stack-relative read */
    const char *given = shown(L, -2);
    recipe_error(L, "%s: must be one of %s (got %s)", key, choices, given);
    return 0;
}

static void parse_precision(lua_State *L, vp_recipe *r, const char *k) { r->precision = (vp_precision_id)read_option(L, k, vp_precision_names); }
static void parse_impl(lua_State *L, vp_recipe *r, const char *k) { r->optimizer_impl = (vp_optimizer_impl)read_option(L, k, vp_optimizer_impl_names); }
static void parse_attention(lua_State *L, vp_recipe *r, const char *k) { r->attention = (vp_attention_impl)read_option(L, k, vp_attention_names); }
static void parse_framework(lua_State *L, vp_recipe *r, const char *k) { r->framework = (vp_framework)read_option(L, k, vp_framework_names); }
static void parse_torch(lua_State *L, vp_recipe *r, const char *k) { r->torch_version = (vp_torch_version)read_option(L, k, vp_torch_version_names); }
static void parse_device(lua_State *L, vp_recipe *r, const char *k) { r->device = (vp_device)read_option(L, k, vp_device_names); }
static void parse_batch(lua_State *L, vp_recipe *r, const char *k) { r->micro_batch = (uint64_t)read_int(L, k, 1, 1 << 24); }
static void parse_seq(lua_State *L, vp_recipe *r, const char *k) { r->seq_len = (uint64_t)read_int(L, k, 1, 1 << 26); }
static void parse_target(lua_State *L, vp_recipe *r, const char *k) { r->target_len = (uint64_t)read_int(L, k, 1, 1 << 26); }
static void parse_decay(lua_State *L, vp_recipe *r, const char *k) { r->weight_decay = read_number(L, k, 0, 1e6); }
static void parse_first_moment(lua_State *L, vp_recipe *r, const char *k) { r->first_moment = read_bool(L, k); }
static void parse_keep(lua_State *L, vp_recipe *r, const char *k) { r->keep_logits = read_bool(L, k); }
static void parse_none(lua_State *L, vp_recipe *r, const char *k) { r->grads_set_to_none = read_bool(L, k); }
static void parse_offload_activations(lua_State *L, vp_recipe *r, const char *k) { r->offload_activations = read_bool(L, k); }
static void parse_use_reentrant(lua_State *L, vp_recipe *r, const char *k) { r->use_reentrant = read_bool(L, k); }
static void parse_early_stop(lua_State *L, vp_recipe *r, const char *k) { r->checkpoint_early_stop = read_bool(L, k); }
static void parse_use_cache(lua_State *L, vp_recipe *r, const char *k) { r->use_cache = read_bool(L, k); }
static void parse_training(lua_State *L, vp_recipe *r, const char *k) { r->training = read_bool(L, k); }
static void parse_fragmentation(lua_State *L, vp_recipe *r, const char *k) { r->fragmentation = read_number(L, k, 0, 10); }
static void parse_context(lua_State *L, vp_recipe *r, const char *k) { r->cuda_context_mib = read_number(L, k, 0, 1 << 20); }

static void parse_dp(lua_State *L, vp_recipe *r, const char *k) { r->dp = (unsigned)read_int(L, k, 1, 1 << 20); }
static void parse_zero(lua_State *L, vp_recipe *r, const char *k) { r->zero = (unsigned)read_int(L, k, 0, 3); }
static void parse_fsdp(lua_State *L, vp_recipe *r, const char *k) { r->fsdp = (vp_fsdp_strategy)read_option(L, k, vp_fsdp_names); }
static void parse_shard_size(lua_State *L, vp_recipe *r, const char *k) { r->fsdp_shard_size = (unsigned)read_int(L, k, 1, 1 << 20); }
static void parse_offload_optimizer(lua_State *L, vp_recipe *r, const char *k) { r->offload_optimizer = (vp_offload)read_option(L, k, vp_offload_names); }
static void parse_offload_params(lua_State *L, vp_recipe *r, const char *k) { r->offload_params = (vp_offload)read_option(L, k, vp_offload_names); }
static void parse_reduce_bucket(lua_State *L, vp_recipe *r, const char *k) { r->reduce_bucket_size = read_number(L, k, 1, 1e12); }
static void parse_allgather_bucket(lua_State *L, vp_recipe *r, const char *k) { r->allgather_bucket_size = read_number(L, k, 1, 1e12); }
static void parse_prefetch_bucket(lua_State *L, vp_recipe *r, const char *k) { r->prefetch_bucket_size = read_number(L, k, 0, 1e12); }
static void parse_max_live(lua_State *L, vp_recipe *r, const char *k) { r->max_live_parameters = read_number(L, k, 0, 1e15); }
static void parse_reuse(lua_State *L, vp_recipe *r, const char *k) { r->max_reuse_distance = read_number(L, k, 0, 1e15); }
static void parse_persistence(lua_State *L, vp_recipe *r, const char *k) { r->persistence_threshold = read_number(L, k, 0, 1e15); }
static void parse_overlap(lua_State *L, vp_recipe *r, const char *k) { r->overlap_comm = read_bool(L, k); }
static void parse_bucket_view(lua_State *L, vp_recipe *r, const char *k) { r->ddp_bucket_view = read_bool(L, k); }
static void parse_bucket_mb(lua_State *L, vp_recipe *r, const char *k) { r->ddp_bucket_mb = read_number(L, k, 0.001, 1e6); }
static void parse_tp(lua_State *L, vp_recipe *r, const char *k) { r->tp = (unsigned)read_int(L, k, 1, 1 << 16); }
static void parse_ep(lua_State *L, vp_recipe *r, const char *k) { r->ep = (unsigned)read_int(L, k, 1, 1 << 16); }
static void parse_etp(lua_State *L, vp_recipe *r, const char *k) { r->etp = (unsigned)read_int(L, k, 1, 1 << 16); }
static void parse_cp(lua_State *L, vp_recipe *r, const char *k) { r->cp = (unsigned)read_int(L, k, 1, 1 << 16); }
static void parse_sp(lua_State *L, vp_recipe *r, const char *k) { r->sequence_parallel = read_bool(L, k); }
static void parse_distopt(lua_State *L, vp_recipe *r, const char *k) { r->distributed_optimizer = read_bool(L, k); }
static void parse_fp32_grads(lua_State *L, vp_recipe *r, const char *k) { r->grads_in_fp32 = read_bool(L, k); }

static void parse_pp(lua_State *L, vp_recipe *r, const char *k) { r->pp = (unsigned)read_int(L, k, 1, VP_MAX_STAGES); }
static void parse_schedule(lua_State *L, vp_recipe *r, const char *k) { r->pp_schedule = (vp_pp_schedule)read_option(L, k, vp_pp_schedule_names); }
static void parse_virtual(lua_State *L, vp_recipe *r, const char *k) { r->virtual_stages = (unsigned)read_int(L, k, 1, 1024); }
static void parse_microbatches(lua_State *L, vp_recipe *r, const char *k) { r->microbatches = (unsigned)read_int(L, k, 1, 1 << 20); }
static void parse_grad_accum(lua_State *L, vp_recipe *r, const char *k) { r->grad_accum = (unsigned)read_int(L, k, 1, 1 << 20); }
static void parse_global_batch(lua_State *L, vp_recipe *r, const char *k) { r->global_batch = (unsigned)read_int(L, k, 1, 1 << 30); }
static void parse_finetune(lua_State *L, vp_recipe *r, const char *k) { r->finetune = (vp_finetune)read_option(L, k, vp_finetune_names); }
static void parse_lora_rank(lua_State *L, vp_recipe *r, const char *k) { r->lora_rank = (unsigned)read_int(L, k, 1, 1 << 16); }
static void parse_lora_alpha(lua_State *L, vp_recipe *r, const char *k) { r->lora_alpha = read_number(L, k, 0, 1e9); }
static void parse_lora_dropout(lua_State *L, vp_recipe *r, const char *k) { r->lora_dropout = read_number(L, k, 0, 0.999); }
static void parse_use_dora(lua_State *L, vp_recipe *r, const char *k) { r->use_dora = read_bool(L, k); }

static vp_module_set read_modules(lua_State *L, const char *key) {
    if (lua_type(L, -1) != LUA_TSTRING)
        recipe_error(L, "%s: must be module names, as \"q_proj,v_proj\" or \"all-linear\"", key);
    vp_module_set set;
    const char *bad;
    unsigned len;
    if (!vp_module_parse(lua_tostring(L, -1), &set, &bad, &len)) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (unsigned i = 1; vp_module_names[i]; i++) {
            if (i > 1) luaL_addstring(&b, ", ");
            luaL_addstring(&b, vp_module_names[i]);
        }
        luaL_pushresult(&b);
        lua_pushlstring(L, bad, len);
        recipe_error(L, "%s: no module is called '%s' (known: all-linear, %s)", key, lua_tostring(L, -1),
                     lua_tostring(L, -2));
    }
    if (!set) recipe_error(L, "%s: names no module", key);
    return set;
}
static void parse_trainable_layers(lua_State *L, vp_recipe *r, const char *k) { r->trainable_layers = (unsigned)read_int(L, k, 0, 100000); }
static void parse_virtual_tokens(lua_State *L, vp_recipe *r, const char *k) { r->virtual_tokens = (unsigned)read_int(L, k, 1, 1 << 20); }
static void parse_quant(lua_State *L, vp_recipe *r, const char *k) { r->quant = (vp_quant)read_option(L, k, vp_quant_names); }
static void parse_sparsity(lua_State *L, vp_recipe *r, const char *k) { r->sparsity = (vp_sparsity)read_option(L, k, vp_sparsity_names); }
static void parse_double_quant(lua_State *L, vp_recipe *r, const char *k) { r->double_quant = read_bool(L, k); }
static void parse_int8_threshold(lua_State *L, vp_recipe *r, const char *k) {
    r->int8_threshold = read_number(L, k, 0, 1e6);
}
static const char *const compute_dtype_names[] = {"bf16", "fp16", "fp32", NULL};
static void parse_compute_dtype(lua_State *L, vp_recipe *r, const char *k) {
    static const vp_dtype dtypes[] = {VP_BF16, VP_FP16, VP_FP32};
    r->compute_dtype = dtypes[read_option(L, k, compute_dtype_names)];
}
static void parse_lora_targets(lua_State *L, vp_recipe *r, const char *k) { r->lora_targets = read_modules(L, k); }
static void parse_modules_to_save(lua_State *L, vp_recipe *r, const char *k) { r->modules_to_save = read_modules(L, k); }
static void parse_gpus(lua_State *L, vp_recipe *r, const char *k) { r->gpus = (unsigned)read_int(L, k, 1, 1 << 24); }

/* "8,8,8,8": the layers of each stage, in order */
static void parse_pp_layers(lua_State *L, vp_recipe *r, const char *k) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    unsigned n = 0;
    while (s && *s && n < VP_MAX_STAGES) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 100000 || (*end && *end != ',')) { s = NULL; break; }
        r->pp_layers[n++] = (unsigned)v;
        s = *end ? end + 1 : end;
    }
    if (!s || n == 0) recipe_error(L, "%s: must list the layers of each stage, as \"8,8,8,8\"", k);
    r->n_pp_layers = n;
}

static void parse_gpus_per_node(lua_State *L, vp_recipe *r, const char *k) { r->gpus_per_node = (unsigned)read_int(L, k, 1, 1024); }

static void parse_optimizer(lua_State *L, vp_recipe *r, const char *k) {
    const char *names[16];
    unsigned n = vp_optimizer_count();
    for (unsigned i = 0; i < n && i < 15; i++) names[i] = vp_optimizer_at(i)->name;
    names[n < 15 ? n : 15] = NULL;
    r->optimizer = (unsigned)read_option(L, k, names);
}

/* "none", "full" (every layer) or "every-K" (chunks of K layers). */
static void parse_checkpointing(lua_State *L, vp_recipe *r, const char *k) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    char *end = NULL;
    r->selective = false;
    if (strcmp(s, "none") == 0) r->checkpoint_every = 0;
    else if (strcmp(s, "full") == 0) r->checkpoint_every = 1;
    else if (strcmp(s, "selective") == 0) {
        r->checkpoint_every = 0;
        r->selective = true;
    }
    else if (strncmp(s, "every-", 6) == 0 && (r->checkpoint_every = (unsigned)strtoul(s + 6, &end, 10), end && !*end) &&
             r->checkpoint_every >= 1 && r->checkpoint_every <= 100000 && s[6] >= '1' && s[6] <= '9')
        ;
    else recipe_error(L, "%s: must be none, full, selective or every-K for a whole K >= 1 (got %s)", k, shown(L, -1));
}

typedef struct {
    const char *name;
    void (*parse)(lua_State *L, vp_recipe *recipe, const char *key);
    const char *doc;
    const char *const *choices; /* the values an option key takes, as its parser reads them */
} recipe_key;


static const recipe_key keys[] = {
    {"precision", parse_precision, "fp32, bf16, fp16 train the model in that dtype; amp-* autocasts over fp32 weights; mixed-* keeps 16-bit weights and fp32 master weights; fp8 is Transformer Engine's", vp_precision_names},
    {"optimizer", parse_optimizer, "the optimizer (none: forward and backward only)", NULL},
    {"optimizer_impl", parse_impl, "the optimizer's kernels; auto picks foreach for torch.optim, fused for DeepSpeed", vp_optimizer_impl_names},
    {"weight_decay", parse_decay, "weight decay; by default the optimizer's own (AdamW 0.01, others 0)", NULL},
    {"first_moment", parse_first_moment,
     "adafactor or sm3: keep a first moment, one state per parameter (Adafactor's beta1 set: fp32; SM3's momentum > 0: "
     "the gradient's dtype); their libraries' default is none [false]", NULL},
    {"micro_batch", parse_batch, "sequences per micro-batch", NULL},
    {"seq_len", parse_seq, "tokens per sequence", NULL},
    {"target_len", parse_target, "encoder-decoder models (T5): the decoder's tokens per sequence, the labels' length [seq_len]", NULL},
    {"checkpointing", parse_checkpointing, "none | full | selective (the attention core, Korthikanti et al.) | every-K (keep the input of every K-layer chunk)", NULL},
    {"use_reentrant", parse_use_reentrant,
     "full or every-K: torch.utils.checkpoint's use_reentrant (gradient_checkpointing_kwargs); false saves holders "
     "in the forward and recomputes on backward's first unpack (transformers 4.x passes true, 5.x false) [true]", NULL},
    {"checkpoint_early_stop", parse_early_stop,
     "use_reentrant = false: the rerun stops once it has remade every saved tensor "
     "(torch.utils.checkpoint.set_checkpoint_early_stop) [true; false with torch_version 1.13]", NULL},
    {"attention", parse_attention, "the attention kernel", vp_attention_names},
    {"framework", parse_framework, "the training framework, with its own buffers and defaults; torch is a plain PyTorch loop (DDP with dp)", vp_framework_names},
    {"torch_version", parse_torch, "autograd and optimizer behaviour that differs between them", vp_torch_version_names},
    {"device", parse_device, "where the step runs; cpu is the CPU twin the PyTorch harness measures", vp_device_names},
    {"keep_logits", parse_keep, "the loop keeps the model's outputs (logits) until the step ends", NULL},
    {"grads_set_to_none", parse_none, "zero_grad(set_to_none=True): gradients freed between steps", NULL},
    {"use_cache", parse_use_cache,
     "the model's outputs keep every layer's keys and values (the configs' default; off under checkpointing) [true]", NULL},
    {"offload_activations", parse_offload_activations,
     "the forward under torch.autograd.graph.save_on_cpu(pin_memory=True): what autograd saves goes to pinned host memory [false]", NULL},
    {"training", parse_training, "dropout active (model.train())", NULL},
    {"dp", parse_dp, "data-parallel ranks (DDP with framework torch)", NULL},
    {"zero", parse_zero, "DeepSpeed ZeRO stage 0-3 (framework deepspeed)", NULL},
    {"fsdp", parse_fsdp, "FSDP's sharding strategy (framework fsdp) [full_shard]", vp_fsdp_names},
    {"fsdp_shard_size", parse_shard_size, "ranks one model is sharded over with hybrid_shard", NULL},
    {"offload_optimizer", parse_offload_optimizer, "DeepSpeed's optimizer offload (master weights, states, fp32 gradients)", vp_offload_names},
    {"offload_params", parse_offload_params, "ZeRO-3 parameter offload, FSDP's CPUOffload", vp_offload_names},
    {"reduce_bucket_size", parse_reduce_bucket, "DeepSpeed reduce bucket, elements [5e8]", NULL},
    {"allgather_bucket_size", parse_allgather_bucket, "DeepSpeed all-gather bucket, elements [5e8]", NULL},
    {"stage3_prefetch_bucket_size", parse_prefetch_bucket, "ZeRO-3 parameters gathered ahead, elements [5e7]", NULL},
    {"stage3_max_live_parameters", parse_max_live, "ZeRO-3: gathered parameters beyond which nothing more is prefetched, elements [1e9]", NULL},
    {"stage3_max_reuse_distance", parse_reuse, "ZeRO-3: a gathered parameter used again within this many elements of the module trace is not released, elements [1e9]", NULL},
    {"stage3_param_persistence_threshold", parse_persistence, "ZeRO-3: parameters with fewer elements stay gathered on every rank [1e5]", NULL},
    {"overlap_comm", parse_overlap, "DeepSpeed overlap_comm: two reduce buckets [on for stage 3 only]; with framework megatron, for the step time only: --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap [off]", NULL},
    {"ddp_bucket_view", parse_bucket_view, "DDP gradient_as_bucket_view [false]", NULL},
    {"ddp_bucket_mb", parse_bucket_mb, "DDP bucket_cap_mb [25]", NULL},
    {"tp", parse_tp, "tensor-parallel ranks (framework megatron)", NULL},
    {"ep", parse_ep, "expert-parallel ranks, within dp x tp x cp (framework megatron)", NULL},
    {"etp", parse_etp, "expert-tensor-parallel ranks: each expert's width split [tp]", NULL},
    {"cp", parse_cp, "context-parallel ranks: the sequence split, K/V passed around a ring (framework megatron)", NULL},
    {"sequence_parallel", parse_sp, "Megatron sequence parallelism: norms, dropouts and the residual stream split along the sequence", NULL},
    {"distributed_optimizer", parse_distopt, "Megatron's distributed optimizer: master weights and states sharded over dp", NULL},
    {"accumulate_allreduce_grads_in_fp32", parse_fp32_grads, "Megatron's fp32 main_grad buffers [true]", NULL},
    {"pp", parse_pp, "pipeline stages", NULL},
    {"pp_schedule", parse_schedule, "the pipeline schedule [1f1b]", vp_pp_schedule_names},
    {"virtual_stages", parse_virtual, "model chunks per rank with interleaved-1f1b [1]", NULL},
    {"num_microbatches", parse_microbatches, "micro-batches per step (with pp; gradient accumulation without) [pp]", NULL},
    {"grad_accum", parse_grad_accum, "gradient accumulation steps: micro-batches into the same gradients before the optimizer step [1]", NULL},
    {"global_batch", parse_global_batch, "sequences per optimizer step over all data-parallel ranks: sets grad_accum (num_microbatches with pp) to global_batch / (micro_batch x dp) [unset]", NULL},
    {"pp_layers", parse_pp_layers, "layers of each stage, as \"7,8,8,9\" [an even split]", NULL},
    {"gpus", parse_gpus, "GPUs in all: when given, must equal dp x tp x pp x cp", NULL},
    {"finetune", parse_finetune, "what is trained [full]", vp_finetune_names},
    {"lora_rank", parse_lora_rank, "LoRA's r [8]", NULL},
    {"lora_alpha", parse_lora_alpha, "LoRA's alpha (scaling alpha / r: no memory of its own) [8]", NULL},
    {"lora_dropout", parse_lora_dropout, "dropout on the adapters' input (a mask and a copy per targeted module) [0]", NULL},
    {"use_dora", parse_use_dora, "DoRA (LoraConfig's use_dora), with lora or qlora: a trained magnitude per output feature, and each forward makes B @ A and the weight's column norms whole (a quantized weight dequantized), weight-sized temporaries [false]", NULL},
    {"lora_targets", parse_lora_targets, "modules given adapters: names (q_proj,v_proj) or all-linear [q_proj,v_proj; GPT-2 c_attn; BLOOM query_key_value]", NULL},
    {"trainable_layers", parse_trainable_layers, "freeze: the last layers trained, with the final norm and head [0]", NULL},
    {"num_virtual_tokens", parse_virtual_tokens, "prompt tuning: the learned tokens put before every sequence; prefix tuning: the learned keys and values before every layer's", NULL},
    {"sparsity", parse_sparsity,
     "apex ASP's 2:4 structured sparsity, a bool mask beside every pruned linear weight; it saves no training memory [none]",
     vp_sparsity_names},
    {"quant", parse_quant, "qlora: the frozen base's linear weights (bitsandbytes 0.45-0.46); int8 is LLM.int8 with transformers' outlier threshold 6.0, no outliers found [nf4]", vp_quant_names},
    {"double_quant", parse_double_quant, "qlora: quantize the block scales too (8-bit, in blocks of 256) [true]", NULL},
    {"llm_int8_threshold", parse_int8_threshold, "quant = int8: LLM.int8's outlier threshold; 0 skips the outlier search (its input-sized temporaries) [6.0]", NULL},
    {"compute_dtype", parse_compute_dtype, "qlora: the dtype 4-bit weights are dequantized to [bf16]", compute_dtype_names},
    {"modules_to_save", parse_modules_to_save, "modules trained in full beside the adapters (lm_head, embed_tokens, norm; a classifier's head joins them by itself)", NULL},
    {"gpus_per_node", parse_gpus_per_node, "GPUs per node, for host memory per node [min(gpus, 8)]", NULL},
    {"fragmentation", parse_fragmentation, "caching-allocator reservation beyond whole segments, as a fraction of the allocated peak", NULL},
    {"cuda_context_mib", parse_context, "memory of the CUDA context and its loaded kernels, in MiB", NULL},
};

enum { N_KEYS = sizeof keys / sizeof keys[0] };

void vp_lua_read_recipe(lua_State *L, int index, vp_recipe *recipe) {
    index = lua_absindex(L, index);
    luaL_checktype(L, index, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, index)) { /* key value */
        if (lua_type(L, -2) != LUA_TSTRING) recipe_error(L, "recipe keys are names (found a %s key)", luaL_typename(L, -2));
        const char *key = lua_tostring(L, -2);
        const recipe_key *found = NULL;
        for (unsigned i = 0; i < N_KEYS; i++)
            if (strcmp(keys[i].name, key) == 0) found = &keys[i];
        if (!found) {
            const char *names[N_KEYS];
            for (unsigned i = 0; i < N_KEYS; i++) names[i] = keys[i].name;
            const char *guess = vp_lua_suggest(key, names, N_KEYS);
            if (guess) recipe_error(L, "unknown recipe key '%s' (did you mean '%s'?)", key, guess);
            recipe_error(L, "unknown recipe key '%s'", key);
        }
        found->parse(L, recipe, key);
        lua_pop(L, 1); /* key */
    }
}

void vp_lua_check_recipe(lua_State *L, const vp_recipe *recipe) {
    const char *problem = vp_step_layout_problem(NULL, recipe);
    if (!problem) problem = vp_pipeline_problem(NULL, recipe);
    if (!problem) problem = vp_recipe_batch_problem(recipe);
    if (problem) recipe_error(L, "%s", problem);
    if (recipe->precision >= VP_PREC_MIXED_BF16 && !recipe->grads_set_to_none)
        recipe_error(L, "grads_set_to_none: false is not modelled with mixed-* precision (the master-weight step frees the 16-bit gradients)");
    if ((recipe->framework != VP_FRAMEWORK_TORCH || recipe->ddp_bucket_view) && !recipe->grads_set_to_none)
        recipe_error(L, "grads_set_to_none: false is not modelled with sharded or bucketed gradients");
}

void vp_lua_push_recipe(lua_State *L, const vp_recipe *given) {
    vp_recipe resolved = *given;
    vp_recipe_resolve(&resolved);
    const vp_recipe *r = &resolved;
    lua_createtable(L, 0, N_KEYS);
    lua_pushstring(L, vp_precision_names[r->precision]);
    lua_setfield(L, -2, "precision");
    lua_pushstring(L, vp_optimizer_at(r->optimizer)->name);
    lua_setfield(L, -2, "optimizer");
    lua_pushstring(L, vp_optimizer_impl_names[r->optimizer_impl]);
    lua_setfield(L, -2, "optimizer_impl");
    lua_pushnumber(L, vp_optimizer_weight_decay(vp_optimizer_at(r->optimizer), r));
    lua_setfield(L, -2, "weight_decay");
    lua_pushboolean(L, r->first_moment);
    lua_setfield(L, -2, "first_moment");
    lua_pushinteger(L, (lua_Integer)r->micro_batch);
    lua_setfield(L, -2, "micro_batch");
    lua_pushinteger(L, (lua_Integer)r->seq_len);
    lua_setfield(L, -2, "seq_len");
    lua_pushinteger(L, (lua_Integer)(r->target_len ? r->target_len : r->seq_len));
    lua_setfield(L, -2, "target_len");
    if (r->selective) lua_pushliteral(L, "selective");
    else if (r->checkpoint_every == 0) lua_pushliteral(L, "none");
    else if (r->checkpoint_every == 1) lua_pushliteral(L, "full");
    else lua_pushfstring(L, "every-%d", (int)r->checkpoint_every);
    lua_setfield(L, -2, "checkpointing");
    lua_pushboolean(L, r->use_reentrant);
    lua_setfield(L, -2, "use_reentrant");
    lua_pushboolean(L, vp_recipe_checkpoint_early_stop(r));
    lua_setfield(L, -2, "checkpoint_early_stop");
    lua_pushstring(L, vp_attention_names[r->attention]);
    lua_setfield(L, -2, "attention");
    lua_pushstring(L, vp_framework_names[r->framework]);
    lua_setfield(L, -2, "framework");
    lua_pushstring(L, vp_torch_version_names[r->torch_version]);
    lua_setfield(L, -2, "torch_version");
    lua_pushstring(L, vp_device_names[r->device]);
    lua_setfield(L, -2, "device");
    lua_pushboolean(L, r->keep_logits);
    lua_setfield(L, -2, "keep_logits");
    lua_pushboolean(L, r->grads_set_to_none);
    lua_setfield(L, -2, "grads_set_to_none");
    lua_pushboolean(L, r->offload_activations);
    lua_setfield(L, -2, "offload_activations");
    lua_pushboolean(L, r->use_cache);
    lua_setfield(L, -2, "use_cache");
    lua_pushstring(L, vp_sparsity_names[r->sparsity]);
    lua_setfield(L, -2, "sparsity");
    lua_pushboolean(L, r->training);
    lua_setfield(L, -2, "training");
    lua_pushnumber(L, r->fragmentation);
    lua_setfield(L, -2, "fragmentation");
    lua_pushnumber(L, r->cuda_context_mib);
    lua_setfield(L, -2, "cuda_context_mib");
    lua_pushinteger(L, r->dp);
    lua_setfield(L, -2, "dp");
    lua_pushinteger(L, r->zero);
    lua_setfield(L, -2, "zero");
    lua_pushstring(L, vp_fsdp_names[r->fsdp]);
    lua_setfield(L, -2, "fsdp");
    lua_pushstring(L, vp_offload_names[r->offload_optimizer]);
    lua_setfield(L, -2, "offload_optimizer");
    lua_pushstring(L, vp_offload_names[r->offload_params]);
    lua_setfield(L, -2, "offload_params");
    lua_pushnumber(L, r->reduce_bucket_size);
    lua_setfield(L, -2, "reduce_bucket_size");
    lua_pushnumber(L, r->prefetch_bucket_size);
    lua_setfield(L, -2, "stage3_prefetch_bucket_size");
    lua_pushnumber(L, r->max_live_parameters);
    lua_setfield(L, -2, "stage3_max_live_parameters");
    lua_pushnumber(L, r->max_reuse_distance);
    lua_setfield(L, -2, "stage3_max_reuse_distance");
    lua_pushnumber(L, r->persistence_threshold);
    lua_setfield(L, -2, "stage3_param_persistence_threshold");
    lua_pushboolean(L, r->overlap_comm >= 0 ? r->overlap_comm : r->zero == 3);
    lua_setfield(L, -2, "overlap_comm");
    lua_pushboolean(L, r->ddp_bucket_view);
    lua_setfield(L, -2, "ddp_bucket_view");
    lua_pushinteger(L, r->tp);
    lua_setfield(L, -2, "tp");
    lua_pushinteger(L, r->ep);
    lua_setfield(L, -2, "ep");
    lua_pushinteger(L, r->etp ? r->etp : r->tp);
    lua_setfield(L, -2, "etp");
    lua_pushinteger(L, r->cp);
    lua_setfield(L, -2, "cp");
    lua_pushstring(L, vp_finetune_names[r->finetune]);
    lua_setfield(L, -2, "finetune");
    if (r->finetune != VP_FINETUNE_FULL) {
        char names[256];
        lua_pushinteger(L, r->lora_rank);
        lua_setfield(L, -2, "lora_rank");
        lua_pushnumber(L, r->lora_alpha);
        lua_setfield(L, -2, "lora_alpha");
        lua_pushnumber(L, r->lora_dropout);
        lua_setfield(L, -2, "lora_dropout");
        lua_pushboolean(L, r->use_dora);
        lua_setfield(L, -2, "use_dora");
        if (r->lora_targets == vp_module_all_linear()) snprintf(names, sizeof names, "all-linear");
        else vp_module_format(vp_lora_targets(r), names, sizeof names);
        lua_pushstring(L, names);
        lua_setfield(L, -2, "lora_targets");
        vp_module_format(r->modules_to_save, names, sizeof names);
        lua_pushstring(L, names);
        lua_setfield(L, -2, "modules_to_save");
    }
    if (r->finetune == VP_FINETUNE_PROMPT || r->finetune == VP_FINETUNE_PREFIX) {
        lua_pushinteger(L, r->virtual_tokens);
        lua_setfield(L, -2, "num_virtual_tokens");
    }
    if (r->finetune == VP_FINETUNE_FREEZE) {
        lua_pushinteger(L, r->trainable_layers);
        lua_setfield(L, -2, "trainable_layers");
    }
    if (r->finetune == VP_FINETUNE_QLORA) {
        lua_pushstring(L, r->quant == VP_QUANT_NONE ? "nf4" : vp_quant_names[r->quant]);
        lua_setfield(L, -2, "quant");
        lua_pushboolean(L, r->double_quant);
        lua_setfield(L, -2, "double_quant");
        if (r->quant == VP_QUANT_INT8) {
            lua_pushnumber(L, r->int8_threshold);
            lua_setfield(L, -2, "llm_int8_threshold");
        }
        lua_pushstring(L, vp_dtype_names[r->compute_dtype]);
        lua_setfield(L, -2, "compute_dtype");
    }
    lua_pushboolean(L, r->sequence_parallel);
    lua_setfield(L, -2, "sequence_parallel");
    lua_pushboolean(L, r->distributed_optimizer);
    lua_setfield(L, -2, "distributed_optimizer");
    lua_pushboolean(L, r->grads_in_fp32);
    lua_setfield(L, -2, "accumulate_allreduce_grads_in_fp32");
    lua_pushinteger(L, r->pp);
    lua_setfield(L, -2, "pp");
    lua_pushstring(L, vp_pp_schedule_names[r->pp_schedule]);
    lua_setfield(L, -2, "pp_schedule");
    lua_pushinteger(L, r->virtual_stages);
    lua_setfield(L, -2, "virtual_stages");
    lua_pushinteger(L, vp_recipe_microbatches(r));
    lua_setfield(L, -2, "num_microbatches");
    lua_pushinteger(L, vp_recipe_microbatches(r));
    lua_setfield(L, -2, "grad_accum");
    lua_pushinteger(L, (lua_Integer)vp_recipe_microbatches(r) * r->micro_batch * r->dp);
    lua_setfield(L, -2, "global_batch");
    unsigned gpus = r->dp * r->tp * r->pp * r->cp;
    lua_pushinteger(L, gpus);
    lua_setfield(L, -2, "gpus");
    lua_pushinteger(L, r->gpus_per_node ? r->gpus_per_node : (gpus < 8 ? gpus : 8));
    lua_setfield(L, -2, "gpus_per_node");
}

int vp_lua_recipe_keys(lua_State *L) {
    lua_createtable(L, N_KEYS, 0);
    for (unsigned i = 0; i < N_KEYS; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, keys[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, keys[i].doc);
        lua_setfield(L, -2, "doc");
        if (keys[i].choices || keys[i].parse == parse_optimizer) {
            lua_newtable(L);
            if (keys[i].choices)
                for (unsigned j = 0; keys[i].choices[j]; j++) {
                    lua_pushstring(L, keys[i].choices[j]);
                    lua_rawseti(L, -2, (lua_Integer)j + 1);
                }
            else /* the optimizer registry */
                for (unsigned j = 0; j < vp_optimizer_count(); j++) {
                    lua_pushstring(L, vp_optimizer_at(j)->name);
                    lua_rawseti(L, -2, (lua_Integer)j + 1);
                }
            lua_setfield(L, -2, "choices");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}
