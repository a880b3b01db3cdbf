/* update.c — the optimizer step: where the fp32 gradients of master weights
 * come from, and what the optimizer's implementation allocates, on the
 * shard of the states each rank keeps. Temporaries follow torch.optim in
 * PyTorch 2.x (optimizer.c). */
#include "update.h"

#include "layout.h"
#include "framework.h"
#include "optimizer.h"
#include "step_private.h"

/* Leaf i of a group in torch.optim's order, or 0 for one it does not
 * step there: PEFT's prompt or prefix table, which the step keeps among the
 * embeddings' leaves, is a parameter of the PeftModel's prompt_encoder,
 * registered after the base model (model.parameters() yields it last). */
static vp_t stepped_leaf(vp_step *step, const vp_leaf_group *group, unsigned i) {
    vp_t t = vp_leaf_group_registered(group, i);
    return t && t != step->prompt && vp_at(&step->sim, t)->requires_grad ? t : 0;
}

static bool stepped_prompt(vp_step *step) { return step->prompt && vp_at(&step->sim, step->prompt)->requires_grad; }

void vp_update_for_each_trainable(vp_step *step, void (*fn)(vp_step *, vp_t, void *), void *ctx) {
    unsigned repeat = step->priv->fold_repeat;
    for (unsigned g = 0; g < vp_step_leaf_group_count(step); g++) {
        vp_leaf_group group = vp_step_leaf_group_at(step, g);
        step->priv->fold_repeat = group.repeat; /* for what fn counts outside the ledger */
        vp_ledger_begin_segment(&step->ledger);
        for (unsigned i = 0; i < group.n; i++) {
            vp_t t = stepped_leaf(step, &group, i);
            if (t) fn(step, t, ctx);
        }
        vp_ledger_repeat_segment(&step->ledger, group.repeat, 0);
    }
    step->priv->fold_repeat = repeat;
    if (stepped_prompt(step)) fn(step, step->prompt, ctx);
}

/* Megatron-LM's Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads:
 * main_param.grad = model_param.grad.float(); model_param.grad = None. */
static void grad_to_master(vp_step *step, vp_t leaf, void *ctx) {
    (void)ctx;
    vp_sim *sim = &step->sim;
    vp_tensor *t = vp_at(sim, leaf);
    vp_t master_grad = vp_new_in(sim, t->numel, VP_FP32, VP_CAT_GRADS, "master.grad");
    vp_t model_grad = vp_at(sim, leaf)->param_grad;
    vp_at(sim, leaf)->param_grad = master_grad;
    vp_drop(sim, model_grad);
}

/* DeepSpeed: the fp32 gradient of this rank's partition, made for the step
 * (single_partition_of_fp32_groups[i].grad) and dropped after it; the
 * 16-bit gradients stay where they are. With offload the partition's
 * gradients already live in host memory as fp32 (vp_layout_resident). */
static void partition_grad(vp_step *step, vp_t leaf, void *ctx) {
    const bool *release = ctx;
    const vp_tensor *t = vp_at(&step->sim, leaf);
    uint64_t bytes = vp_bytes_of(VP_FP32, vp_layout_shard_numel(step, t, vp_plan_shards(&step->priv->plan, t->expert)->states));
    bool away = step->priv->plan.states_on_host || step->priv->plan.states_on_nvme;
    if (away) {
        return;
    } else if (*release) {
        vp_ledger_release(&step->ledger, VP_CAT_GRADS, bytes, "master.grad");
    } else {
        vp_ledger_alloc(&step->ledger, VP_CAT_GRADS, bytes, "master.grad");
    }
}

typedef struct {
    vp_dtype dtype;
    bool own_dtype;              /* each tensor's temporaries in its own dtype (no master weights) */
    uint64_t raw, rounded;       /* foreach: totals over the group */
    unsigned repeat;
    unsigned temps, carried;     /* for-loop: a tensor's temporaries, and those the previous one's leave */
    unsigned carried_early;      /* for-loop: the previous one's left only while the first temporaries are made */
    unsigned upcast;             /* for-loop: more temporaries for a 16-bit tensor stepped on itself */
    uint64_t previous, worst;    /* for-loop: the last tensor's bytes; the most alive at once */
    uint64_t worst_bytes;        /* for-loop without carried ones: the tensor whose temporaries are the most, */
    unsigned worst_temps;        /* how many of them, */
    uint64_t worst_beside;       /* and the bytes beside them */
} temp_sizes;

