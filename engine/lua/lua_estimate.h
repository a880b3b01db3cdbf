/* lua_estimate.h — what vramplan.estimate (lua_estimate.c) shares with a
 * sweep's rows in C (lua_row.c): one run of the engine from the Lua
 * arguments, and the result's figures by the names estimate gives them. */
#ifndef VP_LUA_ESTIMATE_H
#define VP_LUA_ESTIMATE_H

#include <lua.h>
#include <stddef.h>

#include "estimate.h"
#include "steptime.h"

/* One estimate's inputs and its answer. */
typedef struct {
    vp_model *model;
    vp_recipe recipe;
    vp_gpu gpu;
    bool timeline;      /* options.timeline: the event logs kept */
    int echo;           /* stack index of options.echo (the recipe keys to echo), 0: all */
    vp_estimate e;      /* the caller's to free (vp_estimate_free) */
} vp_lua_run;

/* Reads (model, keys, gpu, options) at stack indices first .. first + 3 and
 * runs the engine on them, with the simulator's arrays `reuse`; raises, as
 * vramplan.estimate does, when the recipe or the step cannot be evaluated
 * (nothing is left to free then). */
void vp_lua_run_estimate(lua_State *L, int first, vp_sim_arrays *reuse, vp_lua_run *run);

/* Which estimates have a figure at all. */
typedef enum {
    VP_FIGURE_ALWAYS,
    VP_FIGURE_SIMULATED,      /* the caching allocator simulated beside */
    VP_FIGURE_RUN,            /* ... over the whole run */
    VP_FIGURE_PIPELINED,      /* pp > 1 */
    VP_FIGURE_SPLIT_BACKWARD, /* a zero-bubble schedule's deferred weight passes */
} vp_figure_when;

/* A figure of estimate's result by its name: a value at `offset` in the
 * struct its list reads (a rank's uint64_t in vp_rank_estimate, the step
 * time's double in vp_step_time); `when`: the estimates that have it. */
typedef struct {
    const char *name;
    size_t offset;
    vp_figure_when when;
} vp_lua_figure;

/* Every rank figure (whole numbers), ended by a NULL name. */
extern const vp_lua_figure vp_lua_rank_figures[];
bool vp_lua_rank_figure_present(const vp_lua_figure *f, const vp_rank_estimate *e, const vp_recipe *recipe);
uint64_t vp_lua_rank_figure_value(const vp_lua_figure *f, const vp_rank_estimate *e);

/* The step time's figures (doubles), ended by a NULL name; each is there
 * only when the time is valid. */
extern const vp_lua_figure vp_lua_time_figures[];

/* vramplan.row_spec and vramplan.estimate_row (lua_row.c); estimate_row's
 * upvalue 1 is the simulator's arrays, as estimate's. */
int vp_lua_row_spec(lua_State *L);
int vp_lua_estimate_row(lua_State *L);

#endif
