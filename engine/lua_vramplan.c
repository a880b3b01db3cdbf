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

int luaopen_vramplan(lua_State *L) {
    luaL_newlib(L, functions);
    vp_lua_open_model(L);
    vp_lua_open_estimate(L);
    vp_lua_open_sandbox(L);
    lua_pushliteral(L, VP_VERSION);
    lua_setfield(L, -2, "version");
    return 1;
}
