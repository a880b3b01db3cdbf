/* framework.c — the framework registry: the entries of framework_list.h,
 * indexed by the recipe's `framework`. */
#include "framework.h"

#define VP_FRAMEWORK(id, name) [VP_FRAMEWORK_##id] = &vp_framework_##name,
static const vp_framework_kind *const registry[VP_FRAMEWORK_COUNT] = {
#include "framework_list.h"
};
#undef VP_FRAMEWORK

const vp_framework_kind *vp_framework_at(unsigned index) {
    return index < VP_FRAMEWORK_COUNT ? registry[index] : NULL;
}

const vp_framework_kind *vp_framework_of(const vp_recipe *recipe) { return registry[recipe->framework]; }

/* OffloadActivations' copy stream alone, for a framework that has none
 * of its own (its tables list it last) */
static const vp_stream_ops offload_only = {{NULL, NULL, vp_offload_stream_ops}};

const vp_stream_ops *vp_framework_streams(const vp_recipe *recipe) {
    const vp_framework_kind *f = vp_framework_of(recipe);
    const vp_stream_ops *own = f->uses_streams && !f->uses_streams(recipe) ? NULL : f->streams;
    return own || !vp_recipe_offload_streams(recipe) ? own : &offload_only;
}

unsigned vp_framework_shard_group(const vp_recipe *r) {
    if (vp_framework_of(r)->hsdp && r->fsdp_shard_size) return r->fsdp_shard_size;
    return vp_shard_group(r);
}
