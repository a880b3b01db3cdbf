/* lua_block.c — vramplan.block_op(program): the op of a block that
 * scripts/lib/vramplan/block.lua traced, its parameters and program read
 * field by field into block.h's flat form and checked before the core
 * takes it. */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "block.h"
#include "dtype.h"
#include "lua_vramplan.h"
#include "modules.h"

static const char *const prim_names[] = {"drop", "return", "linear", "unary", "mul", "add", "scale",
                                         "shift", "neg", "mean", "sum", "to", "dropout", "cat", "swiglu",
                                         "rms_norm", "kernel", "split", "rotary", "cache", "sdpa", "sub", "select",
                                         "repeat_kv", "matmul", "mask", "mask_add", "masked_fill", "softmax_fp32",
                                         "copy", "layer_keep", "conv1d", "cumsum", "tril", "not", "clamp", "pad",
                                         "slice", "expand", "zeros", "repeat", "embedding", "topk", "gather",
                                         "index", "scatter", "scatter_add", "layer_norm", "all_gather",
                                         "reduce_scatter", "logsumexp", "var", "std", "amax", "amin",
                                         "index_select", "index_add", "scatter_", "scatter_add_", "index_add_",
                                         "index_copy_", "masked_fill_", NULL};
static const char *const mask_names[] = {"causal", "sliding", "padded", "bool", "prefix", "bidirectional", NULL};
static const char *const unary_names[] = {"silu", "gelu", "gelu_tanh", "relu", "sigmoid",
                                          "tanh", "exp", "rsqrt", "pow", "softmax", "log_softmax", "softplus", NULL};
static const char *const dim_names[] = {"const", "batch", "seq", "chunks", "padded", "split", NULL};
static const char *const split_names[] = {"whole", "rows", "columns", NULL};

/* The integer field `key` of the table on top, within [lo, hi]. */
static lua_Integer int_field(lua_State *L, const char *what, const char *key, lua_Integer lo, lua_Integer hi) {
    lua_getfield(L, -1, key);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (lua_isnil(L, -1)) v = lo, isint = 1;
    if (!isint || v < lo || v > hi) luaL_error(L, "block_op: %s: '%s' must be a whole number from %d to %d", what, key, (int)lo, (int)hi);
    lua_pop(L, 1);
    return v;
}

static bool bool_field(lua_State *L, const char *key) {
    lua_getfield(L, -1, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The option index of the string field `key` (`fallback` when absent). */
static int option_field(lua_State *L, const char *what, const char *key, const char *const *names, int fallback) {
    lua_getfield(L, -1, key);
    int found = lua_isnil(L, -1) ? fallback : -1;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0) found = i;
    if (found < 0) luaL_error(L, "block_op: %s: unknown %s '%s'", what, key, s ? s : luaL_typename(L, -1));
    lua_pop(L, 1);
    return found;
}

static void label_field(lua_State *L, const char *key, char *out) {
    lua_getfield(L, -1, key);
    const char *s = luaL_optstring(L, -1, "");
    snprintf(out, VP_BLOCK_LABEL, "%s", s);
    lua_pop(L, 1);
}

static void read_param(lua_State *L, vp_block_param *q) {
    label_field(L, "label", q->label);
    q->rows = (uint64_t)int_field(L, q->label, "rows", 1, (lua_Integer)1 << 40);
    q->columns = (uint64_t)int_field(L, q->label, "columns", 1, (lua_Integer)1 << 40);
    q->split = (uint8_t)option_field(L, q->label, "split", split_names, VP_BLOCK_WHOLE);
    if (q->rows > ((uint64_t)1 << 48) / q->columns) luaL_error(L, "block_op: %s: more than 2^48 elements", q->label);
    lua_getfield(L, -1, "module");
    const char *module = luaL_optstring(L, -1, "none");
    q->module = (uint8_t)vp_module_find(module);
    snprintf(q->module_name, sizeof q->module_name, "%s", module);
    lua_pop(L, 1);
    q->linear = bool_field(L, "linear");
    q->buffer = bool_field(L, "buffer");
    q->trainable = !bool_field(L, "frozen") && !q->buffer;
    q->keep_fp32 = bool_field(L, "keep_fp32");
    q->conv1d = bool_field(L, "conv1d");
}

/* An explicit output shape: shape = { { "batch", 0 }, { "const", 16 },
 * { "seq", 0, true }, ... } (a dimension's symbol, what it adds, and for the
 * sequence's symbols whether it is the gathered one), chunk = n. */
static void read_shape(lua_State *L, const char *what, vp_block_instr *in) {
    in->chunk = (uint32_t)int_field(L, what, "chunk", 0, 1 << 30);
    lua_getfield(L, -1, "shape"); /* .. instr shape */
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (in->prim >= VP_BP_CONV1D && in->prim <= VP_BP_REPEAT && in->prim != VP_BP_CUMSUM && in->prim != VP_BP_CLAMP &&
            in->prim != VP_BP_NOT)
            luaL_error(L, "block_op: %s: needs its output's shape", what);
        return;
    }
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, -1);
    if (n < 1 || n > VP_BLOCK_DIMS) luaL_error(L, "block_op: %s: a shape of 1 to %d dimensions", what, VP_BLOCK_DIMS);
    in->n_dims = (uint8_t)n;
    for (lua_Integer d = 1; d <= n; d++) {
        lua_geti(L, -1, d); /* .. instr shape dim */
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_geti(L, -1, 1);
        const char *s = lua_tostring(L, -1);
        int found = -1;
        for (int k = 0; s && dim_names[k]; k++)
            if (strcmp(dim_names[k], s) == 0) found = k;
        if (found < 0) luaL_error(L, "block_op: %s: unknown dimension '%s'", what, s ? s : "?");
        lua_pop(L, 1);
        lua_geti(L, -1, 2);
        int isint;
        lua_Integer add = lua_tointegerx(L, -1, &isint);
        if (!isint || add < -(1 << 30) || add > (1 << 30) || ((found == VP_DIM_CONST || found == VP_DIM_SPLIT) && add < 1))
            luaL_error(L, "block_op: %s: a dimension's size must be a whole number", what);
        lua_pop(L, 1);
        lua_geti(L, -1, 3);
        if (lua_toboolean(L, -1)) in->dim_gathered |= (uint8_t)(1u << (d - 1));
        lua_pop(L, 2); /* .. instr shape */
        in->dim[d - 1] = (uint8_t)found;
        in->dim_add[d - 1] = (int32_t)add;
        if ((found == VP_DIM_CHUNKS || found == VP_DIM_PADDED) && !in->chunk)
            luaL_error(L, "block_op: %s: chunks need the chunk's length", what);
    }
    lua_pop(L, 1); /* .. instr */
}

