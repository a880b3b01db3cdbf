/* lua_estimate.c — vramplan.estimate(model, recipe, gpu, options): runs the
 * engine and returns every figure as a Lua table. */
#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "finetune.h"
#include "lua_estimate.h"
#include "lua_vramplan.h"

static void set_int(lua_State *L, const char *key, uint64_t v) {
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, key);
}

static void push_breakdown(lua_State *L, const uint64_t *values) {
    lua_createtable(L, 0, VP_CAT_COUNT);
    for (int c = 0; c < VP_CAT_COUNT; c++) set_int(L, vp_category_names[c], values[c]);
}

static void push_place(lua_State *L, const vp_place *place) {
    lua_pushstring(L, vp_phase_names[place->phase]);
    lua_setfield(L, -2, "peak_phase");
    if (place->layer >= 0) lua_pushinteger(L, place->layer);
    else lua_pushnil(L);
    lua_setfield(L, -2, "peak_layer");
    lua_pushstring(L, place->op ? place->op : "");
    lua_setfield(L, -2, "peak_op");
}

/* The event log: one entry per allocation or free, in order; in the bytes
 * the peak is counted in (the caching allocator's blocks, or on the CPU
 * twin the tensors' own). */
static void push_timeline(lua_State *L, const vp_ledger *ledger, bool exact) {
    lua_createtable(L, (int)ledger->n_events, 0);
    for (unsigned i = 0; i < ledger->n_events; i++) {
        const vp_event *e = &ledger->events[i];
        lua_createtable(L, 0, 6);
        lua_pushstring(L, vp_phase_names[e->place.phase]);
        lua_setfield(L, -2, "phase");
        if (e->place.layer >= 0) {
            lua_pushinteger(L, e->place.layer);
            lua_setfield(L, -2, "layer");
        }
        lua_pushstring(L, e->place.op ? e->place.op : "");
        lua_setfield(L, -2, "op");
        lua_pushstring(L, e->category < VP_CAT_COUNT ? vp_category_names[e->category] : "repeat");
        lua_setfield(L, -2, "category");
        lua_pushinteger(L, exact ? e->raw_delta : e->delta);
        lua_setfield(L, -2, "delta");
        lua_pushinteger(L, (lua_Integer)(exact ? e->raw_live : e->live));
        lua_setfield(L, -2, "live");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void read_gpu(lua_State *L, int index, vp_gpu *gpu) {
    memset(gpu, 0, sizeof *gpu);
    if (lua_isnoneornil(L, index)) return;
    luaL_checktype(L, index, LUA_TTABLE);
    lua_getfield(L, index, "memory_bytes");
    int ok;
    lua_Integer bytes = lua_tointegerx(L, -1, &ok);
    if (!ok || bytes <= 0) luaL_error(L, "gpu: memory_bytes must be a positive whole number");
    gpu->memory_bytes = (uint64_t)bytes;
    lua_getfield(L, index, "compute_capability");
    if (lua_type(L, -1) == LUA_TSTRING) gpu->compute_major = (unsigned)strtoul(lua_tostring(L, -1), NULL, 10);
    lua_pop(L, 2);
    /* the datasheet figures the step-time model reads (0 when absent) */
    static const struct {
        const char *key;
        size_t offset;
    } figures[] = {
        {"fp32_tflops", offsetof(vp_gpu, fp32_tflops)}, {"tf32_tflops", offsetof(vp_gpu, tf32_tflops)},
        {"fp16_tflops", offsetof(vp_gpu, fp16_tflops)}, {"bf16_tflops", offsetof(vp_gpu, bf16_tflops)},
        {"fp8_tflops", offsetof(vp_gpu, fp8_tflops)},   {"memory_bandwidth_gbps", offsetof(vp_gpu, memory_gbps)},
        {"interconnect_gbps", offsetof(vp_gpu, interconnect_gbps)}, {"network_gbps", offsetof(vp_gpu, network_gbps)},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        lua_getfield(L, index, figures[i].key); /* gpu[key] */
        *(double *)((char *)gpu + figures[i].offset) = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0.0;
        lua_pop(L, 1);
    }
    lua_getfield(L, index, "sms"); /* gpu.sms */
    lua_Integer sms = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
    gpu->sms = sms > 0 && sms < 100000 ? (unsigned)sms : 0;
    lua_pop(L, 1);
    lua_getfield(L, index, "cuda_context_mib"); /* gpu.cuda_context_mib: measured on it (hardware/gpus/) */
    double context = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0.0;
    gpu->cuda_context_mib = context > 0 && context < (1 << 20) ? context : 0.0;
    lua_pop(L, 1);
}

/* The GPU's measured CUDA context stands in for the recipe's default, not
 * for a figure the recipe (the table at `keys`) sets itself. */
static void context_of_gpu(lua_State *L, int keys, const vp_gpu *gpu, vp_recipe *recipe) {
    if (gpu->cuda_context_mib <= 0) return;
    bool set = !lua_isnoneornil(L, keys) && lua_getfield(L, keys, "cuda_context_mib") != LUA_TNIL;
    if (!lua_isnoneornil(L, keys)) lua_pop(L, 1);
    if (!set) recipe->cuda_context_mib = gpu->cuda_context_mib;
}

const vp_lua_figure vp_lua_time_figures[] = {
    {"step_s", offsetof(vp_step_time, step_s), VP_FIGURE_ALWAYS},
    {"tokens_per_s", offsetof(vp_step_time, tokens_per_s), VP_FIGURE_ALWAYS},
    {"tokens_per_s_per_gpu", offsetof(vp_step_time, tokens_per_s_per_gpu), VP_FIGURE_ALWAYS},
    {"model_flops_per_step", offsetof(vp_step_time, model_flops_per_step), VP_FIGURE_ALWAYS},
    {"hardware_flops_per_step", offsetof(vp_step_time, hardware_flops_per_step), VP_FIGURE_ALWAYS},
    {"mfu", offsetof(vp_step_time, mfu), VP_FIGURE_ALWAYS},
    {"hfu", offsetof(vp_step_time, hfu), VP_FIGURE_ALWAYS},
    {"compute_s", offsetof(vp_step_time, compute_s), VP_FIGURE_ALWAYS},
    {"exposed_comm_s", offsetof(vp_step_time, exposed_comm_s), VP_FIGURE_ALWAYS},
    {"bubble_s", offsetof(vp_step_time, bubble_s), VP_FIGURE_ALWAYS},
    {"offload_s", offsetof(vp_step_time, offload_s), VP_FIGURE_ALWAYS},
    {NULL, 0, VP_FIGURE_ALWAYS},
};

/* The step time into the table on top: `time`, every field nil without a
 * GPU peak to time against. */
static void push_time(lua_State *L, const vp_step_time *t) {
    lua_createtable(L, 0, 14);
    for (const vp_lua_figure *f = vp_lua_time_figures; t->valid && f->name; f++) {
        lua_pushnumber(L, *(const double *)((const char *)t + f->offset));
        lua_setfield(L, -2, f->name);
    }
    lua_setfield(L, -2, "time");
}

static bool option(lua_State *L, int index, const char *key, bool fallback) {
    if (lua_isnoneornil(L, index)) return fallback;
    lua_getfield(L, index, key);
    bool v = lua_isnil(L, -1) ? fallback : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* NCCL's communicators, group by group (nccl.h), as a list into the table
 * on top's field nccl_groups. */
static void set_nccl_groups(lua_State *L, const vp_nccl *nccl) {
    lua_createtable(L, (int)nccl->n, 0); /* rank, groups */
    for (unsigned i = 0; i < nccl->n; i++) {
        const vp_nccl_group *g = &nccl->groups[i];
        lua_createtable(L, 0, 12); /* rank, groups, group */
        lua_pushstring(L, g->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, g->pattern);
        lua_setfield(L, -2, "pattern");
        const struct {
            const char *key;
            uint64_t value;
        } fields[] = {
            {"ranks", g->ranks},           {"local_ranks", g->local_ranks}, {"nodes", g->nodes},
            {"peers", g->peers},           {"channels", g->channels},       {"ring_bytes", g->ring_bytes},
            {"tree_bytes", g->tree_bytes}, {"nvls_bytes", g->nvls_bytes},   {"p2p_bytes", g->p2p_bytes},
            {"bytes", g->bytes},
        };
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) set_int(L, fields[f].key, fields[f].value);
        lua_rawseti(L, -2, (lua_Integer)i + 1); /* rank, groups */
    }
    lua_setfield(L, -2, "nccl_groups"); /* rank */
}

/* The whole-number figures of a rank, by the names estimate's result gives
 * them; `when`: the estimates that have the figure at all. The one list
 * both the result's tables and a sweep's rows in C (lua_row.c) read. */
const vp_lua_figure vp_lua_rank_figures[] = {
    {"params_bytes", offsetof(vp_rank_estimate, step.params_bytes), VP_FIGURE_ALWAYS},
    {"buffers_bytes", offsetof(vp_rank_estimate, step.buffers_bytes), VP_FIGURE_ALWAYS},
    {"grads_bytes", offsetof(vp_rank_estimate, step.grads_bytes), VP_FIGURE_ALWAYS},
    {"master_bytes", offsetof(vp_rank_estimate, step.master_bytes), VP_FIGURE_ALWAYS},
    {"optimizer_bytes", offsetof(vp_rank_estimate, step.optimizer_bytes), VP_FIGURE_ALWAYS},
    {"comm_bytes", offsetof(vp_rank_estimate, step.comm_bytes), VP_FIGURE_ALWAYS},
    {"host_bytes", offsetof(vp_rank_estimate, step.host_bytes), VP_FIGURE_ALWAYS},
    {"nvme_bytes", offsetof(vp_rank_estimate, step.nvme_bytes), VP_FIGURE_ALWAYS},
    {"activations_bytes", offsetof(vp_rank_estimate, step.activations_bytes), VP_FIGURE_ALWAYS},
    {"resident_bytes", offsetof(vp_rank_estimate, step.resident_bytes), VP_FIGURE_ALWAYS},
    {"peak_allocated_bytes", offsetof(vp_rank_estimate, peak_allocated), VP_FIGURE_ALWAYS},
    {"peak_reserved_bytes", offsetof(vp_rank_estimate, peak_reserved), VP_FIGURE_ALWAYS},
    {"peak_total_bytes", offsetof(vp_rank_estimate, peak_total), VP_FIGURE_ALWAYS},
    {"allocator_bytes", offsetof(vp_rank_estimate, allocator_bytes), VP_FIGURE_ALWAYS},
    {"cuda_context_bytes", offsetof(vp_rank_estimate, cuda_context_bytes), VP_FIGURE_ALWAYS},
    {"cublas_workspace_bytes", offsetof(vp_rank_estimate, cublas_workspace_bytes), VP_FIGURE_ALWAYS},
    {"nccl_bytes", offsetof(vp_rank_estimate, nccl_bytes), VP_FIGURE_ALWAYS},
    {"symm_mem_bytes", offsetof(vp_rank_estimate, symm_mem_bytes), VP_FIGURE_ALWAYS},
    {"runtime_bytes", offsetof(vp_rank_estimate, runtime_bytes), VP_FIGURE_ALWAYS},
    {"peak_unrounded_bytes", offsetof(vp_rank_estimate, peak_unrounded), VP_FIGURE_ALWAYS},
    {"peak_reserved_simulated_bytes", offsetof(vp_rank_estimate, peak_reserved_simulated), VP_FIGURE_SIMULATED},
    /* the whole run: loading, quantizing, wrapping, then the steps (docs/reserved.md) */
    {"peak_reserved_run_bytes", offsetof(vp_rank_estimate, peak_reserved_run), VP_FIGURE_RUN},
    {"reserved_at_start_bytes", offsetof(vp_rank_estimate, reserved_at_start), VP_FIGURE_RUN},
    /* under pipelining: the last stage's head and loss, of activations_bytes;
     * torch.distributed.pipelining's receive buffers, and one of them */
    {"head_activations_bytes", offsetof(vp_rank_estimate, step.head_activations_bytes), VP_FIGURE_PIPELINED},
    {"pp_buffers_bytes", offsetof(vp_rank_estimate, pp_buffers_bytes), VP_FIGURE_PIPELINED},
    {"boundary_bytes", offsetof(vp_rank_estimate, step.boundary_bytes), VP_FIGURE_PIPELINED},
    {"pp_outputs_bytes", offsetof(vp_rank_estimate, step.pp_outputs_bytes), VP_FIGURE_PIPELINED},
    /* the zero-bubble schedules' deferred weight passes */
    {"weight_pass_bytes", offsetof(vp_rank_estimate, step.weight_pass_bytes), VP_FIGURE_SPLIT_BACKWARD},
    {"pending_weight_bytes", offsetof(vp_rank_estimate, pending_weight_bytes), VP_FIGURE_SPLIT_BACKWARD},
    {NULL, 0, VP_FIGURE_ALWAYS},
};

bool vp_lua_rank_figure_present(const vp_lua_figure *f, const vp_rank_estimate *e, const vp_recipe *recipe) {
    switch (f->when) {
    case VP_FIGURE_SIMULATED: return e->has_simulated;
    case VP_FIGURE_RUN: return e->has_run;
    case VP_FIGURE_PIPELINED: return (recipe->pp ? recipe->pp : 1) > 1;
    case VP_FIGURE_SPLIT_BACKWARD: return vp_pp_splits_backward(recipe);
    default: return true;
    }
}

uint64_t vp_lua_rank_figure_value(const vp_lua_figure *f, const vp_rank_estimate *e) {
    return *(const uint64_t *)((const char *)e + f->offset);
}

/* One kind of rank's figures into the table on top. */
static void set_rank(lua_State *L, const vp_rank_estimate *e, const vp_recipe *recipe, bool has_gpu) {
    for (const vp_lua_figure *f = vp_lua_rank_figures; f->name; f++) {
        if (vp_lua_rank_figure_present(f, e, recipe)) set_int(L, f->name, vp_lua_rank_figure_value(f, e));
    }
    set_nccl_groups(L, &e->nccl);
    if (e->has_simulated) set_int(L, "simulated_steps", e->simulated_steps);
    set_int(L, "stage", e->stage);
    set_int(L, "first_layer", e->first_layer);
    set_int(L, "layers", e->layers);
    lua_pushnumber(L, e->in_flight);
    lua_setfield(L, -2, "in_flight");
    push_place(L, &e->peak.peak_place);
    push_breakdown(L, e->peak.peak_breakdown);
    lua_setfield(L, -2, "peak_breakdown");
    if (has_gpu) {
        lua_pushboolean(L, e->fits);
        lua_setfield(L, -2, "fits");
        lua_pushinteger(L, e->headroom);
        lua_setfield(L, -2, "headroom_bytes");
    }
}

/* Raises the message of a step that could not be evaluated. */
static int raise_status(lua_State *L, vp_step_status status, const vp_model *model, const vp_recipe *recipe) {
    switch (status) {
    case VP_STEP_OVERFLOW:
        return luaL_error(L, "sizes overflow: micro_batch x seq_len x the model's widths exceed 64-bit byte counts");
    case VP_STEP_NOMEM: return luaL_error(L, "not enough memory to evaluate the step");
    case VP_STEP_LIMIT:
        return luaL_error(L, "internal limit: one of the simulator's fixed tables ran out of room evaluating %s "
                             "(an engine limit, not the recipe's sizes): please report it with the command",
                          model->name);
    case VP_STEP_UNSUPPORTED:
        return luaL_error(L, "grads_set_to_none: false is not modelled with master weights or sharded gradients");
    case VP_STEP_LAYOUT: {
        const char *problem = vp_pipeline_problem(model, recipe);
        return luaL_error(L, "%s", problem ? problem : vp_step_layout_problem(model, recipe));
    }
    default: return luaL_error(L, "internal error: the step did not return to its resident state (%s)", model->name);
    }
}

void vp_lua_run_estimate(lua_State *L, int first, vp_sim_arrays *reuse, vp_lua_run *run) {
    int keys = first + 1, gpu = first + 2, options = first + 3;
    run->model = vp_lua_checkmodel(L, first);
    vp_recipe_defaults(&run->recipe);
    if (!lua_isnoneornil(L, keys)) vp_lua_read_recipe(L, keys, &run->recipe);
    vp_lua_check_recipe(L, &run->recipe);
    read_gpu(L, gpu, &run->gpu);
    context_of_gpu(L, keys, &run->gpu, &run->recipe);
    if (!lua_isnoneornil(L, options)) luaL_checktype(L, options, LUA_TTABLE);
    bool fold = option(L, options, "fold", true);
    run->timeline = option(L, options, "timeline", false);
    /* options.echo: the recipe keys the result's `recipe` holds (all when
     * absent): a sweep that shows none asks only for those it reads */
    run->echo = 0;
    if (!lua_isnoneornil(L, options)) {
        if (lua_getfield(L, options, "echo") == LUA_TNIL) lua_pop(L, 1);
        else if (lua_istable(L, -1)) run->echo = lua_gettop(L);
        else luaL_error(L, "options.echo: a list of recipe keys (got a %s)", luaL_typename(L, -1));
    }
    vp_model_resolve_recipe(run->model, &run->recipe);
    const char *stages = vp_pipeline_resolve(run->model, &run->recipe);
    if (stages) luaL_error(L, "%s", stages);
    vp_step_status status = vp_estimate_run(run->model, &run->recipe, &run->gpu, fold, run->timeline, reuse, &run->e);
    /* the caching allocator simulated beside (with allocator = simulated it already was) */
    if (status == VP_STEP_OK && option(L, options, "simulate_allocator", false)) {
        status = vp_estimate_simulate_allocator(run->model, &run->recipe, &run->gpu, &run->e);
        if (status != VP_STEP_OK) vp_estimate_free(&run->e);
    }
    /* vp_estimate_run freed what it had before returning */
    if (status != VP_STEP_OK) raise_status(L, status, run->model, &run->recipe);
}

static int l_estimate(lua_State *L) {
    /* the simulator's arrays, kept from one call to the next (the upvalue) */
    vp_lua_run run;
    vp_lua_run_estimate(L, 1, lua_touserdata(L, lua_upvalueindex(1)), &run);
    const vp_model *model = run.model;
    const vp_recipe *recipe = &run.recipe;
    bool timeline = run.timeline;
    vp_estimate *e = &run.e;
    /* copied into Lua before anything can raise again: the ranks with
     * their event logs (the estimate's memory is freed right after); the
     * first stage's log is the result's timeline */
    lua_createtable(L, (int)e->n_ranks, 0);
    for (unsigned i = 0; i < e->n_ranks; i++) {
        lua_createtable(L, 0, 33);
        set_rank(L, &e->ranks[i], recipe, e->has_gpu);
        if (timeline) {
            push_timeline(L, &e->ranks[i].events, recipe->device == VP_DEVICE_CPU);
            lua_setfield(L, -2, "timeline");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    int ranks_index = lua_gettop(L);
    vp_step_time time = vp_step_time_run(model, recipe, &run.gpu, e);
    vp_rank_estimate worst = e->ranks[e->worst];
    uint64_t params = worst.step.params, trainable = worst.step.trainable_params;
    unsigned per_stage = e->ranks_per_stage;
    bool has_gpu = e->has_gpu;
    vp_estimate_free(e);

    /* the result: the worst rank's figures at the top, every rank in `ranks` */
    lua_createtable(L, 0, 40);
    set_rank(L, &worst, recipe, has_gpu);
    set_int(L, "params", params);
    set_int(L, "trainable_params", trainable);
    if (vp_finetune_method_of(recipe)->adapts_linear) {
        char names[256];
        vp_lora_adapted_names(model, recipe, names, sizeof names);
        lua_pushstring(L, names);
        lua_setfield(L, -2, "lora_modules");
    }
    char saved[256];
    vp_finetune_saved_names(model, recipe, saved, sizeof saved);
    if (saved[0]) { /* modules_to_save as the model has them, a classifier's head included */
        lua_pushstring(L, saved);
        lua_setfield(L, -2, "saved_modules");
    }
    /* output_router_logits: the mixtures' load-balancing loss is computed */
    lua_pushboolean(L, model->facts.router_aux_loss);
    lua_setfield(L, -2, "load_balancing_loss");
    /* attention = sdpa: the kernel PyTorch runs (sdpa_backend resolved) */
    if (e->sdpa_kernel) {
        lua_pushstring(L, e->sdpa_kernel);
        lua_setfield(L, -2, "sdpa_kernel");
    }
    set_int(L, "ranks_per_stage", per_stage);
    push_time(L, &time);
    lua_pushvalue(L, ranks_index);
    lua_setfield(L, -2, "ranks");
    vp_lua_push_recipe_keys(L, recipe, run.echo);
    lua_setfield(L, -2, "recipe");
    if (timeline) {
        lua_rawgeti(L, ranks_index, 1);
        lua_getfield(L, -1, "timeline");
        lua_setfield(L, -3, "timeline");
        lua_pop(L, 1); /* the first rank */
    }
    return 1;
}

/* vramplan.check_recipe(keys [, partial]) -> the complete recipe (defaults
 * filled in), or an error naming the key; `partial` skips the checks of
 * combinations (a key checked on its own). */
static int l_check_recipe(lua_State *L) {
    vp_recipe recipe;
    vp_recipe_defaults(&recipe);
    vp_lua_read_recipe(L, 1, &recipe);
    if (!lua_toboolean(L, 2)) vp_lua_check_recipe(L, &recipe);
    vp_lua_push_recipe(L, &recipe);
    return 1;
}

static int l_arrays_gc(lua_State *L) {
    vp_sim_arrays_free(lua_touserdata(L, 1));
    return 0;
}

static const luaL_Reg functions[] = {
    {"check_recipe", l_check_recipe},
    {"recipe_keys", vp_lua_recipe_keys},
    {NULL, NULL},
};

/* Into the table on top; `estimate` and `estimate_row` hold the
 * simulator's arrays they keep between calls (a userdata, freed with the
 * Lua state). */
void vp_lua_open_estimate(lua_State *L) {
    luaL_setfuncs(L, functions, 0);
    vp_sim_arrays *arrays = lua_newuserdatauv(L, sizeof *arrays, 0);
    *arrays = (vp_sim_arrays){0};
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_arrays_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_pushcclosure(L, l_estimate, 1);
    lua_setfield(L, -3, "estimate");
    lua_pushcclosure(L, vp_lua_estimate_row, 1);
    lua_setfield(L, -2, "estimate_row");
    lua_pushcfunction(L, vp_lua_row_spec);
    lua_setfield(L, -2, "row_spec");
}
