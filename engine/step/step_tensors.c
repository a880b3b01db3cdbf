/* step_tensors.c — the step's tensor table: the tensors the forward makes
 * once and its ops share (step_tensors.h declares the slots), dropped when
 * the frame that keeps them returns, and passed to a checkpointed chunk's
 * layer call by their roles. */
#include "op_context.h"
#include "step_private.h"

/* What step_tensors.h declares of each slot. */
typedef struct {
    vp_lifetime lifetime;
    vp_call_role role;
    unsigned argument;
    unsigned passes;
} slot_info;

static const slot_info slots[VP_TENSOR_SLOTS] = {
#define VP_TENSOR_INFO(name, lifetime, role, argument, passes) \
    [VP_TENSOR_##name] = {VP_LIVES_##lifetime, VP_CALL_##role, argument, passes},
    VP_STEP_TENSORS(VP_TENSOR_INFO)
#undef VP_TENSOR_INFO
};

/* the layer call's arguments are numbered from 1 (step_tensors.h) */
enum { ARGUMENTS_MAX = 8 };

vp_t vp_step_tensor(const vp_step *step, vp_tensor_slot slot) { return step->priv->tensors[slot].tensor; }

vp_t *vp_step_tensor_field(vp_step *step, vp_tensor_slot slot) { return &step->priv->tensors[slot].tensor; }

void vp_step_put_tensor(vp_step *step, vp_tensor_slot slot, vp_t t) {
    vp_tensor_entry *e = &step->priv->tensors[slot];
    if (!e->lent) vp_drop(&step->sim, e->tensor);
    e->tensor = t;
    e->lent = false;
}

void vp_step_lend_tensor(vp_step *step, vp_tensor_slot slot, vp_t t) {
    vp_step_put_tensor(step, slot, 0);
    step->priv->tensors[slot].tensor = t;
    step->priv->tensors[slot].lent = true;
}

void vp_step_pass_tensor(vp_step *step, vp_tensor_slot slot, unsigned passes) {
    step->priv->tensors[slot].passes = passes;
}

uint64_t vp_step_tensor_columns(const vp_step *step, vp_tensor_slot slot) { return step->priv->tensors[slot].columns; }

void vp_step_set_tensor_columns(vp_step *step, vp_tensor_slot slot, uint64_t columns) {
    step->priv->tensors[slot].columns = columns;
}

/* The slot as the table starts it: empty, passed as step_tensors.h says
 * (the columns outlive the tensor). */
static void reset(vp_tensor_entry *e, vp_tensor_slot slot) {
    e->tensor = 0;
    e->lent = false;
    e->passes = slots[slot].passes;
}

void vp_step_tensors_init(vp_step *step) {
    for (unsigned i = 0; i < VP_TENSOR_SLOTS; i++) reset(&step->priv->tensors[i], (vp_tensor_slot)i);
}

void vp_step_end_lifetime(vp_step *step, vp_lifetime lifetime) {
    for (unsigned i = 0; i < VP_TENSOR_SLOTS; i++) {
        if (slots[i].lifetime != lifetime) continue;
        vp_tensor_entry *e = &step->priv->tensors[i];
        if (!e->lent) vp_drop(&step->sim, e->tensor);
        reset(e, (vp_tensor_slot)i);
    }
}

void vp_step_take_tensors(vp_step *step, vp_lifetime lifetime, vp_t out[VP_TENSOR_SLOTS]) {
    for (unsigned i = 0; i < VP_TENSOR_SLOTS; i++) {
        vp_tensor_entry *e = &step->priv->tensors[i];
        out[i] = slots[i].lifetime == lifetime && !e->lent ? e->tensor : 0;
        if (slots[i].lifetime == lifetime) reset(e, (vp_tensor_slot)i);
    }
}

void vp_step_drop_taken(vp_sim *sim, const vp_t taken[VP_TENSOR_SLOTS]) {
    for (unsigned i = 0; i < VP_TENSOR_SLOTS; i++) vp_drop(sim, taken[i]);
}

/* Adds a field to a list of at most `max`; false when it is full. */
static bool add(vp_t **list, unsigned *n, unsigned max, vp_t *field) {
    if (*n == max) return false;
    list[(*n)++] = field;
    return true;
}

/* An input of the call that needs grad: the rerun puts its detached self
 * in the field. */
static bool add_input(vp_layer_call *call, vp_t *field) {
    if (call->n_inputs == VP_NODE_MAX_IN) return false;
    call->input_fields[call->n_inputs] = field;
    call->inputs[call->n_inputs++] = *field;
    return true;
}

vp_tensor_slot vp_step_model_mask_slot(const vp_step *step, unsigned layer) {
    return step->priv->tensors[VP_TENSOR_SLIDING_MASK].tensor && layer % 2 == 0 ? VP_TENSOR_SLIDING_MASK
                                                                                 : VP_TENSOR_CAUSAL_MASK;
}

/* One argument of the call: what its role makes of the slot. Tensors the
 * table does not hold are left out, but for results the call may make. */

static bool add_argument(vp_step *step, vp_layer_call *call, unsigned i, unsigned layer) {
    vp_tensor_entry *e = &step->priv->tensors[i];
    /* the causal mask's place in the call holds the layer's own model mask */
    vp_t *field = i == VP_TENSOR_CAUSAL_MASK ? vp_step_tensor_field(step, vp_step_model_mask_slot(step, layer))
                                             : &e->tensor;
    if (!e->passes) return true;
    bool ok = true;
    switch (slots[i].role) {
    case VP_CALL_SAVED:
        for (unsigned k = 0; k < e->passes && e->tensor; k++)
            ok = ok && add(call->saved, &call->n_saved, VP_NODE_MAX_SAVED, field);
        return ok;
    case VP_CALL_HELD:
        return !e->tensor || add(call->held, &call->n_held, VP_NODE_MAX_SAVED, field);
    case VP_CALL_RETURNED: /* an input too, once the call has one */
        ok = add(call->outputs, &call->n_outputs, VP_NODE_MAX_OUT - 1, field);
        return ok && (!e->tensor || add_input(call, field));
    case VP_CALL_INPUT:
        return !e->tensor || add_input(call, field);
    case VP_CALL_NONE:
        return true;
    }
    return true;
}

bool vp_step_layer_call(vp_step *step, vp_t x, unsigned layer, vp_layer_call *call) {
    *call = (vp_layer_call){.inputs = {x}, .n_inputs = 1};
    bool ok = true;
    for (unsigned argument = 1; argument <= ARGUMENTS_MAX; argument++)
        for (unsigned i = 0; i < VP_TENSOR_SLOTS; i++)
            if (slots[i].argument == argument) ok = add_argument(step, call, i, layer) && ok;
    /* the chunk's router logits: the outputs' room past the table's */
    vp_step_private *p = step->priv;
    for (unsigned i = 0; i < VP_CHUNK_ROUTER_MAX && call->n_outputs < VP_NODE_MAX_OUT - 1; i++)
        call->outputs[call->n_outputs++] = &p->chunk_router_logits[i];
    return ok;
}
