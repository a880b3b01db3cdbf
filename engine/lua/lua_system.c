/* lua_system.c — the few operating-system facts the sweep command needs and
 * standard Lua lacks: whether a stream is a terminal, how many CPUs are
 * online, a wall clock finer than os.time, this program's own path (to start workers), cutting a file's
 * partial last line and whether a path is a regular file (without loading LuaFileSystem, a shared library:
 * the command's start-up). Not offered to scripts: the sandbox sees none of it. */
#define _DEFAULT_SOURCE /* readlink, truncate, clock_gettime */
#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lua_vramplan.h"

/* vramplan.isatty(fd) -> boolean: fd 0, 1 or 2 */
static int l_isatty(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    luaL_argcheck(L, fd >= 0 && fd <= 2, 1, "fd must be 0, 1 or 2");
    lua_pushboolean(L, isatty((int)fd));
    return 1;
}

/* vramplan.cpu_count() -> the CPUs online (at least 1) */
static int l_cpu_count(lua_State *L) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    lua_pushinteger(L, n > 0 ? n : 1);
    return 1;
}

/* vramplan.clock() -> seconds on a monotonic wall clock (os.clock counts
 * this process's CPU time, which says nothing of workers) */
static int l_clock(lua_State *L) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    lua_pushnumber(L, (lua_Number)t.tv_sec + (lua_Number)t.tv_nsec * 1e-9);
    return 1;
}

/* vramplan.executable() -> the running program's path, or nil */
static int l_executable(lua_State *L) {
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return 0;
    lua_pushlstring(L, path, (size_t)n);
    return 1;
}

/* vramplan.truncate(path, size) -> true, or nil and the reason */
static int l_truncate(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer size = luaL_checkinteger(L, 2);
    luaL_argcheck(L, size >= 0, 2, "size must not be negative");
    if (truncate(path, (off_t)size) != 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* vramplan.is_file(path) -> whether path names a regular file (through
 * links), as lfs.attributes(path, "mode") == "file" */
static int l_is_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    lua_pushboolean(L, stat(path, &st) == 0 && S_ISREG(st.st_mode));
    return 1;
}

static const luaL_Reg functions[] = {
    {"is_file", l_is_file},
    {"isatty", l_isatty},
    {"cpu_count", l_cpu_count},
    {"clock", l_clock},
    {"executable", l_executable},
    {"truncate", l_truncate},
    {NULL, NULL},
};

void vp_lua_open_system(lua_State *L) { luaL_setfuncs(L, functions, 0); }
