/* lua_vramplan.c — the `vramplan` Lua module: one table that every binding
 * file adds its functions to. */
#include <lauxlib.h>
#include <lua.h>

#include "dtype.h"
#include "lua_vramplan.h"

/* vramplan.tensor_bytes(dtype, numel) -> bytes, scales included */
static int l_tensor_bytes(lua_State *L) {
    vp_dtype dtype = (vp_dtype)luaL_checkoption(L, 1, NULL, vp_dtype_names);
    lua_Integer numel = luaL_checkinteger(L, 2);
    luaL_argcheck(L, numel >= 0, 2, "element count must not be negative");
    uint64_t bytes;
    if (!vp_tensor_bytes(dtype, (uint64_t)numel, &bytes) || bytes > (uint64_t)LUA_MAXINTEGER)
        return luaL_error(L, "tensor_bytes: overflow");
    lua_pushinteger(L, (lua_Integer)bytes);
    return 1;
}

static const luaL_Reg functions[] = {
    {"tensor_bytes", l_tensor_bytes},
    {NULL, NULL},
};

/* The Lua half of the module (scripts/lib/vramplan/api.lua: models by name,
 * GPUs, sweeps) joins the table when package.path can find it; the C half
 * alone still loads (the core's own tests need nothing else). The table is
 * registered first, so that the Lua half's require("vramplan") gets it. */
static void open_lua_half(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);   /* mod loaded */
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "vramplan");
    lua_pop(L, 1);                                          /* mod */
    lua_getglobal(L, "package");                            /* mod package */
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_getfield(L, -1, "searchpath");                      /* mod package searchpath */
    lua_pushliteral(L, "vramplan.api");
    lua_getfield(L, -3, "path");                            /* mod package searchpath name path */
    int found = 0;
    if (lua_isfunction(L, -3) && lua_isstring(L, -1)) {
        lua_call(L, 2, 1);                                  /* mod package found|nil */
        found = lua_isstring(L, -1);
        lua_pop(L, 2);                                      /* mod */
    } else {
        lua_pop(L, 4);                                      /* mod */
    }
    if (!found) return;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "vramplan.api");
    lua_call(L, 1, 0);                                      /* mod */
}

int luaopen_vramplan(lua_State *L) {
    luaL_newlib(L, functions);
    vp_lua_open_model(L);
    vp_lua_open_estimate(L);
    vp_lua_open_sandbox(L);
    vp_lua_open_system(L);
    vp_lua_open_block(L);
    vp_lua_open_csv(L);
    lua_pushliteral(L, VP_VERSION);
    lua_setfield(L, -2, "version");
    open_lua_half(L);
    return 1;
}
