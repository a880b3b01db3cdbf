/* lua_recipe.c — recipe keys read from a script's table or from --set
 * strings, the resolved recipe pushed back, and the keys listed: each by
 * the one declaration of the key (recipe_keys.c). */
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "framework.h"
#include "lua_vramplan.h"
#include "optimizer.h"
#include "recipe_keys.h"
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

/* An option's index among the key's choices (a static list or a
 * registry), or an error listing them with the closest guess. */
static unsigned read_option(lua_State *L, const vp_recipe_key *key) {
    const char *k = key->name;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    unsigned n = 0;
    for (const char *name; (name = vp_recipe_key_choice(key, n)); n++)
        if (s && strcmp(name, s) == 0) return n;
    /* the names in Lua-owned memory: nothing to free when an error unwinds */
    const char **names = lua_newuserdatauv(L, (n + 1) * sizeof *names, 0);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (unsigned i = 0; i < n; i++) {
        names[i] = vp_recipe_key_choice(key, i);
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, names[i]);
    }
    names[n] = NULL;
    luaL_pushresult(&b);
    const char *choices = lua_tostring(L, -1);
    const char *guess = s ? vp_lua_suggest(s, names, n) : NULL;
    if (guess) recipe_error(L, "%s: '%s' is not one of %s (did you mean '%s'?)", k, s, choices, guess);
    /* its own statement: shown pushes, so it must not share an argument
     * list with a stack-relative read */
    const char *given = shown(L, -3);
    recipe_error(L, "%s: must be one of %s (got %s)", k, choices, given);
    return 0;
}

/* Reads the value on top of the stack into the recipe, as the key's kind
 * reads it; raises the key's error otherwise. */
static void read_key(lua_State *L, vp_recipe *recipe, const vp_recipe_key *key) {
    switch (key->kind) {
    case VP_KEY_UINT:
    case VP_KEY_U64:
        vp_recipe_key_set_integer(recipe, key, read_int(L, key->name, (lua_Integer)key->min, (lua_Integer)key->max));
        break;
    case VP_KEY_NUMBER:
    case VP_KEY_ELEMENTS: vp_recipe_key_set_number(recipe, key, read_number(L, key->name, key->min, key->max)); break;
    case VP_KEY_BOOL:
    case VP_KEY_TRISTATE: vp_recipe_key_set_bool(recipe, key, read_bool(L, key->name)); break;
    case VP_KEY_OPTION: vp_recipe_key_set_option(recipe, key, read_option(L, key)); break;
    case VP_KEY_TEXT: {
        const char *text = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        char message[1024];
        bool ok = key->parse_text(recipe, key->name, text, shown(L, -1), message, sizeof message);
        lua_pop(L, 1); /* the shown value */
        if (!ok) recipe_error(L, "%s", message);
        break;
    }
    }
}

static const char **key_names(lua_State *L) {
    unsigned n = vp_recipe_key_count();
    const char **names = lua_newuserdatauv(L, n * sizeof *names, 0);
    for (unsigned i = 0; i < n; i++) names[i] = vp_recipe_key_at(i)->name;
    return names;
}

/* Pushes the table name -> declaration index (from 0) of every recipe key:
 * made once per Lua state, kept in its registry. */
#define KEY_INDEX "vramplan.recipe_key_index"
static void push_key_index(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, KEY_INDEX) == LUA_TTABLE) return;
    lua_pop(L, 1);
    unsigned n = vp_recipe_key_count();
    lua_createtable(L, 0, (int)n);
    for (unsigned i = 0; i < n; i++) {
        lua_pushinteger(L, i);
        lua_setfield(L, -2, vp_recipe_key_at(i)->name);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, KEY_INDEX);
}

/* The declaration index of the recipe key named by the value at `name`,
 * looked up in the index at `keys` (push_key_index's), or -1. */
static int key_named(lua_State *L, int keys, int name) {
    lua_pushvalue(L, name);
    int i = lua_rawget(L, keys) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : -1;
    lua_pop(L, 1);
    return i;
}

void vp_lua_read_recipe(lua_State *L, int index, vp_recipe *recipe) {
    index = lua_absindex(L, index);
    luaL_checktype(L, index, LUA_TTABLE);
    /* every name must be a key: an unknown one is refused before any is read */
    bool given[VP_RECIPE_KEYS_MAX] = {false};
    push_key_index(L);
    int names = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, index)) { /* key value */
        if (lua_type(L, -2) != LUA_TSTRING) recipe_error(L, "recipe keys are names (found a %s key)", luaL_typename(L, -2));
        int i = key_named(L, names, lua_absindex(L, -2));
        if (i < 0) {
            const char *name = lua_tostring(L, -2);
            const char *guess = vp_lua_suggest(name, key_names(L), vp_recipe_key_count());
            if (guess) recipe_error(L, "unknown recipe key '%s' (did you mean '%s'?)", name, guess);
            recipe_error(L, "unknown recipe key '%s'", name);
        }
        given[i] = true;
        lua_pop(L, 1); /* key */
    }
    lua_pop(L, 1); /* the index */
    /* then read in the declaration's order, never the table's (which changes
     * from run to run): a key that implies another's value (op-selective sets
     * use_reentrant = false) is declared before it, so the other, when given
     * too, has the last word. A table with a metatable may answer for keys
     * it does not hold: every key is asked of it. */
    bool every = lua_getmetatable(L, index);
    if (every) lua_pop(L, 1);
    unsigned n = vp_recipe_key_count();
    for (unsigned i = 0; i < n; i++) {
        if (!given[i] && !every) continue;
        const vp_recipe_key *key = vp_recipe_key_at(i);
        if (lua_getfield(L, index, key->name) != LUA_TNIL) read_key(L, recipe, key);
        lua_pop(L, 1); /* the value */
    }
}

