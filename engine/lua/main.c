/* main.c — the vramplan command: a Lua state that runs the command-line
 * script (scripts/lib/vramplan/cli.lua) under a protected call. */
#define _DEFAULT_SOURCE /* realpath, readlink */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedded.h"
#include "lua_vramplan.h"

static int file_exists(const char *dir, const char *rel) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, rel) >= (int)sizeof path) return 0;
    return access(path, R_OK) == 0;
}

/* Where models/, scripts/ and hardware/ are: $VRAMPLAN_HOME, the tree the
 * binary was built in (build/..), or an installation (bin/../share/vramplan). */
static int find_home(char *home, size_t size) {
    const char *marker = "scripts/lib/vramplan/cli.lua";
    const char *env = getenv("VRAMPLAN_HOME");
    if (env && *env) {
        snprintf(home, size, "%s", env);
        return file_exists(home, marker);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    const char *candidates[] = {"%s/..", "%s/../share/vramplan"};
    for (unsigned i = 0; i < 2; i++) {
        char candidate[PATH_MAX];
        snprintf(candidate, sizeof candidate, candidates[i], exe);
        if (file_exists(candidate, marker) && realpath(candidate, home) && strlen(home) < size) return 1;
    }
    return 0;
}

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* pmain(argc, argv): stack holds two light userdata; returns the exit code. */
static int pmain(lua_State *L) {
    int argc = (int)(intptr_t)lua_touserdata(L, 1);
    char **argv = lua_touserdata(L, 2);
    char home[PATH_MAX];
    if (!find_home(home, sizeof home))
        return luaL_error(L, "cannot find vramplan's scripts (set VRAMPLAN_HOME to the folder holding scripts/)");
    luaL_openlibs(L);
    /* package.path gets the tree's Lua library first: the module's Lua half
     * is loaded from it when the module opens */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/scripts/lib/?.lua;%s/scripts/lib/?/init.lua;%s", home, home, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
    vp_embedded_install(L);
    luaL_requiref(L, "vramplan", luaopen_vramplan, 0);
    lua_pop(L, 1);

    lua_pushcfunction(L, traceback);                 /* tb */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "vramplan.cli");
    lua_call(L, 1, 1);                               /* tb cli */
    lua_getfield(L, -1, "main");                     /* tb cli main */
    lua_createtable(L, argc, 0);                     /* tb cli main args */
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_pushstring(L, home);                         /* tb cli main args home */
    if (lua_pcall(L, 2, 1, 1) != LUA_OK) return lua_error(L);
    return 1;
}

int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "vramplan: cannot create a Lua state\n");
        return 70;
    }
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, (void *)(intptr_t)argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int code;
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "vramplan: %s\n", msg ? msg : "(error without a message)");
        code = 70;
    } else {
        code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
    }
    lua_close(L);
    return code;
}
