/* embedded.c — a package searcher for the command: a module whose file (as
 * package.path finds it) holds exactly the text compiled into the binary
 * is loaded from its bytecode, sparing the compiler (most of the command's
 * start-up); any other file is left to Lua's own searcher. Architecture
 * scripts are found the same way by their text when the sandbox runs them
 * (VP_PRECOMPILED_SCRIPTS). */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "embedded.h"
#include "lua_vramplan.h"

static const vp_embedded_module *find_module(const char *name) {
    for (size_t i = 0; i < vp_embedded_count; i++)
        if (strcmp(vp_embedded_modules[i].name, name) == 0) return &vp_embedded_modules[i];
    return NULL;
}

/* Whether the file at `path` holds exactly `m`'s source. */
static int same_source(const char *path, const vp_embedded_module *m) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char chunk[8192];
    size_t at = 0, n;
    int same = 1;
    while (same && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        same = at + n <= m->source_len && memcmp(chunk, m->source + at, n) == 0;
        at += n;
    }
    fclose(f);
    return same && at == m->source_len;
}

/* Lua 5.4's string size in a dump (ldump.c dumpSize): 7 bits a byte, most
 * significant first, the last byte's high bit set. */
static void add_size(luaL_Buffer *b, size_t x) {
    unsigned char bytes[sizeof(size_t) * 8 / 7 + 1];
    size_t n = 0;
    do {
        bytes[sizeof bytes - ++n] = (unsigned char)(x & 0x7f);
        x >>= 7;
    } while (x != 0);
    bytes[sizeof bytes - 1] |= 0x80;
    luaL_addlstring(b, (const char *)bytes + sizeof bytes - n, n);
}

/* Loads `m`'s bytecode under `chunkname` (the chunk name lua_load would
 * have been given for its text) and pushes the chunk; returns 0, pushing
 * nothing, when this Lua cannot load it (another build: compile instead). */
static int push_bytecode(lua_State *L, const vp_embedded_module *m, const char *chunkname, size_t chunk_len) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);                               /* <buffer> */
    luaL_addlstring(&b, (const char *)m->head, m->head_len);
    add_size(&b, chunk_len + 1);
    luaL_addlstring(&b, chunkname, chunk_len);
    luaL_addlstring(&b, (const char *)m->tail, m->tail_len);
    luaL_pushresult(&b);                                /* bytecode */
    size_t len;
    const char *code = lua_tolstring(L, -1, &len);
    int loaded = luaL_loadbufferx(L, code, len, chunkname, "b") == LUA_OK;
    lua_remove(L, loaded ? -2 : -1);                    /* chunk | error */
    if (!loaded) lua_pop(L, 1);
    return loaded;
}

/* searcher(name) -> loader, path; or nothing (Lua's searcher then reads
 * the file). Upvalue 1: the package table. */
static int searcher(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const vp_embedded_module *m = find_module(name);
    if (!m) return 0;
    lua_getfield(L, lua_upvalueindex(1), "searchpath"); /* name searchpath */
    lua_pushvalue(L, 1);
    lua_getfield(L, lua_upvalueindex(1), "path");       /* name searchpath name path */
    if (!lua_isfunction(L, -3) || !lua_isstring(L, -1)) return 0;
    lua_call(L, 2, 1);                                  /* name path|nil */
    const char *path = lua_tostring(L, -1);
    if (!path || !same_source(path, m)) return 0;
    /* the bytecode with the chunk name Lua's own searcher would give */
    lua_pushfstring(L, "@%s", path);                    /* name path chunkname */
    size_t chunk_len;
    const char *chunkname = lua_tolstring(L, -1, &chunk_len);
    if (!push_bytecode(L, m, chunkname, chunk_len)) return 0;
    lua_pushvalue(L, 2);                                /* ... loader path */
    return 2;
}

/* precompiled(text, chunkname) -> chunk | nil: an architecture script
 * carried compiled, when `text` is exactly its source (a script is found by
 * its text, wherever it lies: VRAMPLAN_PATH may hold a copy). */
static int precompiled(lua_State *L) {
    size_t text_len, chunk_len;
    const char *text = luaL_checklstring(L, 1, &text_len);
    const char *chunkname = luaL_checklstring(L, 2, &chunk_len);
    for (size_t i = 0; i < vp_embedded_script_count; i++) {
        const vp_embedded_module *m = &vp_embedded_scripts[i];
        if (m->source_len == text_len && memcmp(m->source, text, text_len) == 0
            && push_bytecode(L, m, chunkname, chunk_len))
            return 1;
    }
    lua_pushnil(L);
    return 1;
}

void vp_embedded_install(lua_State *L) {
    lua_getglobal(L, "package");                        /* package */
    lua_getfield(L, -1, "searchers");                   /* package searchers */
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer i = n; i >= 2; i--) {              /* make room at 2, after the preloaded */
        lua_rawgeti(L, -1, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, searcher, 1);                   /* package searchers searcher */
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
    lua_pushcfunction(L, precompiled);
    lua_setfield(L, LUA_REGISTRYINDEX, VP_PRECOMPILED_SCRIPTS);
}
