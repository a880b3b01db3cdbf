/* lua_sandbox.c — running a shared script: text only (never bytecode), in
 * an environment the caller builds, with a budget of instructions and of
 * memory, and errors that name the script's file and line. */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "lua_vramplan.h"

enum { HOOK_EVERY = 1000, MAX_SCRIPT_BYTES = 4 << 20 };
/* Generous for any description (a model script runs in well under a
 * million instructions) yet a second or two of CPU at most. */
#define DEFAULT_INSTRUCTIONS 200000000
#define DEFAULT_MEMORY (512 << 20)

/* A registry slot holds the instructions left, so that nothing global in C
 * changes and two states never share a budget. */
static const char budget_key = 'b';
static const char cap_key = 'c';
/* the string library as scripts see it, and as the library was */
static const char script_string_key = 's';
static const char library_string_key = 'l';

/* Pushes "file:line: " for the innermost running function that came from a
 * script this file loaded (chunk names "=path"), or "" when none runs. */
static void where_in_script(lua_State *L) {
    lua_Debug ar;
    for (int level = 0; lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.source[0] == '=' && ar.currentline > 0) {
            lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
    lua_pushliteral(L, "");
}

/* Raises `msg` at the script's line (a hook's own level is not the script). */
static int script_error(lua_State *L, const char *msg) {
    where_in_script(L);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return lua_error(L);
}

/* The memory cap wraps whatever allocator the state has. */
typedef struct {
    lua_Alloc inner;
    void *inner_ud;
    size_t used;
    size_t soft_limit; /* checked by the hook, which can name the line */
    size_t limit;      /* refused by the allocator: twice the budget */
    int budget_mib;
    int refused;
    int spent; /* the soft limit was passed once: it stays spent */
} capped_alloc;

static capped_alloc *current_cap(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &cap_key);
    capped_alloc *cap = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return cap;
}

/* Whether the running budgeted call has spent its instructions or memory.
 * A spent budget stays spent: the hook raises again at every count and
 * the sandbox's pcall passes the error on, so that a script catching the
 * error (while true do pcall(f) end) cannot run on. */
static int budget_spent(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    int over = lua_isinteger(L, -1) && lua_tointeger(L, -1) < 0;
    lua_pop(L, 1);
    const capped_alloc *cap = current_cap(L);
    return over || (cap && (cap->spent || cap->refused));
}

static int raise_spent(lua_State *L) {
    const capped_alloc *cap = current_cap(L);
    if (cap && (cap->spent || cap->refused)) {
        lua_pushfstring(L, "script exceeded its memory budget (%d MiB)", cap->budget_mib);
        return script_error(L, lua_tostring(L, -1));
    }
    return script_error(L, "script exceeded its instruction budget (does it loop forever?)");
}

static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    lua_Integer left = lua_tointeger(L, -1) - HOOK_EVERY;
    lua_pop(L, 1);
    if (left < 0) left = -1; /* spent, and no wrap-around however long a script catches it */
    lua_pushinteger(L, left);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
    capped_alloc *cap = current_cap(L);
    if (cap && cap->used > cap->soft_limit) cap->spent = 1;
    if (budget_spent(L)) raise_spent(L);
}

/* The sandbox's pcall(f, ...) and xpcall(f, handler, ...): the standard
 * ones, except that an error of a spent budget is passed on, not caught. */
static int l_script_pcall(lua_State *L) {
    luaL_checkany(L, 1);
    int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    if (status != LUA_OK && budget_spent(L)) return raise_spent(L);
    lua_pushboolean(L, status == LUA_OK);
    lua_insert(L, 1);                                             /* ok results... | false error */
    return lua_gettop(L);
}

static int l_script_xpcall(lua_State *L) {
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 1);
    lua_copy(L, 2, 1);
    lua_replace(L, 2);                                            /* handler f args... */
    int status = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 1);
    if (status != LUA_OK && budget_spent(L)) return raise_spent(L);
    lua_pushboolean(L, status == LUA_OK);
    lua_replace(L, 1);                                            /* ok results... | false error */
    return lua_gettop(L);
}

static void *capped(void *ud, void *ptr, size_t osize, size_t nsize) {
    capped_alloc *c = ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && c->used + (nsize - old) > c->limit) {
        c->refused = 1;
        return NULL;
    }
    void *p = c->inner(c->inner_ud, ptr, osize, nsize);
    if (p || nsize == 0) c->used = c->used - old + nsize;
    return p;
}

