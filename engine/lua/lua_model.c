/* lua_model.c — the constructors scripts describe models with: one per op
 * kind (validated field by field against the kind's declaration) and the
 * decoder that arranges them. */
#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_vramplan.h"
#include "model.h"

#define OP_META "vramplan.op"
#define MODEL_META "vramplan.model"

/* An op as a script holds it: the validated fields; a container's children
 * sit in the userdata's user value (a sequence of ops). */
typedef struct {
    vp_op op;
} lua_op;

/* A Levenshtein distance small enough to suggest "hidden" for "hiden". */
static unsigned distance(const char *a, const char *b) {
    unsigned la = (unsigned)strlen(a), lb = (unsigned)strlen(b), row[64];
    if (la >= 63 || lb >= 63) return 99;
    for (unsigned j = 0; j <= lb; j++) row[j] = j;
    for (unsigned i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = i;
        for (unsigned j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *vp_lua_suggest(const char *word, const char *const *names, unsigned n) {
    const char *best = NULL;
    unsigned best_d = 3;
    for (unsigned i = 0; i < n; i++) {
        unsigned d = distance(word, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

static int unknown_field(lua_State *L, const vp_op_kind *kind, const char *key) {
    const char *names[VP_OP_MAX_FIELDS];
    for (unsigned i = 0; i < kind->n_fields; i++) names[i] = kind->fields[i].name;
    const char *guess = vp_lua_suggest(key, names, kind->n_fields);
    if (guess) return luaL_error(L, "%s: unknown field '%s' (did you mean '%s'?)", kind->name, key, guess);
    return luaL_error(L, "%s: unknown field '%s'", kind->name, key);
}

/* The index of the string on top of the stack in a NULL-terminated list of
 * names, or -1 (not a string, or not one of them). */
static int option_index(lua_State *L, const char *const *options) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (int i = 0; s && options[i]; i++)
        if (strcmp(options[i], s) == 0) return i;
    return -1;
}

/* Reads the value on top of the stack into op->value[index]; raises an error
 * naming the op and the field. */
static void read_field(lua_State *L, const vp_op_kind *kind, unsigned index, vp_op *op) {
    const vp_field *f = &kind->fields[index];
    switch (f->type) {
    case VP_FIELD_BOOL:
        if (!lua_isboolean(L, -1)) luaL_error(L, "%s: field '%s' must be true or false, not %s", kind->name, f->name, luaL_typename(L, -1));
        op->value[index] = lua_toboolean(L, -1);
        return;
    case VP_FIELD_ENUM: {
        int option = option_index(L, f->options);
        if (option >= 0) {
            op->value[index] = option;
            return;
        }
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (unsigned i = 0; f->options[i]; i++) {
            if (i) luaL_addstring(&b, ", ");
            luaL_addstring(&b, f->options[i]);
        }
        luaL_pushresult(&b);
        luaL_error(L, "%s: field '%s' must be one of %s", kind->name, f->name, lua_tostring(L, -1));
        return;
    }
    case VP_FIELD_INT:
    case VP_FIELD_NUMBER: {
        int isnum;
        lua_Number v = lua_tonumberx(L, -1, &isnum);
        if (!isnum || lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "%s: field '%s' must be a number, not %s", kind->name, f->name, luaL_typename(L, -1));
        if (f->type == VP_FIELD_INT && (v != floor(v) || !isfinite(v)))
            luaL_error(L, "%s: field '%s' must be a whole number (got %s)", kind->name, f->name, lua_tostring(L, -1));
        if (!(v >= f->min && v <= f->max))
            luaL_error(L, "%s: field '%s' must be between %f and %f (got %s)", kind->name, f->name, (lua_Number)f->min,
                       (lua_Number)f->max, lua_tostring(L, -1));
        op->value[index] = v;
        return;
    }
    }
}

/* vramplan.op(kind_name, fields[, children]) -> op */
static int l_op(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const vp_op_kind *kind = vp_op_kind_find(name);
    if (!kind) return luaL_error(L, "unknown op kind '%s'", name);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_op *u = lua_newuserdatauv(L, sizeof *u, 1); /* fields.. op */
    memset(u, 0, sizeof *u);
    u->op.kind = kind;
    luaL_setmetatable(L, OP_META);
    bool seen[VP_OP_MAX_FIELDS] = {false};
    for (unsigned i = 0; i < kind->n_fields; i++) u->op.value[i] = kind->fields[i].fallback;

    lua_pushnil(L); /* fields.. op nil */
    while (lua_next(L, 2)) { /* fields.. op key value */
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *key = lua_tostring(L, -2);
            int index = vp_field_index(kind, key);
            if (index < 0) unknown_field(L, kind, key);
            read_field(L, kind, (unsigned)index, &u->op);
            seen[index] = true;
        } else if (!kind->container || !lua_isinteger(L, -2)) {
            luaL_error(L, "%s: fields are named (key = value); found a %s key", kind->name, luaL_typename(L, -2));
        }
        lua_pop(L, 1); /* fields.. op key */
    }
    for (unsigned i = 0; i < kind->n_fields; i++)
        if (kind->fields[i].required && !seen[i]) luaL_error(L, "%s: field '%s' is required", kind->name, kind->fields[i].name);
    if (kind->check) {
        const char *problem = kind->check(&u->op);
        if (problem) luaL_error(L, "%s: %s", kind->name, problem);
    }
    if (kind->container) {
        /* children: the table's array part, each an op */
        lua_Integer n = luaL_len(L, 2);
        if (n < 1) luaL_error(L, "%s: needs at least one op inside", kind->name);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 2, i);
            if (!luaL_testudata(L, -1, OP_META)) luaL_error(L, "%s: entry %d is not an op", kind->name, (int)i);
            lua_pop(L, 1);
        }
        lua_pushvalue(L, 2);
        lua_setiuservalue(L, -2, 1); /* fields.. op */
    }
    return 1;
}

vp_op *vp_lua_new_op(lua_State *L, const vp_op_kind *kind) {
    lua_op *u = lua_newuserdatauv(L, sizeof *u, 1); /* op */
    memset(u, 0, sizeof *u);
    u->op.kind = kind;
    luaL_setmetatable(L, OP_META);
    return &u->op;
}

static int l_op_kind(lua_State *L) {
    lua_op *u = luaL_checkudata(L, 1, OP_META);
    lua_pushstring(L, u->op.kind->name);
    return 1;
}

/* ---- the model ---- */

typedef struct {
    vp_model model;
    bool live;
} lua_model;

static int model_gc(lua_State *L) {
    lua_model *u = luaL_checkudata(L, 1, MODEL_META);
    if (u->live) vp_model_free(&u->model);
    u->live = false;
    return 0;
}

/* Copies the ops of the sequence at `index` into a new array owned by the
 * model (the caller stores it before anything else can raise). */
static unsigned count_ops(lua_State *L, int index, const char *section) {
    if (lua_type(L, index) != LUA_TTABLE) luaL_error(L, "model: '%s' must be a list of ops", section);
    lua_Integer n = luaL_len(L, index);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, index, i);
        if (!luaL_testudata(L, -1, OP_META)) luaL_error(L, "model: entry %d of '%s' is not an op", (int)i, section);
        lua_pop(L, 1);
    }
    return (unsigned)n;
}

