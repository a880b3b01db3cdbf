/* embedded.c — a package searcher for the command: a module whose file (as
 * package.path finds it) holds exactly the text compiled into the binary
 * is loaded from its bytecode, sparing the compiler (most of the command's
 * start-up); any other file is left to Lua's own searcher. */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "embedded.h"

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
    luaL_Buffer b;
    luaL_buffinit(L, &b);                               /* name path chunkname <buffer> */
    luaL_addlstring(&b, (const char *)m->head, m->head_len);
    add_size(&b, chunk_len + 1);
    luaL_addlstring(&b, chunkname, chunk_len);
    luaL_addlstring(&b, (const char *)m->tail, m->tail_len);
    luaL_pushresult(&b);                                /* name path chunkname bytecode */
    size_t len;
    const char *code = lua_tolstring(L, -1, &len);
    if (luaL_loadbufferx(L, code, len, chunkname, "b") != LUA_OK) return 0; /* another Lua build: compile */
    lua_pushvalue(L, 2);                                /* ... loader path */
    return 2;
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
}