/* Lua's matcher backtracks: a pattern with k repetitions (* + - ?) can take
 * about n^(k+1) steps on a subject of n bytes, all inside one C call where
 * the instruction hook never runs, so a script's find, match, gmatch and
 * gsub refuse a pattern whose (n + 1)^(k + 1) passes this bound. */
#define MAX_MATCH_STEPS 1e8

/* The repetitions of a pattern, outside its sets ([...], where '-' is a
 * range) and escapes. */
static int pattern_repetitions(const char *p, size_t len) {
    int k = 0;
    for (size_t i = 0; i < len;) {
        char c = p[i];
        if (c == '%') {
            i += 2;
        } else if (c == '[') {
            i++;
            if (i < len && p[i] == '^') i++;
            do { /* a ']' first in a set is one of its characters */
                if (i < len && p[i] == '%') i++;
                i++;
            } while (i < len && p[i] != ']');
            i++;
        } else {
            if (c == '*' || c == '+' || c == '-' || c == '?') k++;
            i++;
        }
    }
    return k;
}

/* string.find, match, gmatch or gsub (upvalue 1) behind the bound; upvalue
 * 2 is true for find, whose fourth argument asks for a plain search. */
static int bounded_match(lua_State *L) {
    size_t n, m;
    luaL_checklstring(L, 1, &n);
    const char *pattern = luaL_checklstring(L, 2, &m);
    int plain = lua_toboolean(L, lua_upvalueindex(2)) && lua_toboolean(L, 4);
    if (!plain) {
        int k = pattern_repetitions(pattern, m);
        double steps = 1;
        for (int i = 0; i <= k && steps <= MAX_MATCH_STEPS; i++) steps *= (double)n + 1;
        if (steps > MAX_MATCH_STEPS)
            return luaL_error(L, "pattern too costly to match: %d repetitions over %d bytes (the sandbox's bound "
                                 "is (bytes + 1)^(repetitions + 1) <= 1e8)", k, (int)(n > 2147483647 ? 2147483647 : n));
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);                                             /* original args... */
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Pushes the string library of scripts: the library's functions, the
 * matching ones bounded; made once per state. */
static void push_script_string(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &script_string_key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_pushliteral(L, "");
    if (!lua_getmetatable(L, -1) || lua_getfield(L, -1, "__index") != LUA_TTABLE)
        luaL_error(L, "the string library is not open");      /* "" mt lib */
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &library_string_key);
    lua_newtable(L);                                              /* "" mt lib copy */
    lua_pushnil(L);
    while (lua_next(L, -3)) {                                     /* ... copy key value */
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -4);
    }
    static const char *const matching[] = {"find", "match", "gmatch", "gsub"};
    for (int i = 0; i < 4; i++) {
        lua_getfield(L, -2, matching[i]);
        lua_pushboolean(L, i == 0);
        lua_pushcclosure(L, bounded_match, 2);
        lua_setfield(L, -2, matching[i]);
    }
    lua_replace(L, -4);
    lua_pop(L, 2);                                                /* copy */
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &script_string_key);
}

/* Method calls ("x"):find(p) reach the strings' metatable, not the
 * script's _ENV: the outermost budgeted call points it at the scripts'
 * library (and says so) until it returns. */
static int use_script_string(lua_State *L) {
    push_script_string(L);                                        /* script */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_getfield(L, -1, "__index");                               /* script "" mt index */
    int outermost = !lua_rawequal(L, -1, -4);
    lua_pop(L, 1);
    if (outermost) {
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 3);
    return outermost;
}

static void use_library_string(lua_State *L) {
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &library_string_key);       /* "" mt lib */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 2);
}

/* Message handler: an error without a position (a runtime error inside a
 * C function, say) gets the line of the innermost script function. */
static int has_position(const char *msg) {
    const char *colon = strchr(msg, ':');
    if (!colon || colon == msg) return 0;
    const char *p = colon + 1;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return *p == ':';
}

static int locate(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_tolstring(L, 1, NULL);
    if (has_position(msg)) {
        lua_pushstring(L, msg);
        return 1;
    }
    where_in_script(L);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return 1;
}

/* Reads a file into a Lua string (so that no C buffer is held if reading
 * fails half way). Returns 0 and pushes the text, or raises. */
static void push_file(lua_State *L, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) luaL_error(L, "cannot open %s: %s", path, strerror(errno));
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    size_t total = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        total += n;
        if (total > MAX_SCRIPT_BYTES) {
            fclose(f);
            luaL_error(L, "%s: larger than %d bytes", path, MAX_SCRIPT_BYTES);
        }
        luaL_addlstring(&b, chunk, n);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) luaL_error(L, "cannot read %s", path);
    luaL_pushresult(&b);
}