static void copy_ops(lua_State *L, int index, vp_op *out, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        lua_geti(L, index, (lua_Integer)i + 1); /* op */
        lua_op *u = lua_touserdata(L, -1);
        out[i] = u->op;
        out[i].children = NULL;
        out[i].n_children = 0;
        out[i].data = NULL; /* the model's own copy: the script's lives in the op's user value */
        if (u->op.data) {
            void *data = malloc(u->op.data_size);
            if (!data) luaL_error(L, "not enough memory");
            memcpy(data, u->op.data, u->op.data_size);
            out[i].data = data;
        }
        if (u->op.kind->container) {
            lua_getiuservalue(L, -1, 1); /* op children */
            int children = lua_gettop(L);
            unsigned k = (unsigned)luaL_len(L, children);
            out[i].children = calloc(k, sizeof(vp_op));
            if (!out[i].children) luaL_error(L, "not enough memory");
            out[i].n_children = k;
            copy_ops(L, children, out[i].children, k);
            /* a container's check of its children, which the op had not yet when made */
            const char *problem = out[i].kind->check ? out[i].kind->check(&out[i]) : NULL;
            if (problem) luaL_error(L, "%s: %s", out[i].kind->name, problem);
            lua_pop(L, 1); /* op */
        }
        lua_pop(L, 1);
    }
}

