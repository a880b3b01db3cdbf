/* lua_row.c — a sweep's row in C: vramplan.row_spec(columns [, "values"])
 * says once what each column of a sweep's rows holds, and
 * vramplan.estimate_row(spec, model, keys, gpu, options, index, values,
 * statics) runs one estimate and returns its row (and the recipe keys
 * options.echo asks for), without building estimate's result tables: the
 * figures are read from the engine's answer by the names estimate gives
 * them (lua_estimate.h's lists, the one place of those names). The row is
 * a CSV line, formatted as vramplan.csv_line formats it, or with "values"
 * the list of the columns' values (nil where a column has none) for the
 * caller to format (JSON lines, the Lua API's rows). A sweep's Lua side
 * (scripts/lib/vramplan/sweep.lua) decides which columns it may leave to
 * C; anything else is its own path. */
#include <lauxlib.h>
#include <lua.h>
#include <string.h>

#include "lua_estimate.h"
#include "lua_vramplan.h"

#define ROW_SPEC "vramplan.row_spec"

typedef enum {
    COLUMN_INDEX,       /* the variant's number (argument `index`) */
    COLUMN_VALUE,       /* values[key]: a varied key */
    COLUMN_STATIC,      /* statics[key]: what the model and the GPU say, the same for every estimate of them */
    COLUMN_EMPTY,       /* error: empty in a row that has figures */
    COLUMN_PARAMS,      /* model.params */
    COLUMN_TRAINABLE,   /* model.trainable_params */
    COLUMN_RANK_FIGURE, /* per_gpu.<a vp_lua_rank_figures name> */
    COLUMN_PEAK_PHASE,  /* per_gpu.peak_phase */
    COLUMN_PEAK_OP,     /* per_gpu.peak_op */
    COLUMN_PEAK_LAYER,  /* per_gpu.peak_layer */
    COLUMN_FITS,        /* fits */
    COLUMN_HEADROOM,    /* headroom_bytes */
    COLUMN_TIME,        /* time.<a vp_lua_time_figures name> */
} column_kind;

typedef struct {
    column_kind kind;
    const vp_lua_figure *figure; /* COLUMN_RANK_FIGURE, COLUMN_TIME */
    int key; /* COLUMN_VALUE, COLUMN_STATIC: the key's reference in the spec's uservalue */
} column;

typedef struct {
    unsigned n;
    bool needs_time;
    bool values;      /* the row as a list of values, not a CSV line */
    column columns[]; /* n of them */
} row_spec;

static const struct {
    const char *name;
    column_kind kind;
} named_columns[] = {
    {"model.params", COLUMN_PARAMS},      {"model.trainable_params", COLUMN_TRAINABLE},
    {"per_gpu.peak_phase", COLUMN_PEAK_PHASE}, {"per_gpu.peak_op", COLUMN_PEAK_OP},
    {"per_gpu.peak_layer", COLUMN_PEAK_LAYER}, {"fits", COLUMN_FITS},
    {"headroom_bytes", COLUMN_HEADROOM},
};

/* The figure of `list` named `name`, or NULL. */
static const vp_lua_figure *find_figure(const vp_lua_figure *list, const char *name) {
    for (const vp_lua_figure *f = list; f->name; f++)
        if (strcmp(name, f->name) == 0) return f;
    return NULL;
}

/* The figure `name` names (estimate's result flattened with dots), or false. */
static bool figure_column(const char *name, column *c) {
    for (size_t i = 0; i < sizeof named_columns / sizeof named_columns[0]; i++) {
        if (strcmp(name, named_columns[i].name) == 0) {
            c->kind = named_columns[i].kind;
            return true;
        }
    }
    if (strncmp(name, "per_gpu.", 8) == 0 && (c->figure = find_figure(vp_lua_rank_figures, name + 8))) {
        c->kind = COLUMN_RANK_FIGURE;
        return true;
    }
    if (strncmp(name, "time.", 5) == 0 && (c->figure = find_figure(vp_lua_time_figures, name + 5))) {
        c->kind = COLUMN_TIME;
        return true;
    }
    return false;
}

/* vramplan.row_spec(columns [, form]) -> spec, or nil and the first column
 * C cannot fill. columns: a list, each "variant", "error", "value:KEY" (the
 * variant's values[KEY]), "static:NAME" (statics[NAME]) or a figure's
 * dotted name; form: "csv" (the default) or "values". */
int vp_lua_row_spec(lua_State *L) {
    static const char *const forms[] = {"csv", "values", NULL};
    luaL_checktype(L, 1, LUA_TTABLE);
    bool values = luaL_checkoption(L, 2, "csv", forms) == 1;
    lua_settop(L, 1);
    lua_Integer n = luaL_len(L, 1);
    if (n < 1 || n > 10000) return luaL_argerror(L, 1, "from 1 to 10000 columns");
    row_spec *spec = lua_newuserdatauv(L, sizeof *spec + (size_t)n * sizeof(column), 1);
    spec->n = (unsigned)n;
    spec->needs_time = false;
    spec->values = values;
    lua_createtable(L, (int)n, 0); /* the keys, referenced by the columns */
    for (lua_Integer i = 1; i <= n; i++) {
        column *c = &spec->columns[i - 1];
        *c = (column){0};
        if (lua_geti(L, 1, i) != LUA_TSTRING) return luaL_error(L, "row_spec: column %d is not a string", (int)i);
        const char *name = lua_tostring(L, -1);
        if (strcmp(name, "variant") == 0) c->kind = COLUMN_INDEX;
        else if (strcmp(name, "error") == 0) c->kind = COLUMN_EMPTY;
        else if (strncmp(name, "value:", 6) == 0 || strncmp(name, "static:", 7) == 0) {
            bool value = name[0] == 'v';
            c->kind = value ? COLUMN_VALUE : COLUMN_STATIC;
            lua_pushstring(L, name + (value ? 6 : 7));
            c->key = (int)i;
            lua_rawseti(L, -3, i);
        } else if (!figure_column(name, c)) {
            lua_pushnil(L);
            lua_pushvalue(L, -2);
            return 2;
        }
        spec->needs_time = spec->needs_time || c->kind == COLUMN_TIME;
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, -2, 1);
    luaL_newmetatable(L, ROW_SPEC); /* made by the first spec, found by the others */
    lua_setmetatable(L, -2);
    return 1;
}

