/* fuzz_import.c — a libFuzzer target for the importers: each input is one
 * file for one of them (its first byte picks which; fuzz_import.lua says
 * how), read by the tree's own Lua library in one Lua state per process.
 * A Lua error is a refusal, which is fine; only a crash, a sanitizer
 * report, a hang or running out of memory is a finding.
 *
 * The Lua interpreter and the C modules it loads (lfs, lua-yaml) come from
 * Debian without instrumentation, so the Lua library's own coverage is fed
 * to libFuzzer through a line hook that counts (chunk, line) pairs in an
 * extra-counters section.
 *
 * One state serves every input; an input that leaves a change in the
 * library's tables for the next one is itself a finding (fuzz_import.lua),
 * so that every finding reproduces from its one input. VRAMPLAN_FUZZ_FRESH=1
 * makes a new state for each input instead (several times slower, and its
 * line coverage is noise since the chunks' addresses change). */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_vramplan.h"

#ifndef VRAMPLAN_TREE
#define VRAMPLAN_TREE "."
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* libFuzzer reads this section after each input as more edge counters. */
enum { LINE_COUNTERS = 1 << 16 };
__attribute__((section("__libfuzzer_extra_counters"), used)) static uint8_t line_counters[LINE_COUNTERS];

/* A chunk's source string lives as long as its function, and the library's
 * chunks live for the whole process: its address names the chunk. */
static void line_hook(lua_State *L, lua_Debug *ar) {
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t h = (uintptr_t)ar->source * 0x9E3779B97F4A7C15u ^ (uintptr_t)ar->currentline * 0xBF58476D1CE4E5B9u;
    uint8_t *c = &line_counters[(h >> 24) % LINE_COUNTERS];
    if (*c < 255) (*c)++;
}

typedef struct {
    lua_State *L;
    int run_ref;        /* the Lua half's function run(selector, text) */
    int fresh;          /* VRAMPLAN_FUZZ_FRESH=1: a new state for each input */
    const char *home;
    char dir[32];       /* the private folder, made once per process */
} fuzz_state;

static fuzz_state fuzz;

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(an error that is not a string)", 1);
    return 1;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_import: %s\n", what);
    abort();
}

/* Opens the state as main.c does, then loads the Lua half with the tree's
 * home and the private folder for the files the importers read by path. */
static void open_state(void) {
    lua_State *L = luaL_newstate();
    if (!L) fail("cannot create a Lua state");
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/scripts/lib/?.lua;%s/scripts/lib/?/init.lua;%s", fuzz.home, fuzz.home, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
    luaL_requiref(L, "vramplan", luaopen_vramplan, 0);
    lua_pop(L, 1);

    lua_pushcfunction(L, traceback);                                       /* tb */
    lua_pushfstring(L, "%s/tests/fuzz/fuzz_import.lua", fuzz.home);
    if (luaL_loadfilex(L, lua_tostring(L, -1), "t") != LUA_OK) fail(lua_tostring(L, -1));
    lua_remove(L, -2);                                                     /* tb chunk */
    lua_pushstring(L, fuzz.home);
    lua_pushstring(L, fuzz.dir);                                           /* tb chunk home dir */
    if (lua_pcall(L, 2, 1, 1) != LUA_OK || !lua_isfunction(L, -1)) fail(lua_tostring(L, -1));
    fuzz.run_ref = luaL_ref(L, LUA_REGISTRYINDEX);                         /* tb */
    lua_pop(L, 1);
    fuzz.L = L;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz.home = getenv("VRAMPLAN_HOME");
    if (!fuzz.home || !*fuzz.home) fuzz.home = VRAMPLAN_TREE;
    const char *fresh = getenv("VRAMPLAN_FUZZ_FRESH");
    fuzz.fresh = fresh && *fresh == '1';
    snprintf(fuzz.dir, sizeof fuzz.dir, "/tmp/vramplan-fuzz-XXXXXX");
    if (!mkdtemp(fuzz.dir)) fail("cannot make a private folder in /tmp");
    open_state();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (fuzz.fresh && !fuzz.L) open_state();
    lua_State *L = fuzz.L;
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, fuzz.run_ref);                       /* run */
    lua_pushinteger(L, data[0]);
    lua_pushlstring(L, (const char *)data + 1, size - 1);                  /* run selector text */
    lua_sethook(L, line_hook, LUA_MASKLINE, 0);
    /* run catches the importers' errors itself: an error here is the
     * harness's own, or one a Lua error handler could not report; a
     * string returned is a change this input left in the library's state */
    int status = lua_pcall(L, 2, 1, 0);
    lua_sethook(L, NULL, 0, 0);
    if (status == LUA_OK && lua_isstring(L, -1)) fail(lua_tostring(L, -1));
    lua_pop(L, 1);
    if (lua_gettop(L) != top) fail("the Lua stack is unbalanced after an input");
    if (fuzz.fresh) {
        lua_close(L);
        fuzz.L = NULL;
    } else {
        /* a step of collection keeps the heap of one input from being
         * blamed on the next */
        lua_gc(L, LUA_GCSTEP, 0);
    }
    return 0;
}