static void read_instr(lua_State *L, unsigned i, vp_block_instr *in) {
    char what[32];
    snprintf(what, sizeof what, "instruction %u", i + 1);
    in->prim = (uint8_t)option_field(L, what, "prim", prim_names, -1);
    if (in->prim == VP_BP_UNARY) in->mode = (uint8_t)option_field(L, what, "fn", unary_names, -1);
    if (in->prim == VP_BP_KERNEL) in->mode = (uint8_t)int_field(L, what, "kernel", 0, VP_BLOCK_KERNELS - 1);
    if (in->prim == VP_BP_SPLIT) {
        lua_getfield(L, -1, "parts"); /* .. instr parts */
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        if (n < 1 || n > VP_BLOCK_PARTS) luaL_error(L, "block_op: %s: split into 1 to %d parts", what, VP_BLOCK_PARTS);
        in->mode = (uint8_t)n;
        for (lua_Integer j = 1; j <= n; j++) {
            lua_geti(L, -1, j);
            lua_Integer w = lua_tointeger(L, -1);
            if (w < 1) luaL_error(L, "block_op: %s: a part's width must be positive", what);
            in->part[j - 1] = (uint64_t)w;
            lua_pop(L, 1);
        }
        lua_pop(L, 1); /* .. instr */
    }
    if (in->prim == VP_BP_SDPA) {
        in->heads = (uint32_t)int_field(L, what, "heads", 1, 1 << 14);
        in->kv_heads = (uint32_t)int_field(L, what, "kv_heads", 1, 1 << 14);
        static const struct {
            const char *key;
            unsigned bit;
        } options[] = {{"upcast_softmax", VP_SDPA_UPCAST},      {"keeps_weights", VP_SDPA_KEEPS_WEIGHTS},
                       {"q_contiguous", VP_SDPA_Q_CONTIGUOUS}, {"k_contiguous", VP_SDPA_K_CONTIGUOUS},
                       {"v_contiguous", VP_SDPA_V_CONTIGUOUS}, {"q_gaps", VP_SDPA_Q_GAPS},
                       {"k_gaps", VP_SDPA_K_GAPS},             {"v_gaps", VP_SDPA_V_GAPS}};
        for (unsigned o = 0; o < sizeof options / sizeof *options; o++)
            if (bool_field(L, options[o].key)) in->mode |= (uint8_t)options[o].bit;
    }
    if (in->prim == VP_BP_SELECT) in->mode = (uint8_t)int_field(L, what, "of", 1, 255);
    if (in->prim == VP_BP_TOPK) in->part[0] = (uint64_t)int_field(L, what, "k", 1, (lua_Integer)1 << 30);
    if (in->prim == VP_BP_REPEAT_KV) {
        in->mode = (uint8_t)int_field(L, what, "times", 1, 255);
        in->kv_heads = (uint32_t)int_field(L, what, "kv_heads", 1, 1 << 14);
    }
    if (in->prim == VP_BP_MASK) in->mode = (uint8_t)option_field(L, what, "kind", mask_names, -1);
    if (in->prim != VP_BP_SDPA && in->prim != VP_BP_REPEAT_KV)
        in->heads = (uint32_t)int_field(L, what, "scores_heads", 0, 1 << 14);
    if (in->prim == VP_BP_MATMUL) {
        static const struct {
            const char *key;
            unsigned bit;
        } options[] = {{"b_transposed", VP_MATMUL_B_TRANSPOSED}, {"a_contiguous", VP_MATMUL_A_CONTIGUOUS},
                       {"b_contiguous", VP_MATMUL_B_CONTIGUOUS}, {"a_gaps", VP_MATMUL_A_GAPS},
                       {"b_gaps", VP_MATMUL_B_GAPS}};
        for (unsigned o = 0; o < sizeof options / sizeof *options; o++)
            if (bool_field(L, options[o].key)) in->mode |= (uint8_t)options[o].bit;
    }
    if (in->prim == VP_BP_MUL) in->mode = (uint8_t)int_field(L, what, "zero_dim", 0, VP_BLOCK_ZERO_DIM_B);
    if (in->prim == VP_BP_TO) {
        lua_getfield(L, -1, "dtype");
        bool like = lua_isnil(L, -1);
        lua_pop(L, 1);
        in->mode = like ? VP_BLOCK_LIKE : (uint8_t)option_field(L, what, "dtype", vp_dtype_names, -1);
    }
    in->out = (uint16_t)int_field(L, what, "out", 0, VP_BLOCK_VALUES - 1);
    lua_getfield(L, -1, "args"); /* .. instr args */
    for (unsigned a = 0; a < VP_BLOCK_ARGS; a++) {
        lua_geti(L, -1, (lua_Integer)a + 1);
        int isint;
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (lua_isnil(L, -1)) v = -1, isint = 1;
        if (!isint || v < -1 || v >= VP_BLOCK_VALUES) luaL_error(L, "block_op: %s: bad operand %d", what, (int)a + 1);
        in->arg[a] = (int16_t)v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1); /* .. instr */
    in->width = (uint64_t)int_field(L, what, "width", 0, (lua_Integer)1 << 40);
    in->width_split = bool_field(L, "width_split");
    in->out_width = (uint64_t)int_field(L, what, "out_width", 0, (lua_Integer)1 << 40);
    if (in->prim == VP_BP_CONV1D && bool_field(L, "strided")) in->mode = VP_BLOCK_STRIDED;
    if (in->prim == VP_BP_SLICE && bool_field(L, "if_padded")) in->mode = VP_BLOCK_IF_PADDED;
    if (in->prim == VP_BP_COPY && bool_field(L, "if_batched")) in->mode = VP_BLOCK_IF_BATCHED;
    read_shape(L, what, in);
    in->out_split = bool_field(L, "out_split");
    lua_getfield(L, -1, "number");
    in->number = luaL_optnumber(L, -1, 0);
    lua_pop(L, 1);
    if (in->prim == VP_BP_REPEAT && !(in->number >= 1 && in->number <= (double)(1 << 30)))
        luaL_error(L, "block_op: %s: repeat_interleave's index needs its length", what);
    if ((in->prim == VP_BP_DROPOUT || in->prim == VP_BP_SDPA) && !(in->number >= 0 && in->number < 1))
        luaL_error(L, "block_op: %s: dropout p must be in [0, 1)", what);
    label_field(L, "label", in->label);
}

