/* lua_vramplan.h — the binding's internal interface: each binding file opens
 * its part of the module, and the shared helpers. */
#ifndef VP_LUA_VRAMPLAN_H
#define VP_LUA_VRAMPLAN_H

#include <lua.h>

#include "model.h"
#include "recipe.h"

#define VP_VERSION "0.1.0"

/* Each adds its functions to the module table on the top of the stack. */
void vp_lua_open_model(lua_State *L);
void vp_lua_open_estimate(lua_State *L);
void vp_lua_open_sandbox(lua_State *L);
void vp_lua_open_system(lua_State *L);
void vp_lua_open_block(lua_State *L);
void vp_lua_open_csv(lua_State *L);

/* The registry field where a host may put a function (text, chunkname) ->
 * chunk | nil that returns a script's chunk compiled ahead of time when
 * `text` is exactly a script it carries (the command's embedded.c);
 * vramplan.run_script asks it before compiling the text itself. */
#define VP_PRECOMPILED_SCRIPTS "vramplan.precompiled_scripts"

/* Pushes a new op of `kind` (fields at their zero values; user value 1 free
 * for the kind's data, which op.data points into) and returns it. */
vp_op *vp_lua_new_op(lua_State *L, const vp_op_kind *kind);

vp_model *vp_lua_checkmodel(lua_State *L, int index);

/* The closest of `names` to `word` (at most two edits away), or NULL. */
const char *vp_lua_suggest(const char *word, const char *const *names, unsigned n);

/* Fills a recipe from the table at `index` (missing keys keep defaults);
 * raises an error naming the key for anything unknown or out of range. */
void vp_lua_read_recipe(lua_State *L, int index, vp_recipe *recipe);
/* Raises an error for combinations of keys the engine does not model. */
void vp_lua_check_recipe(lua_State *L, const vp_recipe *recipe);
/* Pushes the recipe as a table with every key (the echo in results). */
void vp_lua_push_recipe(lua_State *L, const vp_recipe *recipe);
/* The same with only the keys the list at `names` holds (0: every key);
 * an error names anything that is not a recipe key. */
void vp_lua_push_recipe_keys(lua_State *L, const vp_recipe *recipe, int names);
/* vramplan.recipe_keys() -> { {name=, doc=} } in declaration order */
int vp_lua_recipe_keys(lua_State *L);

/* Pushes the CSV field (RFC 4180) of the value at `index`: lua_csv.c's
 * rules, the one place of them. */
void vp_lua_push_csv_field(lua_State *L, int index);

int luaopen_vramplan(lua_State *L);

#endif