/* Calls the function below the top `nargs` values under an instruction and
 * a memory budget; leaves one result or raises the located error. `what`
 * names the script in a memory-budget error. */
static int budgeted_call(lua_State *L, int nargs, lua_Integer instructions, lua_Integer memory, const char *what) {
    int outermost = use_script_string(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &budget_key);
    lua_Integer saved_budget = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : -1;
    lua_pop(L, 1);
    lua_pushinteger(L, instructions);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
    lua_Hook saved_hook = lua_gethook(L);
    int saved_mask = lua_gethookmask(L), saved_count = lua_gethookcount(L);
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
    capped_alloc cap;
    cap.inner = lua_getallocf(L, &cap.inner_ud);
    cap.used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
    cap.soft_limit = cap.used + (size_t)memory;
    cap.limit = cap.used + 2 * (size_t)memory;
    cap.budget_mib = (int)(memory >> 20);
    cap.refused = 0;
    cap.spent = 0;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &cap_key);
    void *saved_cap = lua_touserdata(L, -1);
    lua_pop(L, 1);
    lua_pushlightuserdata(L, &cap);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &cap_key);
    lua_setallocf(L, capped, &cap);

    int base = lua_gettop(L) - nargs;                             /* the function's index */
    lua_pushcfunction(L, locate);
    lua_insert(L, base);                                          /* ... locate fn args */
    int status = lua_pcall(L, nargs, 1, base);

    lua_setallocf(L, cap.inner, cap.inner_ud);
    if (outermost) use_library_string(L);
    if (saved_cap) lua_pushlightuserdata(L, saved_cap);
    else lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &cap_key);
    lua_sethook(L, saved_hook, saved_mask, saved_count);
    if (saved_budget >= 0) lua_pushinteger(L, saved_budget);
    else lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &budget_key);
    if (status != LUA_OK) {
        if (cap.refused)
            lua_pushfstring(L, "%s: script exceeded its memory budget (%d MiB)", what, (int)(memory >> 20));
        return lua_error(L);
    }
    return 1;
}

/* Pushes the chunk the host compiled ahead of time for the text at `text`
 * (VP_PRECOMPILED_SCRIPTS) and returns 1; pushes nothing and returns 0 when
 * the host has none for it. Only a host's own function is asked: a script
 * cannot reach the registry, and its text is always loaded as text. */
static int push_precompiled(lua_State *L, int text, int chunkname) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, VP_PRECOMPILED_SCRIPTS) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return 0;
    }
    lua_pushvalue(L, text);
    lua_pushvalue(L, chunkname);
    lua_call(L, 2, 1);
    if (lua_isfunction(L, -1)) return 1;
    lua_pop(L, 1);
    return 0;
}

/* vramplan.run_script(path, env [, instructions [, memory_bytes]]) -> value
 * Runs the file as a text chunk with `env` as its _ENV and returns its
 * first result. */
static int l_run_script(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer instructions = luaL_optinteger(L, 3, DEFAULT_INSTRUCTIONS);
    lua_Integer memory = luaL_optinteger(L, 4, DEFAULT_MEMORY);
    lua_settop(L, 2);
    push_file(L, path);                                           /* path env text */
    lua_pushfstring(L, "=%s", path);                              /* path env text name */
    if (!push_precompiled(L, 3, 4)) {
        size_t len;
        const char *text = lua_tolstring(L, 3, &len);
        if (luaL_loadbufferx(L, text, len, lua_tostring(L, 4), "t") != LUA_OK) return lua_error(L);
    }
    lua_pushvalue(L, 2);                                          /* path env text name chunk env */
    lua_setupvalue(L, -2, 1);                                     /* path env text name chunk */
    return budgeted_call(L, 0, instructions, memory, path);
}

/* vramplan.call_budgeted(fn, arg) -> value: a function a script defined,
 * called under the same budgets. */
static int l_call_budgeted(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 2);
    return budgeted_call(L, 1, DEFAULT_INSTRUCTIONS, DEFAULT_MEMORY, "script");
}

/* vramplan.script_string() -> the string library as scripts see it (the
 * sandbox copies it into each environment). */
static int l_script_string(lua_State *L) {
    push_script_string(L);
    return 1;
}

static const luaL_Reg functions[] = {
    {"run_script", l_run_script},
    {"call_budgeted", l_call_budgeted},
    {"script_pcall", l_script_pcall},
    {"script_xpcall", l_script_xpcall},
    {"script_string", l_script_string},
    {NULL, NULL},
};

void vp_lua_open_sandbox(lua_State *L) { luaL_setfuncs(L, functions, 0); }