/* The labels of an instruction's inner events (its `aux` list), appended
 * to the program's table. */
static void read_aux(lua_State *L, vp_block_program *p, vp_block_instr *in) {
    lua_getfield(L, -1, "aux"); /* .. instr aux */
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        if (n > VP_BLOCK_AUX_LABELS - (lua_Integer)p->n_aux)
            luaL_error(L, "block_op: more than %d labels of inner events", VP_BLOCK_AUX_LABELS);
        in->aux = (uint16_t)p->n_aux;
        for (lua_Integer j = 1; j <= n; j++) {
            lua_geti(L, -1, j);
            snprintf(p->aux_labels[p->n_aux++], VP_BLOCK_LABEL, "%s", luaL_checkstring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1); /* .. instr */
}

/* A dtype field's index (VP_DTYPE_NONE when absent; VP_BLOCK_LIKE for
 * "input", the kernel's first input's). */
static uint8_t dtype_field(lua_State *L, const char *what, const char *key) {
    lua_getfield(L, -1, key);
    bool like = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "input") == 0;
    lua_pop(L, 1);
    return like ? VP_BLOCK_LIKE : (uint8_t)option_field(L, what, key, vp_dtype_names, VP_DTYPE_NONE);
}

static void read_kernel(lua_State *L, unsigned i, vp_block_kernel *k) {
    char what[32];
    snprintf(what, sizeof what, "kernel %u", i + 1);
    const lua_Integer most = (lua_Integer)1 << 40;
    k->n_inputs = (uint8_t)int_field(L, what, "inputs", 1, VP_BLOCK_ARGS);
    k->saves = (uint16_t)int_field(L, what, "saves", 0, (1 << (VP_BLOCK_ARGS + 1)) - 1);
    k->casts = (uint16_t)int_field(L, what, "casts", 0, (1 << VP_BLOCK_ARGS) - 1);
    k->copies = (uint16_t)int_field(L, what, "copies", 0, (1 << VP_BLOCK_ARGS) - 1);
    k->out_dtype = dtype_field(L, what, "out_dtype");
    k->in_width = (uint64_t)int_field(L, what, "in_width", 1, most);
    k->in_split = bool_field(L, "in_split");
    k->out_width = (uint64_t)int_field(L, what, "out_width", 1, most);
    k->out_split = bool_field(L, "out_split");
    k->keep_width[0] = (uint64_t)int_field(L, what, "keep1_width", 0, most);
    k->keep_dtype[0] = dtype_field(L, what, "keep1_dtype");
    k->keep_width[1] = (uint64_t)int_field(L, what, "keep2_width", 0, most);
    k->keep_dtype[1] = dtype_field(L, what, "keep2_dtype");
    for (unsigned j = 0; j < VP_BLOCK_KEEPS; j++)
        if (k->keep_width[j] && !k->keep_dtype[j]) luaL_error(L, "block_op: %s: a kept tensor needs its dtype", what);
    k->forward_workspace = (uint64_t)int_field(L, what, "forward_workspace", 0, most);
    k->backward_workspace = (uint64_t)int_field(L, what, "backward_workspace", 0, most);
    k->forward_workspace_like = (uint64_t)int_field(L, what, "forward_workspace_like", 0, most);
    k->backward_workspace_like = (uint64_t)int_field(L, what, "backward_workspace_like", 0, most);
}