static const char *const section_names[VP_SECTION_COUNT] = {"embed", "layer", "final", "first_layer", "bridge"};

static const char *check_shape(const vp_model *m) {
    const vp_section *embed = &m->section[VP_SECTION_EMBED], *final = &m->section[VP_SECTION_FINAL];
    if (!embed->n_ops || embed->ops[0].kind != vp_op_kind_find("token_embedding"))
        return "the embed ops must start with token_embedding";
    /* the loss, then what adds to it (the mixtures' load-balancing loss) */
    unsigned loss = final->n_ops;
    while (loss && final->ops[loss - 1].kind == vp_op_kind_find("router_aux_loss")) loss--;
    if (!loss || final->ops[loss - 1].kind != vp_op_kind_find("cross_entropy"))
        return "the final ops must end with cross_entropy (then router_aux_loss, if any)";
    if (!vp_section_find(final, vp_op_kind_find("lm_head")) && !vp_section_find(final, vp_op_kind_find("classifier")))
        return "the final ops need an lm_head or a classifier";
    if (!m->section[VP_SECTION_LAYER].n_ops) return "a layer needs at least one op";
    if (m->first_layers >= m->layers) return "'first_layers' must be fewer than 'layers'";
    if (m->first_layers && !m->section[VP_SECTION_FIRST_LAYER].n_ops)
        return "'first_layers' needs a 'first_layer' with at least one op";
    if (m->section[VP_SECTION_BRIDGE].n_ops && !m->first_layers)
        return "a 'bridge' runs where the first layers end: it needs 'first_layers'";
    return NULL;
}

/* vp_norm_registration's names, in its order */
static const char *const norm_registrations[] = {"in_place", "last", "first", "after_branch", NULL};

/* embed_registered = { i, j, ... }: the embedding ops (1-based) in the
 * order their module registers them; each exactly once. Returns how many. */
static unsigned read_embed_order(lua_State *L, int index, unsigned *order) {
    if (lua_isnil(L, index)) return 0;
    if (!lua_istable(L, index)) luaL_error(L, "model: 'embed_registered' must be a list of embedding op indices");
    lua_Unsigned n = lua_rawlen(L, index);
    if (n == 0 || n > VP_EMBED_ORDER_MAX)
        luaL_error(L, "model: 'embed_registered' must list 1 to %d ops", VP_EMBED_ORDER_MAX);
    bool seen[VP_EMBED_ORDER_MAX] = {false};
    for (lua_Unsigned i = 1; i <= n; i++) {
        lua_rawgeti(L, index, (lua_Integer)i);
        int isint;
        lua_Integer op = lua_tointegerx(L, -1, &isint);
        lua_pop(L, 1);
        if (!isint || op < 1 || op > (lua_Integer)n || seen[op - 1])
            luaL_error(L, "model: 'embed_registered' must hold each of 1 to %d once", (int)n);
        seen[op - 1] = true;
        order[i - 1] = (unsigned)(op - 1);
    }
    return (unsigned)n;
}

/* vramplan.model{ name=, embed={...}, layer={...}, layers=N, final={...}
 *                 [, first_layer={...}, first_layers=K, bridge={...},
 *                 norms_registered=, embed_registered={...}] } */