static void measure_tensor(vp_step *step, vp_t leaf, temp_sizes *sizes) {
    const vp_tensor *t = vp_at(&step->sim, leaf);
    vp_dtype dtype = sizes->own_dtype ? (vp_dtype)t->dtype : sizes->dtype;
    uint64_t numel = vp_layout_shard_numel(step, t, vp_plan_shards(&step->priv->plan, t->expert)->states);
    uint64_t bytes = vp_bytes_of(dtype, numel);
    sizes->raw += bytes * sizes->repeat;
    sizes->rounded += vp_round_block(bytes) * sizes->repeat;
    unsigned temps = sizes->temps + (step->priv->plan.master_dtype == VP_DTYPE_NONE && vp_dtype_is_half((vp_dtype)t->dtype)
                                         ? sizes->upcast
                                         : 0);
    const vp_optimizer_kind *kind = step->priv->optimizer;
    uint64_t beside = 0;
    if (kind->beside_temps) {
        vp_param_shape shape = {numel, numel == t->numel ? t->rows : 0}; /* a flat shard is a vector */
        beside = kind->beside_temps(&shape, dtype);
    }
    uint64_t own = temps * bytes + beside; /* this tensor's temporaries at its peak */
    if (own > sizes->worst_temps * sizes->worst_bytes + sizes->worst_beside) {
        sizes->worst_temps = temps;
        sizes->worst_bytes = bytes;
        sizes->worst_beside = beside;
    }
    /* a temporary carried early is gone before the bytes beside the
     * temporaries exist: the larger of the two moments */
    uint64_t early = temps * bytes + sizes->carried_early * sizes->previous;
    uint64_t alive = (own > early ? own : early) + sizes->carried * sizes->previous;
    if (alive > sizes->worst) sizes->worst = alive;
    sizes->previous = bytes;
}

/* The states of one parameter, as bitsandbytes' paged optimizers prefetch
 * them to the GPU before its update. */
static uint64_t paged_bytes(vp_step *step, vp_t t) {
    const vp_tensor *x = vp_at(&step->sim, t);
    vp_param_shape shape = {x->numel, x->rows};
    return vp_optimizer_state_bytes(step->priv->optimizer, step->recipe, &shape, step->priv->plan.states_dtype);
}

static void page_in(vp_step *step, uint64_t bytes) {
    vp_ledger_alloc(&step->ledger, VP_CAT_OPTIMIZER, bytes, "paged optimizer state (paged in)");
    vp_ledger_release(&step->ledger, VP_CAT_OPTIMIZER, bytes, "paged optimizer state (paged in)");
}

/* One tensor's states at a time on the GPU: the largest's. */
static void paged_in(vp_step *step) {
    uint64_t largest = 0;
    for (unsigned g = 0; g < vp_step_leaf_group_count(step); g++) {
        vp_leaf_group group = vp_step_leaf_group_at(step, g);
        for (unsigned i = 0; i < group.n; i++) {
            vp_t t = group.leaves[i];
            if (!t || !vp_at(&step->sim, t)->requires_grad) continue;
            uint64_t bytes = paged_bytes(step, t);
            if (bytes > largest) largest = bytes;
        }
    }
    page_in(step, largest);
}

/* `count` temporaries of `bytes` and the bytes beside them, made and freed. */
static void make_and_free(vp_ledger *ledger, unsigned count, uint64_t bytes, uint64_t beside, const char *label) {
    for (unsigned i = 0; i < count; i++) vp_ledger_alloc(ledger, VP_CAT_TRANSIENT, bytes, label);
    if (beside) vp_ledger_alloc(ledger, VP_CAT_TRANSIENT, beside, label);
    if (beside) vp_ledger_release(ledger, VP_CAT_TRANSIENT, beside, label);
    for (unsigned i = 0; i < count; i++) vp_ledger_release(ledger, VP_CAT_TRANSIENT, bytes, label);
}

/* The implementation's temporaries as a tensor's step makes them: `temps`
 * of them a tensor, in the dtype the update runs in. */
static temp_sizes sizes_for(const vp_step *step, unsigned temps) {
    const vp_step_private *priv = step->priv;
    const vp_optimizer_kind *kind = priv->optimizer;
    /* the update runs on the master weights when there are any, else on
     * each parameter in its own dtype (LoRA's fp32 adapters in a 16-bit
     * model: like their states) */
    vp_dtype dtype = priv->plan.master_dtype != VP_DTYPE_NONE ? priv->plan.master_dtype : priv->plan.params_dtype;
    bool own_dtype = priv->plan.master_dtype == VP_DTYPE_NONE && kind->temp_dtype == VP_DTYPE_NONE;
    if (kind->temp_dtype != VP_DTYPE_NONE) dtype = kind->temp_dtype;
    bool first_moment = vp_optimizer_first_moment(kind, step->recipe);
    unsigned carried = kind->carried + (first_moment ? kind->moment_carried : 0);
    unsigned carried_early = first_moment ? 0 : kind->carried_early;
    return (temp_sizes){dtype, own_dtype, 0, 0, 1, temps, carried, carried_early, kind->upcast_temps, 0, 0, 0, 0, 0};
}