/* block { inputs = { "shifted_embeddings", ... } }: the tensors the block
 * takes beside its input, by the names block.h's vp_block_stream lists. */
static void read_inputs(lua_State *L, vp_block_program *p) {
    static const char *const names[VP_BLOCK_STREAMS + 1] = {
        [VP_BLOCK_SHIFTED_EMBEDDINGS] = "shifted_embeddings", [VP_BLOCK_BRANCH_INPUT] = "branch_input",
        [VP_BLOCK_INPUT_IDS] = "input_ids", NULL};
    lua_getfield(L, 1, "inputs"); /* t program inputs */
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        if (n > VP_BLOCK_INPUTS) luaL_error(L, "block_op: at most %d named inputs", VP_BLOCK_INPUTS);
        p->n_inputs = (unsigned)n;
        for (unsigned i = 0; i < p->n_inputs; i++) {
            lua_geti(L, -1, (lua_Integer)i + 1); /* t program inputs name */
            const char *name = lua_tostring(L, -1);
            unsigned k = 0;
            while (names[k] && (!name || strcmp(names[k], name) != 0)) k++;
            if (!names[k])
                luaL_error(L, "block_op: unknown input '%s' (shifted_embeddings, branch_input or input_ids)",
                           name ? name : "?");
            p->input[i] = (uint8_t)k;
            lua_pop(L, 1); /* t program inputs */
        }
    }
    lua_pop(L, 1); /* t program */
}

/* block { tp_divides = { { n = count, why = "tp: ..." }, ... } }: the
 * conditions the script puts on tensor parallelism. */
