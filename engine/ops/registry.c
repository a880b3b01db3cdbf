/* registry.c — the op registry: the kinds of op_list.h, by index and by
 * name. Apart from model.c so that the model's code needs no op's file. */
#include <string.h>

#include "ops.h"

#define VP_OP(name) &vp_op_##name,
static const vp_op_kind *const registry[] = {
#include "op_list.h"
};
#undef VP_OP

unsigned vp_op_kind_count(void) { return sizeof registry / sizeof registry[0]; }

const vp_op_kind *vp_op_kind_at(unsigned index) {
    return index < vp_op_kind_count() ? registry[index] : NULL;
}

const vp_op_kind *vp_op_kind_find(const char *name) {
    for (unsigned i = 0; i < vp_op_kind_count(); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}
