/* test_block.c — a Lua block's program is checked before the core runs it:
 * whatever a script traced, the interpreter never reads a value that is not
 * there, frees one twice, computes after the return or leaves one alive. */
#include <string.h>

#include "block.h"
#include "check.h"

/* x (value 0), one linear weight (value 1); y = linear(x, w) is value 2 */
static void reset(vp_block_program *p) {
    memset(p, 0, sizeof *p);
    p->n_params = 1;
    p->param[0].linear = true;
    p->param[0].rows = p->param[0].columns = 4;
    p->n_values = 3;
}

static vp_block_instr *emit(vp_block_program *p, vp_block_prim prim, int a, int b, int c, unsigned out) {
    vp_block_instr *in = &p->code[p->n_code++];
    in->prim = (uint8_t)prim;
    for (unsigned k = 3; k < VP_BLOCK_ARGS; k++) in->arg[k] = -1; /* as lua_block.c reads an absent operand */
    in->arg[0] = (int16_t)a;
    in->arg[1] = (int16_t)b;
    in->arg[2] = (int16_t)c;
    in->out = (uint16_t)out;
    return in;
}

static bool says(const vp_block_program *p, const char *what) {
    char message[128];
    const char *problem = vp_block_check(p, message, sizeof message);
    return what ? problem && strstr(problem, what) : problem == NULL;
}

/* x (value 0), a column-parallel weight (value 1: its rows split) and a
 * row-parallel one (value 2: its columns split); values from 3 on */
static void reset_split(vp_block_program *p) {
    memset(p, 0, sizeof *p);
    p->n_params = 2;
    p->n_values = 8;
    p->param[0] = (vp_block_param){.rows = 8, .columns = 4, .split = VP_BLOCK_SPLIT_ROWS, .linear = true};
    p->param[1] = (vp_block_param){.rows = 4, .columns = 8, .split = VP_BLOCK_SPLIT_COLUMNS, .linear = true};
    strcpy(p->name, "mlp");
}

/* The DTensor plan read off a program (block_plan.c): which blocks are
 * gathered at their entry, and what no plan expresses. */
static void dtensor_plans(vp_block_program *p) {
    reset_split(p); /* a norm: rowwise on the share, as SequenceParallel runs it */
    emit(p, VP_BP_UNARY, 0, -1, -1, 3);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    vp_block_note_problems(p);
    CHECK(!p->dtensor_gathers && !p->dtensor_problem[0] && !p->dtensor_float8_problem[0]);

    reset_split(p); /* down(silu(up(x))): gathered for up, scattered by down */
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_UNARY, 3, -1, -1, 4);
    emit(p, VP_BP_DROP, 3, -1, -1, 0);
    emit(p, VP_BP_LINEAR, 4, 2, -1, 5);
    emit(p, VP_BP_DROP, 4, -1, -1, 0);
    emit(p, VP_BP_RETURN, 5, -1, -1, 0);
    vp_block_note_problems(p);
    CHECK(p->dtensor_gathers && p->dtensor_weight == 1 && !p->dtensor_problem[0] && !p->dtensor_float8_problem[0]);

    /* and x + down(...): the gathered input joined with the share */
    p->n_code--;
    strcpy(emit(p, VP_BP_ADD, 0, 5, -1, 6)->label, "mlp.add");
    emit(p, VP_BP_DROP, 5, -1, -1, 0);
    emit(p, VP_BP_RETURN, 6, -1, -1, 0);
    vp_block_note_problems(p);
    CHECK(says(p, NULL));
    CHECK(strstr(p->dtensor_problem, "tp: block mlp: mlp.add joins a row-parallel output") != NULL);
    /* which also reads the input otherwise than with a column linear */
    CHECK(strstr(p->dtensor_float8_problem, "precision: block mlp: mlp.add reads the block's input") != NULL);

    reset_split(p); /* rotary positions of the input: gathered, and never scattered back */
    strcpy(emit(p, VP_BP_ROTARY, 0, -1, -1, 3)->label, "mlp.rotary");
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    vp_block_note_problems(p);
    CHECK(p->dtensor_gathers && p->dtensor_weight == 0);
    CHECK(strstr(p->dtensor_problem, "tp: block mlp: its output returns the whole sequence") != NULL);

    reset_split(p); /* a replicated linear keeps its input's rows: the share */
    p->param[0].split = VP_BLOCK_WHOLE;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    vp_block_note_problems(p);
    CHECK(!p->dtensor_gathers && !p->dtensor_problem[0]);
}