/* The implementation's temporaries, on the GPU when the states are there. */
static void temporaries(vp_step *step) {
    vp_step_private *priv = step->priv;
    const vp_optimizer_kind *kind = priv->optimizer;
    if (kind->paged && !priv->plan.states_on_host && !priv->plan.states_on_nvme) paged_in(step);
    unsigned temps = kind->temporaries(step->recipe, vp_optimizer_weight_decay(kind, step->recipe));
    if (!temps || priv->plan.states_on_host || priv->plan.states_on_nvme) return;
    temp_sizes sizes = sizes_for(step, temps);
    unsigned carried = sizes.carried, carried_early = sizes.carried_early;
    for (unsigned g = 0; g < vp_step_leaf_group_count(step); g++) {
        vp_leaf_group group = vp_step_leaf_group_at(step, g);
        sizes.repeat = group.repeat;
        for (unsigned i = 0; i < group.n; i++) { /* torch.optim steps them in model.parameters()' order */
            vp_t t = stepped_leaf(step, &group, i);
            if (t) measure_tensor(step, t, &sizes);
        }
    }
    sizes.repeat = 1;
    if (stepped_prompt(step)) measure_tensor(step, step->prompt, &sizes);
    const char *label = kind->name;
    vp_ledger *ledger = &step->ledger;
    if (step->recipe->optimizer_impl == VP_IMPL_FOREACH && !kind->per_tensor) {
        for (unsigned i = 0; i < temps; i++) vp_ledger_alloc_many(ledger, VP_CAT_TRANSIENT, sizes.raw, sizes.rounded, label);
        for (unsigned i = 0; i < temps; i++) vp_ledger_release_many(ledger, VP_CAT_TRANSIENT, sizes.raw, sizes.rounded, label);
    } else if (!carried && !carried_early) {
        make_and_free(ledger, sizes.worst_temps, sizes.worst_bytes, sizes.worst_beside, label);
    } else { /* the worst parameter: its temporaries beside what the one before it left */
        vp_ledger_alloc(ledger, VP_CAT_TRANSIENT, sizes.worst, label);
        vp_ledger_release(ledger, VP_CAT_TRANSIENT, sizes.worst, label);
    }
}

void vp_update_parameter(vp_step *step, vp_t leaf) {
    const vp_optimizer_kind *kind = step->priv->optimizer;
    if (kind->paged) page_in(step, paged_bytes(step, leaf));
    unsigned temps = kind->temporaries(step->recipe, vp_optimizer_weight_decay(kind, step->recipe));
    if (!temps) return;
    temp_sizes sizes = sizes_for(step, temps);
    measure_tensor(step, leaf, &sizes);
    /* a loop over one tensor leaves nothing for a next one to carry; a
     * foreach kernel's lists hold that tensor alone */
    if (step->recipe->optimizer_impl == VP_IMPL_FOREACH && !kind->per_tensor)
        make_and_free(&step->ledger, temps, sizes.previous, 0, kind->name);
    else
        make_and_free(&step->ledger, sizes.worst_temps, sizes.worst_bytes, sizes.worst_beside, kind->name);
}

void vp_update_step(vp_step *step) {
    step->ledger.place.phase = VP_PHASE_OPTIMIZER;
    /* optimizer_in_backward: every parameter has stepped in backward */
    if (!step->priv->optimizer->steps || step->recipe->optimizer_in_backward) return;
    bool deepspeed = vp_framework_of(step->recipe)->step_grad_partitions;
    bool make = false, release = true;
    if (deepspeed) vp_update_for_each_trainable(step, partition_grad, &make);
    else if (step->priv->plan.master_grads) vp_update_for_each_trainable(step, grad_to_master, NULL);
    temporaries(step);
    if (deepspeed) vp_update_for_each_trainable(step, partition_grad, &release);
}

static void zero_grad(vp_step *step, vp_t leaf, void *ctx) {
    (void)ctx;
    vp_t g = vp_at(&step->sim, leaf)->param_grad;
    vp_at(&step->sim, leaf)->param_grad = 0;
    vp_drop(&step->sim, g);
}

void vp_update_zero_grad(vp_step *step) {
    if (step->recipe->grads_set_to_none) vp_update_for_each_trainable(step, zero_grad, NULL);
}
