/* test_tables.c — the registered tables hold together: every entry is
 * complete (the hooks the engine calls without asking are there), names
 * are unique, and each recipe key's choices are the table's names in the
 * table's order, so that an entry added to a table is a value a recipe can
 * give and nothing else has to list it. */
#include <string.h>

#include "check.h"
#include "finetune_method.h"
#include "framework.h"
#include "ops.h"
#include "optimizer.h"
#include "precision.h"
#include "recipe_keys.h"

/* The key's choices are exactly `count` names, those `name_at` gives. */
static void check_choices(const char *key_name, unsigned count, const char *(*name_at)(unsigned)) {
    const vp_recipe_key *key = vp_recipe_key_find(key_name);
    CHECK(key != NULL);
    if (!key) return;
    for (unsigned i = 0; i < count; i++) {
        const char *choice = vp_recipe_key_choice(key, i), *name = name_at(i);
        CHECK(choice && name && strcmp(choice, name) == 0);
        for (unsigned j = 0; j < i; j++) CHECK(strcmp(name_at(j), name) != 0); /* unique */
    }
    CHECK(vp_recipe_key_choice(key, count) == NULL);
}

static const char *framework_name(unsigned i) { return vp_framework_at(i) ? vp_framework_at(i)->name : NULL; }
static const char *method_name(unsigned i) { return vp_finetune_method_at(i) ? vp_finetune_method_at(i)->name : NULL; }
static const char *precision_name(unsigned i) {
    const vp_precision *p = vp_precision_get((vp_precision_id)i);
    return p ? p->name : NULL;
}
static const char *optimizer_name(unsigned i) { return vp_optimizer_at(i) ? vp_optimizer_at(i)->name : NULL; }

/* Every framework plans the default recipe (dp = 1, mixed-bf16) with the
 * hooks the shard plan and the time model call unasked. */
static void test_frameworks(void) {
    check_choices("framework", VP_FRAMEWORK_COUNT, framework_name);
    CHECK(vp_framework_at(VP_FRAMEWORK_COUNT) == NULL);
    for (unsigned i = 0; i < VP_FRAMEWORK_COUNT; i++) {
        const vp_framework_kind *f = vp_framework_at(i);
        CHECK(f && f->plan && f->dp_traffic);
        if (!f || !f->plan) continue;
        CHECK(f->optimizer_impl == VP_IMPL_FOREACH || f->optimizer_impl == VP_IMPL_FUSED);
        vp_recipe r;
        vp_recipe_defaults(&r);
        r.framework = (vp_framework)i;
        CHECK(vp_framework_of(&r) == f);
        vp_shard_plan plan;
        CHECK(vp_shard_plan_make(&r, vp_precision_get(r.precision), &plan) == NULL);
    }
}

/* A method that adapts, quantizes or adds virtual tokens freezes the base
 * it works beside; PEFT's methods all do. */
static void test_methods(void) {
    check_choices("finetune", VP_FINETUNE_COUNT, method_name);
    for (unsigned i = 0; i < VP_FINETUNE_COUNT; i++) {
        const vp_finetune_method *m = vp_finetune_method_at(i);
        CHECK(m != NULL);
        if (!m) continue;
        if (m->adapts_linear || m->quantizes_base || m->virtual_tokens || m->peft || m->trains_last_layers)
            CHECK(m->frozen_base);
        CHECK(!m->quantizes_base || m->adapts_linear); /* a quantized base is trained through adapters */
        CHECK((m->virtual_tokens != VP_VIRTUAL_NONE) == (m->leaves != NULL));
    }
}

/* Framework mixed precision: a 16-bit model under fp32 master weights. */
static void test_precisions(void) {
    check_choices("precision", VP_PREC_COUNT, precision_name);
    for (unsigned i = 0; i < VP_PREC_COUNT; i++) {
        const vp_precision *p = vp_precision_get((vp_precision_id)i);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(vp_precision_mixed(p) == vp_precision_is_mixed((vp_precision_id)i));
        if (vp_precision_mixed(p)) CHECK(p->master == VP_FP32 && p->params != VP_FP32);
    }
}

static void test_optimizers(void) {
    check_choices("optimizer", vp_optimizer_count(), optimizer_name);
    for (unsigned i = 0; i < vp_optimizer_count(); i++) {
        const vp_optimizer_kind *o = vp_optimizer_at(i);
        CHECK(o->state_bytes && o->temporaries && o->doc);
        CHECK(vp_optimizer_find(o->name) == (int)i);
    }
}

/* Every op kind has a cost class the time model knows, and every class
 * but NONE is some kind's. */
static void test_cost_classes(void) {
    bool used[VP_COST_COUNT] = {false};
    for (unsigned i = 0; i < vp_op_kind_count(); i++) {
        const vp_op_kind *kind = vp_op_kind_at(i);
        CHECK(kind->cost < VP_COST_COUNT);
        if (kind->cost < VP_COST_COUNT) used[kind->cost] = true;
    }
    for (unsigned c = VP_COST_NONE + 1; c < VP_COST_COUNT; c++) CHECK(used[c]);
}

int main(void) {
    test_frameworks();
    test_methods();
    test_precisions();
    test_optimizers();
    test_cost_classes();
    return check_summary("test_tables");
}
