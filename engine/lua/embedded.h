/* embedded.h — the command's Lua library compiled ahead of time
 * (tools/embed_lua.lua writes the table; embedded.c loads from it). */
#ifndef VP_EMBEDDED_H
#define VP_EMBEDDED_H
#include <lua.h>
#include <stddef.h>

/* One module: its source text, and its bytecode cut around the main
 * function's chunk name (head | name | tail). */
typedef struct {
    const char *name;
    const unsigned char *source;
    size_t source_len;
    const unsigned char *head;
    size_t head_len;
    const unsigned char *tail;
    size_t tail_len;
} vp_embedded_module;

extern const vp_embedded_module vp_embedded_modules[];
extern const size_t vp_embedded_count;
/* The architecture scripts (models/arch/), named by their path in the tree. */
extern const vp_embedded_module vp_embedded_scripts[];
extern const size_t vp_embedded_script_count;

/* Puts the embedded searcher in package.searchers before the Lua files'
 * own; it answers only for a file whose text is the embedded source. Puts
 * the scripts' lookup at VP_PRECOMPILED_SCRIPTS in the registry. */
void vp_embedded_install(lua_State *L);

#endif