/* What a row reads of one estimate: its worst rank (copied out before the
 * estimate is freed), the recipe it ran, the step time. */
typedef struct {
    const vp_rank_estimate *worst;
    const vp_recipe *recipe;
    bool has_gpu;
    vp_step_time time;
} answer;

/* Pushes column c's value (nil where the result has none). */
static void push_value(lua_State *L, const column *c, const answer *a, int keys, int index, int values, int statics) {
    const vp_rank_estimate *w = a->worst;
    switch (c->kind) {
    case COLUMN_INDEX: lua_pushvalue(L, index); return;
    case COLUMN_VALUE:
    case COLUMN_STATIC: {
        lua_rawgeti(L, keys, c->key);
        lua_gettable(L, c->kind == COLUMN_VALUE ? values : statics);
        return;
    }
    case COLUMN_EMPTY: lua_pushnil(L); return;
    case COLUMN_PARAMS: lua_pushinteger(L, (lua_Integer)w->step.params); return;
    case COLUMN_TRAINABLE: lua_pushinteger(L, (lua_Integer)w->step.trainable_params); return;
    case COLUMN_RANK_FIGURE:
        if (vp_lua_rank_figure_present(c->figure, w, a->recipe))
            lua_pushinteger(L, (lua_Integer)vp_lua_rank_figure_value(c->figure, w));
        else lua_pushnil(L);
        return;
    case COLUMN_PEAK_PHASE: lua_pushstring(L, vp_phase_names[w->peak.peak_place.phase]); return;
    case COLUMN_PEAK_OP: lua_pushstring(L, w->peak.peak_place.op ? w->peak.peak_place.op : ""); return;
    case COLUMN_PEAK_LAYER:
        if (w->peak.peak_place.layer >= 0) lua_pushinteger(L, w->peak.peak_place.layer);
        else lua_pushnil(L);
        return;
    case COLUMN_FITS:
        if (a->has_gpu) lua_pushboolean(L, w->fits);
        else lua_pushnil(L);
        return;
    case COLUMN_HEADROOM:
        if (a->has_gpu) lua_pushinteger(L, w->headroom);
        else lua_pushnil(L);
        return;
    case COLUMN_TIME:
        if (a->has_gpu && a->time.valid)
            lua_pushnumber(L, *(const double *)((const char *)&a->time + c->figure->offset));
        else lua_pushnil(L);
        return;
    }
}

/* vramplan.estimate_row(spec, model, keys, gpu, options, index, values,
 * statics) -> the row's CSV line (no line end) or its list of values, and
 * the recipe echo (the keys options.echo lists). Raises as
 * vramplan.estimate does. */
int vp_lua_estimate_row(lua_State *L) {
    row_spec *spec = luaL_checkudata(L, 1, ROW_SPEC);
    enum { INDEX = 6, VALUES = 7, STATICS = 8 };
    luaL_checktype(L, VALUES, LUA_TTABLE);
    luaL_checktype(L, STATICS, LUA_TTABLE);
    lua_settop(L, STATICS);
    vp_lua_run run;
    vp_lua_run_estimate(L, 2, lua_touserdata(L, lua_upvalueindex(1)), &run);
    vp_rank_estimate worst = run.e.ranks[run.e.worst];
    answer a;
    a.worst = &worst;
    a.recipe = &run.recipe;
    a.has_gpu = run.e.has_gpu;
    a.time = (vp_step_time){0};
    if (spec->needs_time) a.time = vp_step_time_run(run.model, &run.recipe, &run.gpu, &run.e);
    vp_estimate_free(&run.e); /* worst's event log with it: a row reads none */

    lua_getiuservalue(L, 1, 1); /* the columns' keys */
    int keys = lua_gettop(L);
    if (spec->values) {
        lua_createtable(L, (int)spec->n, 0);
        for (unsigned i = 0; i < spec->n; i++) {
            push_value(L, &spec->columns[i], &a, keys, INDEX, VALUES, STATICS);
            lua_rawseti(L, -2, (lua_Integer)i + 1); /* (nil: a hole) */
        }
        vp_lua_push_recipe_keys(L, &run.recipe, run.echo);
        return 2;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (unsigned i = 0; i < spec->n; i++) {
        if (i) luaL_addchar(&b, ',');
        push_value(L, &spec->columns[i], &a, keys, INDEX, VALUES, STATICS);
        vp_lua_push_csv_field(L, -1);
        lua_remove(L, -2); /* the value */
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    vp_lua_push_recipe_keys(L, &run.recipe, run.echo);
    return 2;
}