static void read_tp_rules(lua_State *L, vp_block_program *p) {
    lua_getfield(L, 1, "tp_divides"); /* t program rules */
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        if (n > VP_BLOCK_TP_RULES) luaL_error(L, "block_op: at most %d tp_divides rules", VP_BLOCK_TP_RULES);
        p->n_tp_rules = (unsigned)n;
        for (unsigned i = 0; i < p->n_tp_rules; i++) {
            lua_geti(L, -1, (lua_Integer)i + 1); /* t program rules rule */
            luaL_checktype(L, -1, LUA_TTABLE);
            p->tp_count[i] = (uint64_t)int_field(L, "tp_divides", "n", 1, (lua_Integer)1 << 40);
            lua_getfield(L, -1, "why");
            snprintf(p->tp_why[i], sizeof p->tp_why[i], "%s", luaL_checkstring(L, -1));
            lua_pop(L, 2); /* t program rules */
        }
    }
    lua_pop(L, 1); /* t program */
}

/* vramplan.block_op{ norm=, values=, params={...}, code={...} } -> op */
static int l_block_op(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const vp_op_kind *kind = vp_op_kind_find("block");
    vp_block_program *p = lua_newuserdatauv(L, sizeof *p, 0); /* t program */
    memset(p, 0, sizeof *p);
    lua_getfield(L, 1, "params"); /* t program params */
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, -1);
    if (n > VP_BLOCK_PARAMS) luaL_error(L, "block_op: at most %d parameters", VP_BLOCK_PARAMS);
    p->n_params = (unsigned)n;
    for (unsigned k = 0; k < p->n_params; k++) {
        lua_geti(L, -1, (lua_Integer)k + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        read_param(L, &p->param[k]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1); /* t program */
    lua_getfield(L, 1, "kernels"); /* t program kernels */
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        n = luaL_len(L, -1);
        if (n > VP_BLOCK_KERNELS) luaL_error(L, "block_op: at most %d kernels", VP_BLOCK_KERNELS);
        p->n_kernels = (unsigned)n;
        for (unsigned i = 0; i < p->n_kernels; i++) {
            lua_geti(L, -1, (lua_Integer)i + 1);
            luaL_checktype(L, -1, LUA_TTABLE);
            read_kernel(L, i, &p->kernel[i]);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1); /* t program */
    read_inputs(L, p);
    read_tp_rules(L, p);
    lua_getfield(L, 1, "code"); /* t program code */
    luaL_checktype(L, -1, LUA_TTABLE);
    n = luaL_len(L, -1);
    if (n > VP_BLOCK_CODE) luaL_error(L, "block_op: a program of at most %d instructions", VP_BLOCK_CODE);
    p->n_code = (unsigned)n;
    for (unsigned i = 0; i < p->n_code; i++) {
        lua_geti(L, -1, (lua_Integer)i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        read_instr(L, i, &p->code[i]);
        read_aux(L, p, &p->code[i]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1); /* t program */
    lua_pushvalue(L, 1);
    p->n_values = (unsigned)int_field(L, "block", "values", 1, VP_BLOCK_VALUES);
    p->norm = bool_field(L, "norm");
    p->width = (uint64_t)int_field(L, "block", "width", 0, (lua_Integer)1 << 40);
    label_field(L, "name", p->name);
    p->megatron_start = (unsigned)int_field(L, "block", "megatron_start", 0, VP_BLOCK_CODE);
    lua_pop(L, 1);
    char message[128];
    const char *problem = vp_block_check(p, message, sizeof message);
    if (problem) return luaL_error(L, "block_op: %s", problem);
    vp_block_note_problems(p);
    vp_op *op = vp_lua_new_op(L, kind); /* t program op */
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1);
    op->data = p;
    op->data_size = sizeof *p;
    op->roles = p->norm ? VP_ROLE_NORM : 0;
    return 1;
}

/* vramplan.block_prim_facts(prim[, fn]) -> saves_output, aliases_input:
 * what the core's run of a primitive (fn: an elementwise function's name)
 * does that an in-place op after it must know (block.h). */
static int l_block_prim_facts(lua_State *L) {
    int prim = luaL_checkoption(L, 1, NULL, prim_names);
    int mode = prim == VP_BP_UNARY ? luaL_checkoption(L, 2, NULL, unary_names) : 0;
    unsigned facts = vp_block_prim_facts((unsigned)prim, (unsigned)mode);
    lua_pushboolean(L, facts & VP_BLOCK_SAVES_OUTPUT);
    lua_pushboolean(L, facts & VP_BLOCK_ALIASES_INPUT);
    return 2;
}

static const luaL_Reg functions[] = {{"block_op", l_block_op}, {"block_prim_facts", l_block_prim_facts}, {NULL, NULL}};

void vp_lua_open_block(lua_State *L) { luaL_setfuncs(L, functions, 0); }