static int l_model(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *const keys[] = {"name",         "embed",        "layer",  "layers",
                                       "final",        "first_layer",  "first_layers", "bridge",
                                       "norms_registered", "embed_registered"};
    const unsigned n_keys = sizeof keys / sizeof keys[0];
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        bool known = false;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (unsigned i = 0; i < n_keys; i++)
                if (strcmp(lua_tostring(L, -2), keys[i]) == 0) known = true;
        if (!known) {
            const char *guess = lua_type(L, -2) == LUA_TSTRING ? vp_lua_suggest(lua_tostring(L, -2), keys, n_keys) : NULL;
            luaL_error(L, "model: unknown field '%s'%s%s%s", luaL_tolstring(L, -2, NULL), guess ? " (did you mean '" : "",
                       guess ? guess : "", guess ? "'?)" : "");
        }
        lua_pop(L, 1);
    }
    lua_getfield(L, 1, "name");
    const char *name = luaL_optstring(L, -1, "model");
    lua_getfield(L, 1, "layers");
    int isint;
    lua_Integer layers = lua_tointegerx(L, -1, &isint);
    /* The deepest published transformer has 1,000 layers (DeepNet, Wang et
     * al. 2022); a model that cannot fold (an encoder-decoder) is evaluated
     * layer by layer, so the limit bounds an estimate's time and memory
     * (10,000 unfolded T5 layers: about 1 s and 300 MB). */
    if (!isint || layers < 1 || layers > VP_MODEL_MAX_LAYERS)
        luaL_error(L, "model: 'layers' must be a whole number from 1 to %d", VP_MODEL_MAX_LAYERS);
    lua_getfield(L, 1, "first_layers");
    lua_Integer first_layers = lua_isnil(L, -1) ? 0 : lua_tointegerx(L, -1, &isint);
    if (!lua_isnil(L, -1) && (!isint || first_layers < 0 || first_layers > VP_MODEL_MAX_LAYERS))
        luaL_error(L, "model: 'first_layers' must be a whole number of layers");
    lua_getfield(L, 1, "norms_registered");
    int norms_registered = lua_isnil(L, -1) ? VP_NORMS_IN_PLACE : option_index(L, norm_registrations);
    if (norms_registered < 0)
        luaL_error(L, "model: 'norms_registered' must be in_place, last, first or after_branch");
    lua_getfield(L, 1, "embed_registered");
    unsigned embed_order[VP_EMBED_ORDER_MAX];
    unsigned n_embed_order = read_embed_order(L, lua_gettop(L), embed_order);
    int idx[VP_SECTION_COUNT];
    unsigned counts[VP_SECTION_COUNT];
    for (int s = 0; s < VP_SECTION_COUNT; s++) {
        lua_getfield(L, 1, section_names[s]);
        idx[s] = lua_gettop(L);
        /* the first layers' ops and the bridge are optional */
        bool optional = s == VP_SECTION_FIRST_LAYER || s == VP_SECTION_BRIDGE;
        counts[s] = optional && lua_isnil(L, -1) ? 0 : count_ops(L, idx[s], section_names[s]);
    }
    lua_model *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, MODEL_META);
    u->live = true;
    snprintf(u->model.name, sizeof u->model.name, "%s", name);
    u->model.layers = (unsigned)layers;
    u->model.first_layers = (unsigned)first_layers;
    u->model.norms_registered = (vp_norm_registration)norms_registered;
    u->model.n_embed_order = n_embed_order;
    memcpy(u->model.embed_order, embed_order, sizeof embed_order);
    for (int s = 0; s < VP_SECTION_COUNT; s++) {
        u->model.section[s].ops = calloc(counts[s] ? counts[s] : 1, sizeof(vp_op));
        if (!u->model.section[s].ops) return luaL_error(L, "not enough memory");
        u->model.section[s].n_ops = counts[s];
        copy_ops(L, idx[s], u->model.section[s].ops, counts[s]);
    }
    const char *problem = vp_model_finish(&u->model);
    if (problem) luaL_error(L, "model: %s", problem);
    problem = check_shape(&u->model);
    if (problem) luaL_error(L, "model: %s", problem);
    return 1;
}

vp_model *vp_lua_checkmodel(lua_State *L, int index) {
    lua_model *u = luaL_checkudata(L, index, MODEL_META);
    if (!u->live) luaL_argerror(L, index, "model already released");
    return &u->model;
}