void vp_lua_check_recipe(lua_State *L, const vp_recipe *recipe) {
    const char *problem = vp_step_layout_problem(NULL, recipe);
    if (!problem) problem = vp_pipeline_problem(NULL, recipe);
    if (!problem) problem = vp_recipe_problem(recipe);
    if (problem) recipe_error(L, "%s", problem);
    if (vp_precision_is_mixed(recipe->precision) && !recipe->grads_set_to_none)
        recipe_error(L, "grads_set_to_none: false is not modelled with mixed-* precision (the master-weight step frees the 16-bit gradients)");
    if ((vp_framework_of(recipe)->bucketed_grads || recipe->ddp_bucket_view) && !recipe->grads_set_to_none)
        recipe_error(L, "grads_set_to_none: false is not modelled with sharded or bucketed gradients");
}

/* Pushes a key's value; false (nothing pushed) when it is hidden. */
static bool push_value(lua_State *L, const vp_key_value *v) {
    switch (v->kind) {
    case VP_VALUE_HIDDEN: return false;
    case VP_VALUE_INTEGER: lua_pushinteger(L, (lua_Integer)v->integer); break;
    case VP_VALUE_NUMBER: lua_pushnumber(L, v->number); break;
    case VP_VALUE_BOOL: lua_pushboolean(L, v->boolean); break;
    case VP_VALUE_STRING: lua_pushstring(L, v->string); break;
    }
    return true;
}

static void set_key(lua_State *L, const vp_recipe *resolved, const vp_recipe_key *key) {
    vp_key_value v;
    vp_recipe_key_value(resolved, key, &v);
    if (push_value(L, &v)) lua_setfield(L, -2, key->name);
}

void vp_lua_push_recipe(lua_State *L, const vp_recipe *given) { vp_lua_push_recipe_keys(L, given, 0); }

void vp_lua_push_recipe_keys(lua_State *L, const vp_recipe *given, int names) {
    vp_recipe resolved = *given;
    vp_recipe_resolve(&resolved);
    if (!names) {
        unsigned n = vp_recipe_key_count();
        lua_createtable(L, 0, (int)n);
        for (unsigned i = 0; i < n; i++) set_key(L, &resolved, vp_recipe_key_at(i));
        return;
    }
    names = lua_absindex(L, names);
    lua_Integer n = luaL_len(L, names);
    push_key_index(L);
    int index = lua_gettop(L);
    lua_createtable(L, 0, (int)(n > 0 && n < 1000 ? n : 0));
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, names, i); /* name */
        int k = key_named(L, index, lua_gettop(L));
        const vp_recipe_key *key = k < 0 ? NULL : vp_recipe_key_at((unsigned)k);
        if (!key) {
            const char *name = lua_tostring(L, -1);
            recipe_error(L, "echo: '%s' is not a recipe key", name ? name : luaL_typename(L, -1));
        }
        lua_pop(L, 1);
        set_key(L, &resolved, key);
    }
    lua_remove(L, index);
}

/* vramplan.recipe_keys() -> { {name, doc, type, default?, choices?}, ... } in
 * the declaration's order. */
int vp_lua_recipe_keys(lua_State *L) {
    static const char *const kind_names[] = {"int", "int", "number", "int", "bool", "bool", "option", "text"};
    unsigned n = vp_recipe_key_count();
    lua_createtable(L, (int)n, 0);
    for (unsigned i = 0; i < n; i++) {
        const vp_recipe_key *key = vp_recipe_key_at(i);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, key->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, key->doc);
        lua_setfield(L, -2, "doc");
        lua_pushstring(L, kind_names[key->kind]);
        lua_setfield(L, -2, "type");
        vp_key_value fallback;
        vp_recipe_key_default(key, &fallback);
        if (push_value(L, &fallback)) lua_setfield(L, -2, "default");
        if (key->kind == VP_KEY_OPTION) {
            lua_newtable(L);
            const char *name;
            for (unsigned j = 0; (name = vp_recipe_key_choice(key, j)); j++) {
                lua_pushstring(L, name);
                lua_rawseti(L, -2, (lua_Integer)j + 1);
            }
            lua_setfield(L, -2, "choices");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}
