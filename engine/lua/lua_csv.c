/* lua_csv.c — vramplan.csv_field(v) and vramplan.csv_line(values [, n]):
 * values as the fields of a CSV line (RFC 4180), the one place of the rules
 * scripts/lib/vramplan/csv.lua's writer uses: nil (and functions,
 * userdata) empty, integers exact, whole floats below 2^53 with one decimal,
 * other floats with the shortest of 15 or 17 significant digits that reads
 * back equal, text quoted (quotes doubled) when it holds a comma, a quote or
 * a line break. In C because a sweep writes one such line per variant. */
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_vramplan.h"

void vp_lua_push_csv_field(lua_State *L, int index) {
    char text[64];
    switch (lua_type(L, index)) {
    case LUA_TNONE:
    case LUA_TNIL:
    case LUA_TFUNCTION:
    case LUA_TUSERDATA:
    case LUA_TLIGHTUSERDATA: lua_pushliteral(L, ""); return;
    case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, index) ? "true" : "false"); return;
    case LUA_TNUMBER:
        if (lua_isinteger(L, index)) {
            snprintf(text, sizeof text, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, index));
        } else {
            double v = (double)lua_tonumber(L, index);
            if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* 2^53 */
                snprintf(text, sizeof text, "%.1f", v);
            } else {
                /* 0.05, not 0.050000000000000003 */
                snprintf(text, sizeof text, "%.15g", v);
                if (strtod(text, NULL) != v) snprintf(text, sizeof text, "%.17g", v);
            }
        }
        lua_pushstring(L, text);
        return;
    default: break;
    }
    size_t len;
    const char *s = luaL_tolstring(L, index, &len); /* as tostring: a string, or a table's __tostring */
    bool plain = true;
    for (size_t i = 0; i < len && plain; i++) plain = s[i] != ',' && s[i] != '"' && s[i] != '\r' && s[i] != '\n';
    if (plain) return;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '"');
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"') luaL_addchar(&b, '"');
        luaL_addchar(&b, s[i]);
    }
    luaL_addchar(&b, '"');
    luaL_pushresult(&b);
    lua_remove(L, -2); /* the unquoted text */
}

static int l_csv_field(lua_State *L) {
    vp_lua_push_csv_field(L, 1);
    return 1;
}

/* csv_line(values [, n]): values[1..n] (n: #values) joined with commas,
 * without the line's end. */
static int l_csv_line(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_opt(L, luaL_checkinteger, 2, luaL_len(L, 1));
    if (n < 0 || n > 100000) return luaL_argerror(L, 2, "a field count from 0 to 100000");
    if (n == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    luaL_checkstack(L, (int)(2 * n + 4), "too many fields");
    lua_settop(L, 1);
    for (lua_Integer i = 1; i <= n; i++) {
        if (i > 1) lua_pushliteral(L, ",");
        lua_geti(L, 1, i);
        vp_lua_push_csv_field(L, -1);
        lua_remove(L, -2); /* the value */
    }
    lua_concat(L, (int)(2 * n - 1));
    return 1;
}

static const luaL_Reg functions[] = {
    {"csv_field", l_csv_field},
    {"csv_line", l_csv_line},
    {NULL, NULL},
};

void vp_lua_open_csv(lua_State *L) { luaL_setfuncs(L, functions, 0); }