static int l_params(lua_State *L) {
    vp_model *m = vp_lua_checkmodel(L, 1);
    lua_pushinteger(L, (lua_Integer)vp_model_params(m, lua_toboolean(L, 2)));
    return 1;
}

/* vramplan.op_kinds() -> { {name=, doc=, fields={ {name=, type=, required=, default=, doc=, options=} } } } */
static int l_op_kinds(lua_State *L) {
    static const char *const type_names[] = {"int", "number", "bool", "enum"};
    lua_createtable(L, (int)vp_op_kind_count(), 0);
    for (unsigned k = 0; k < vp_op_kind_count(); k++) {
        const vp_op_kind *kind = vp_op_kind_at(k);
        lua_createtable(L, 0, 3);
        lua_pushstring(L, kind->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, kind->doc);
        lua_setfield(L, -2, "doc");
        lua_createtable(L, (int)kind->n_fields, 0);
        for (unsigned i = 0; i < kind->n_fields; i++) {
            const vp_field *f = &kind->fields[i];
            lua_createtable(L, 0, 6);
            lua_pushstring(L, f->name);
            lua_setfield(L, -2, "name");
            lua_pushstring(L, type_names[f->type]);
            lua_setfield(L, -2, "type");
            lua_pushboolean(L, f->required);
            lua_setfield(L, -2, "required");
            lua_pushstring(L, f->doc);
            lua_setfield(L, -2, "doc");
            if (f->type == VP_FIELD_ENUM) {
                lua_newtable(L);
                for (int o = 0; f->options[o]; o++) {
                    lua_pushstring(L, f->options[o]);
                    lua_rawseti(L, -2, o + 1);
                }
                lua_setfield(L, -2, "options");
            }
            if (!f->required) {
                if (f->type == VP_FIELD_ENUM) lua_pushstring(L, f->options[(int)f->fallback]);
                else if (f->type == VP_FIELD_BOOL) lua_pushboolean(L, f->fallback != 0);
                else lua_pushnumber(L, f->fallback);
                lua_setfield(L, -2, "default");
            }
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, "fields");
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    return 1;
}

/* vramplan.op_kind_names() -> { name, ... }: the op kinds' names alone, in
 * the core's order (what an architecture script's constructors need; the
 * full op_kinds() table costs about 5 % of a CLI estimate's start). */
static int l_op_kind_names(lua_State *L) {
    lua_createtable(L, (int)vp_op_kind_count(), 0);
    for (unsigned k = 0; k < vp_op_kind_count(); k++) {
        lua_pushstring(L, vp_op_kind_at(k)->name);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    return 1;
}

/* vramplan.op_field_options(kind, field) -> { option, ... }, or nil when the
 * kind has no such enum field. */
static int l_op_field_options(lua_State *L) {
    const vp_op_kind *kind = vp_op_kind_find(luaL_checkstring(L, 1));
    const char *field = luaL_checkstring(L, 2);
    for (unsigned i = 0; kind && i < kind->n_fields; i++) {
        const vp_field *f = &kind->fields[i];
        if (f->type != VP_FIELD_ENUM || strcmp(f->name, field) != 0) continue;
        lua_newtable(L);
        for (int o = 0; f->options[o]; o++) {
            lua_pushstring(L, f->options[o]);
            lua_rawseti(L, -2, o + 1);
        }
        return 1;
    }
    lua_pushnil(L);
    return 1;
}

/* Pushes ops[0..n) as { {kind=, params=, leaves={ {label=, numel=, count=,
 * trainable=, buffer=} }, children={...}? }, ... }: what `vramplan show`
 * prints. */
static void push_ops(lua_State *L, const vp_op *ops, unsigned n) {
    static const vp_ranks whole = {1, 1, 1, false, false};
    lua_createtable(L, (int)n, 0);
    for (unsigned i = 0; i < n; i++) {
        const vp_op *op = &ops[i];
        lua_createtable(L, 0, 4);
        lua_pushstring(L, op->kind->name);
        lua_setfield(L, -2, "kind");
        const char *title = op->kind->title ? op->kind->title(op) : NULL;
        if (title && *title) {
            lua_pushstring(L, title);
            lua_setfield(L, -2, "name");
        }
        lua_pushinteger(L, (lua_Integer)vp_op_params(op));
        lua_setfield(L, -2, "params");
        vp_leaf_spec specs[VP_OP_MAX_LEAVES];
        unsigned k = op->kind->leaves ? op->kind->leaves(op, &whole, specs) : 0;
        lua_createtable(L, (int)k, 0);
        for (unsigned j = 0; j < k; j++) {
            lua_createtable(L, 0, 5);
            lua_pushstring(L, specs[j].label ? specs[j].label : "");
            lua_setfield(L, -2, "label");
            lua_pushinteger(L, (lua_Integer)specs[j].numel);
            lua_setfield(L, -2, "numel");
            lua_pushinteger(L, vp_leaf_count(&specs[j]));
            lua_setfield(L, -2, "count");
            lua_pushboolean(L, specs[j].trainable);
            lua_setfield(L, -2, "trainable");
            lua_pushboolean(L, specs[j].buffer);
            lua_setfield(L, -2, "buffer");
            lua_pushboolean(L, specs[j].per_position); /* numel is per position of the sequence */
            lua_setfield(L, -2, "per_position");
            lua_rawseti(L, -2, (lua_Integer)j + 1);
        }
        lua_setfield(L, -2, "leaves");
        if (op->n_children) {
            push_ops(L, op->children, op->n_children);
            lua_setfield(L, -2, "children");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* model:structure() -> { name=, layers=, first_layers=, sections={ {name=,
 * repeats=, params=, ops={...}} } } in the order a step runs them. */
static int l_structure(lua_State *L) {
    const vp_model *m = vp_lua_checkmodel(L, 1);
    static const vp_section_id order[] = {VP_SECTION_EMBED, VP_SECTION_FIRST_LAYER, VP_SECTION_BRIDGE,
                                          VP_SECTION_LAYER, VP_SECTION_FINAL};
    lua_createtable(L, 0, 4);
    lua_pushstring(L, m->name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, m->layers);
    lua_setfield(L, -2, "layers");
    lua_newtable(L);
    int n = 0;
    for (unsigned i = 0; i < sizeof order / sizeof order[0]; i++) {
        const vp_section *sec = &m->section[order[i]];
        if (!sec->n_ops) continue;
        unsigned repeats = order[i] == VP_SECTION_LAYER ? m->layers - m->first_layers
                           : order[i] == VP_SECTION_FIRST_LAYER ? m->first_layers : 1;
        lua_createtable(L, 0, 4);
        lua_pushstring(L, section_names[order[i]]);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, repeats);
        lua_setfield(L, -2, "repeats");
        lua_pushinteger(L, (lua_Integer)vp_section_params(sec));
        lua_setfield(L, -2, "params");
        push_ops(L, sec->ops, sec->n_ops);
        lua_setfield(L, -2, "ops");
        lua_rawseti(L, -2, ++n);
    }
    lua_setfield(L, -2, "sections");
    return 1;
}

static const luaL_Reg op_methods[] = {{"kind", l_op_kind}, {NULL, NULL}};
static const luaL_Reg model_methods[] = {{"params", l_params}, {"structure", l_structure}, {NULL, NULL}};

static const luaL_Reg functions[] = {
    {"op", l_op},
    {"model", l_model},
    {"op_kinds", l_op_kinds},
    {"op_kind_names", l_op_kind_names},
    {"op_field_options", l_op_field_options},
    {NULL, NULL},
};

static void new_class(lua_State *L, const char *meta, const luaL_Reg *methods, lua_CFunction gc) {
    luaL_newmetatable(L, meta);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    if (gc) {
        lua_pushcfunction(L, gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
}

void vp_lua_open_model(lua_State *L) {
    new_class(L, OP_META, op_methods, NULL);
    new_class(L, MODEL_META, model_methods, model_gc);
    luaL_setfuncs(L, functions, 0); /* into the module table on top */
}