int main(void) {
    static vp_block_program storage; /* large: not on the stack */
    vp_block_program *p = &storage;
    reset(p);
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    CHECK(says(p, NULL));

    reset(p); /* a value read before it is defined */
    emit(p, VP_BP_UNARY, 2, -1, -1, 2);
    CHECK(says(p, "not alive"));

    reset(p); /* freed twice */
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    CHECK(says(p, "not alive"));

    reset(p); /* the input is the caller's */
    emit(p, VP_BP_DROP, 0, -1, -1, 0);
    CHECK(says(p, "drops the input"));

    reset(p); /* a value left alive */
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    CHECK(says(p, "never freed"));

    reset(p); /* work after the return */
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    emit(p, VP_BP_UNARY, 0, -1, -1, 3);
    CHECK(says(p, "after the return"));

    reset(p); /* a linear whose weight is the input */
    emit(p, VP_BP_LINEAR, 0, 0, -1, 2);
    CHECK(says(p, "linear weight"));

    reset(p); /* no return */
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    CHECK(says(p, "returns nothing"));

    reset(p); /* an unknown primitive, an unknown function */
    emit(p, VP_BP_COUNT, 0, -1, -1, 2);
    CHECK(says(p, "unknown primitive"));
    reset(p);
    emit(p, VP_BP_UNARY, 0, -1, -1, 2)->mode = VP_BU_COUNT;
    CHECK(says(p, "unknown function"));

    reset(p); /* a split defines its parts; a kernel not declared */
    p->n_values = 5;
    vp_block_instr *s = emit(p, VP_BP_SPLIT, 0, -1, -1, 2);
    s->mode = 2;
    s->width = 4;
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    emit(p, VP_BP_KERNEL, 3, -1, -1, 4);
    CHECK(says(p, "undeclared kernel"));

    reset(p); /* attention: sdpa needs q, k, v and heads that group; the cache defines two values */
    emit(p, VP_BP_SDPA, 0, 0, -1, 2);
    CHECK(says(p, "sdpa needs q, k and v"));
    reset(p);
    vp_block_instr *a = emit(p, VP_BP_SDPA, 0, 0, 0, 2);
    a->heads = 4, a->kv_heads = 3, a->width = 16;
    CHECK(says(p, "key/value heads must divide the heads"));
    a->kv_heads = 2;
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    CHECK(says(p, NULL));
    reset(p);
    p->n_values = 4;
    emit(p, VP_BP_CACHE, 0, 0, -1, 2);
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    CHECK(says(p, NULL));
    p->n_values = 3; /* its second value out of range */
    CHECK(says(p, "already defined"));

    reset(p); /* each of two forwards is checked: Megatron's leaks */
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    p->megatron_start = p->n_code;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    CHECK(says(p, "instruction 5: a value is never freed"));

    reset(p); /* a named input (value 2 after the weight) is borrowed: used, returned, never dropped */
    p->n_inputs = 1;
    p->input[0] = VP_BLOCK_SHIFTED_EMBEDDINGS;
    p->n_values = 4;
    emit(p, VP_BP_ADD, 0, 2, -1, 3);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    CHECK(says(p, NULL));
    reset(p);
    p->n_inputs = 1;
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    CHECK(says(p, NULL));
    reset(p);
    p->n_inputs = 1;
    p->n_values = 4;
    emit(p, VP_BP_ADD, 0, 2, -1, 3);
    emit(p, VP_BP_DROP, 2, -1, -1, 0);
    emit(p, VP_BP_RETURN, 3, -1, -1, 0);
    CHECK(says(p, "drops the input, a parameter or a named input"));
    reset(p); /* an input the core does not make */
    p->n_inputs = 1;
    p->input[0] = VP_BLOCK_STREAMS;
    emit(p, VP_BP_RETURN, 0, -1, -1, 0);
    CHECK(says(p, "unknown named input"));
    reset(p); /* an in-place write (scatter_add_ of x, an index, a source): its first operand, a value the forward made */
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_SCATTER_ADD_, 2, 3, 3, 2);
    emit(p, VP_BP_DROP, 3, -1, -1, 0);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    CHECK(says(p, NULL));
    p->code[2].out = 3; /* into another value */
    CHECK(says(p, "writes its first operand"));
    p->code[2].out = 2;
    p->code[2].arg[2] = -1; /* no source */
    CHECK(says(p, "needs x and its index, source or mask"));
    reset(p); /* of the input or a parameter: borrowed */
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_MASKED_FILL_, 0, 2, -1, 0);
    CHECK(says(p, "writes its first operand"));
    reset(p);
    p->n_values = 4;
    emit(p, VP_BP_LINEAR, 0, 1, -1, 2);
    emit(p, VP_BP_LINEAR, 0, 1, -1, 3);
    emit(p, VP_BP_RETURN, 2, -1, -1, 0);
    emit(p, VP_BP_MASKED_FILL_, 3, 0, -1, 3);
    CHECK(says(p, "after the return"));

    dtensor_plans(p);
    return check_summary("test_block");
}
