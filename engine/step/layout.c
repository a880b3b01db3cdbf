/* layout.c — data parallelism on the timeline. The plan (shard.c) says what
 * each rank keeps; this file puts it on the ledger where the frameworks put
 * it: resident shards and buckets at setup, all-gathers around each layer,
 * reduce-scatters after each layer's backward. */
#include "layout.h"

#include <stdlib.h>

#include "finetune.h"
#include "framework.h"
#include "lora.h"
#include "ops.h"
#include "optimizer.h"
#include "step_private.h"
#include "zero3.h"

typedef struct vp_layer_hook {
    vp_step *step;
    vp_t *leaves;
    unsigned n;
    uint64_t gather;      /* the layer's parameters, gathered, in the compute dtype */
    uint64_t prefetch;    /* gathered ahead of use */
    vp_zero3_kept kept;   /* what DeepSpeed's coordinator keeps gathered after the layer's forward, recompute */
    uint64_t held;        /* of `gather`, what is gathered now */
    uint64_t prefetched;  /* of `prefetch`, what is gathered now */
    bool deferred;        /* its input needs no gradient: released when backward ends */
    bool gathered;        /* its parameters are gathered for a pass now */
    uint64_t reduce;      /* FSDP2: its reduce-scatter input */
    /* FSDP2's buffers that outlive their collective (framework_fsdp2.c), on
     * the last block's hook (collective_slots): what of them lives now */
    uint64_t gather_output, reduce_input;
    uint64_t cast_scratch; /* FSDP2's float8 all-gather: its largest weight shard's fp32 copies in the cast */
    uint64_t host_copy;   /* FSDP2's CPUOffloadPolicy: its parameter shards copied to the GPU for the all-gather */
    uint64_t copy_in;     /* FSDP2's mixed precision: its shards cast to param_dtype for the all-gather */
    uint64_t accumulated; /* FSDP2 in a pipeline: its unsharded gradients accumulated (defers_reduce) */
    /* FSDP2: the unit whose post-forward was recorded just before this
     * unit's last (post_forward_order; NULL: none, or the root) */
    const struct vp_layer_hook *recorded_after;
} vp_layer_hook;

/* A parameter's dim 0: a matrix's rows (a Conv1D weight is stored
 * (in, out): numel / out), a vector's length. */
static uint64_t dim0_of(uint64_t numel, uint64_t rows, bool conv1d) {
    if (!rows) return numel;
    return conv1d ? numel / rows : rows;
}

uint64_t vp_layout_shard_numel(const vp_step *step, const vp_tensor *t, unsigned ranks) {
    return vp_plan_shard_numel(&step->priv->plan, t->numel, dim0_of(t->numel, t->rows, t->conv1d), ranks);
}

void vp_layout_host(vp_step *step, uint64_t bytes, unsigned repeat, bool nvme) {
    if (nvme) step->priv->nvme_bytes += bytes * repeat;
    else {
        step->priv->host_bytes += bytes * repeat;
        if (step->priv->host_bytes > step->priv->host_peak) step->priv->host_peak = step->priv->host_bytes;
    }
}

/* apex ASP's init_model_for_pruning: every trained nn.Linear weight gets a
 * bool mask buffer of its own size, unless an fp32 or fp16 weight's shape
 * does not suit the sparse tensor cores (rows a multiple of 8, columns of
 * 16); bf16 weights are not checked. The step then masks gradients and
 * weights in place: nothing else. */
static void asp_mask(vp_step *step, uint64_t rows, uint64_t numel, vp_dtype dtype) {
    if (step->recipe->sparsity != VP_SPARSITY_2_4 || !rows) return;
    uint64_t columns = numel / rows;
    if ((dtype == VP_FP32 || dtype == VP_FP16) && (rows % 8 || columns % 16)) return;
    vp_leaf(&step->sim, numel, VP_BOOL, VP_CAT_BUFFERS, false, "asp mask");
}

/* bitsandbytes' Params4bit (quantize_4bit, bitsandbytes 0.45-0.46): the
 * packed storage is the parameter; its quant_state keeps, per weight, the
 * absmax of every 64-element block (fp32; double-quantized: uint8, with an
 * fp32 absmax per 256 blocks and an fp32 offset) and a 16-value fp32 code
 * table of its own (get_4bit_type). The state is no parameter: FSDP and
 * ZeRO-3 neither shard nor offload it. */
static void quant_state_leaves(vp_step *step, uint64_t numel) {
    vp_sim *sim = &step->sim;
    uint64_t blocks = numel / 64 + (numel % 64 != 0);
    if (vp_double_quantizes(step->recipe)) {
        vp_leaf(sim, blocks, VP_UINT8, VP_CAT_PARAMS, false, "quant_state.absmax");
        vp_leaf(sim, blocks / 256 + (blocks % 256 != 0), VP_FP32, VP_CAT_PARAMS, false, "quant_state.state2.absmax");
        vp_leaf(sim, 1, VP_FP32, VP_CAT_PARAMS, false, "quant_state.offset");
    } else {
        vp_leaf(sim, blocks, VP_FP32, VP_CAT_PARAMS, false, "quant_state.absmax");
    }
    vp_leaf(sim, 16, VP_FP32, VP_CAT_PARAMS, false, "quant_state.code");
}

/* A 4-bit weight's packed bytes on each of `ranks`: bitsandbytes packs two
 * values a byte into its quant_storage, bf16 under FSDP (axolotl's loader
 * and Answer.AI's set bnb_4bit_quant_storage = bfloat16): a
 * [ceil(numel / 4), 1] tensor, which FSDP2 shards on dim 0 (axolotl's
 * fsdp2_qlora patch keeps it a Params4bit: ceil(rows / ranks) rows of 2
 * bytes); FSDP's flat parameters and ZeRO-3 split the packed bytes evenly. */
static uint64_t packed_shard_bytes(const vp_shard_plan *plan, uint64_t numel, unsigned ranks) {
    uint64_t bytes = vp_bytes_of(VP_INT4, numel);
    if (!plan->dim0_shards) return vp_shard_numel(bytes, ranks);
    return vp_shard_numel(bytes / 2 + bytes % 2, ranks) * 2;
}

static vp_t make_leaf(vp_step *step, const vp_leaf_spec *spec, bool trainable, unsigned repeat) {
    const vp_shard_plan *plan = &step->priv->plan;
    if (spec->buffer && spec->per_position) { /* sized by the sequence the model last saw */
        vp_dtype dtype = spec->dtype == VP_DTYPE_NONE ? step->activation : spec->dtype;
        return vp_leaf(&step->sim, vp_numel(&step->sim, spec->numel, step->seq), dtype, VP_CAT_BUFFERS, false,
                       spec->label);
    }
    if (spec->buffer) /* buffers are never sharded (ZeRO-3, FSDP) */
        return vp_leaf(&step->sim, spec->numel, spec->dtype, VP_CAT_BUFFERS, false, spec->label);
    vp_dtype compute = spec->dtype == VP_DTYPE_NONE ? plan->gather_dtype : spec->dtype;
    vp_dtype resident = spec->dtype == VP_DTYPE_NONE ? plan->params_dtype : spec->dtype;
    /* FSDP's mixed precision gathers every parameter of a unit in its
     * param_dtype, one kept in the shards' dtype too (PEFT's fp32 adapters
     * beside fp32 shards: FSDP2's FSDPParam.init_dtype_attrs, FSDP1's flat
     * parameter) */
    if ((plan->gather || plan->keeps_gathered) && resident == plan->params_dtype) compute = plan->gather_dtype;
    bool quantized = vp_quantizes(step->recipe, spec);
    bool int8 = quantized && step->recipe->quant == VP_QUANT_INT8;
    if (quantized) { /* bitsandbytes' Params4bit: packed, beside its quant_state; Int8Params: int8 */
        resident = int8 ? VP_INT8 : VP_INT4;
        compute = int8 ? VP_INT8 : step->recipe->compute_dtype;
        if (!int8) quant_state_leaves(step, spec->numel);
    }
    /* from_pretrained keeps _keep_in_fp32_modules in fp32 when it
     * quantizes or loads in fp16 (use_keep_in_fp32_modules) */
    bool loaded_fp16 = step->precision->params == VP_FP16 && !vp_precision_mixed(step->precision);
    if (spec->keep_fp32 && (vp_finetune_method_of(step->recipe)->quantizes_base || loaded_fp16))
        resident = compute = VP_FP32;
    /* Int8Params' SCB: an fp32 absmax per output row, beside the weight */
    if (int8) vp_leaf(&step->sim, spec->out_features, VP_FP32, VP_CAT_PARAMS, false, "SCB");
    uint64_t shard = vp_bytes_of(resident, vp_plan_shard_numel(plan, spec->numel, dim0_of(spec->numel, spec->rows, spec->conv1d),
                                                            vp_plan_shards(plan, spec->expert)->params));
    /* FSDP-QLoRA (bnb_4bit_quant_storage): the packed bytes are the storage
     * FSDP or ZeRO-3 shards (and offloads) */
    if (quantized && !int8 && plan->shards.params > 1) shard = packed_shard_bytes(plan, spec->numel, plan->shards.params);
    bool away = plan->params_on_host || plan->params_on_nvme;
    if (away) vp_layout_host(step, shard, repeat, plan->params_on_nvme);
    vp_t leaf = vp_leaf_resident(&step->sim, spec->numel, compute, away ? 0 : shard, VP_CAT_PARAMS, trainable,
                                 spec->label);
    vp_at(&step->sim, leaf)->grad_drop = plan->grads == VP_GRADS_BUCKET;
    vp_at(&step->sim, leaf)->expert = spec->expert;
    vp_at(&step->sim, leaf)->rows = spec->rows;
    vp_at(&step->sim, leaf)->quantized = quantized;
    /* Transformer Engine's FP8 linears (not Megatron's output layer or a
     * router): the FP8 weight cached across micro-batches with its
     * transpose (both on Hopper: get_weight_workspace, rowwise and
     * columnwise data), and the DelayedScaling state, an fp32 amax history
     * of amax_history_len = 1024 and a scale for each of 3 forward and 2
     * backward tensors */
    bool fp8 = step->precision->fp8_gemms && spec->out_features && spec->dtype == VP_DTYPE_NONE && !quantized &&
               spec->module != VP_MODULE_LM_HEAD && spec->module != VP_MODULE_GATE;
    /* torchao's Float8Linear swaps nn.Linear modules only (not transformers'
     * Conv1D); torchtitan's filter (components/quantization/utils.py
     * module_filter_fn) skips the output head and any whose in or out
     * features are not multiples of 16 (the FP8 tensor cores' alignment) */
    if (fp8 && step->precision->fp8_dynamic) {
        uint64_t in = spec->numel / spec->out_features;
        fp8 = !spec->conv1d && spec->out_features % 16 == 0 && in % 16 == 0;
    }
    if (fp8 && !step->precision->fp8_dynamic) {
        vp_ledger_alloc(&step->ledger, VP_CAT_PARAMS, vp_bytes_of(VP_FP8_E4M3, 2 * spec->numel), "fp8 weight and transpose");
        vp_ledger_alloc(&step->ledger, VP_CAT_BUFFERS, vp_bytes_of(VP_FP32, (1024 + 1) * 5), "fp8 scaling state");
    }
    vp_at(&step->sim, leaf)->fp8 = fp8;
    vp_at(&step->sim, leaf)->conv1d = spec->conv1d;
    if (trainable && spec->out_features && !spec->conv1d) asp_mask(step, spec->out_features, spec->numel, compute);
    return leaf;
}

vp_t vp_layout_extra_leaf(vp_step *step, const vp_leaf_spec *spec) {
    vp_leaf_spec own = *spec;
    own.dtype = vp_lora_dtype(step->recipe, step->priv->plan.params_dtype); /* PEFT's adapter dtype rule */
    return make_leaf(step, &own, true, 1);
}

/* The slot of spec j's first copy within its op. */
static unsigned j_slot(const vp_leaf_spec *specs, unsigned j) {
    unsigned slot = 0;
    for (unsigned i = 0; i < j; i++) slot += vp_leaf_count(&specs[i]);
    return slot;
}

/* LoRA's A [r x in] and B [out x r] for a weight, trained, in the
 * adapters' dtype, placed like any parameter; with DoRA its magnitude
 * [out], the weight's column norms (lora_magnitude_vector, cast to the
 * adapters' dtype like them by autocast_adapter_dtype). */
static void make_adapters(vp_step *step, const vp_leaf_spec *spec, vp_t weight, vp_t *out, unsigned repeat) {
    uint64_t r = step->recipe->lora_rank, in = spec->numel / spec->out_features;
    vp_dtype dtype = vp_lora_dtype(step->recipe, step->priv->plan.params_dtype);
    vp_leaf_spec a = vp_param(r * in, "lora_A.weight", VP_MODULE_NONE, 0);
    vp_leaf_spec b = vp_param(spec->out_features * r, "lora_B.weight", VP_MODULE_NONE, 0);
    a.dtype = b.dtype = dtype;
    a.rows = r;
    b.rows = spec->out_features;
    out[0] = make_leaf(step, &a, true, repeat);
    out[1] = make_leaf(step, &b, true, repeat);
    asp_mask(step, r, a.numel, dtype); /* lora_A and lora_B are nn.Linear too */
    asp_mask(step, spec->out_features, b.numel, dtype);
    if (step->recipe->use_dora) {
        vp_leaf_spec m = vp_param(spec->out_features, "lora_magnitude_vector", VP_MODULE_NONE, 0);
        m.dtype = dtype;
        out[2] = make_leaf(step, &m, true, repeat);
    }
    vp_lora_adapter adapter = {weight, out[0], out[1], out[2], spec->out_features, 0, 0};
    if (!vp_step_add_adapter(step, &adapter)) step->sim.status = VP_SIM_NOMEM;
}

/* PEFT's lora.ParamWrapper around a 3-D experts parameter [experts, ...]
 * (update_layer): lora_A = nn.Linear(in, r x experts) and lora_B =
 * nn.Linear(r x experts, out), bias-free, trained, in the adapters' dtype
 * (autocast_adapter_dtype casts them as it casts lora.Linear's). */
static void make_param_adapters(vp_step *step, const vp_leaf_spec *spec, vp_t weight, vp_t *out, unsigned repeat) {
    uint64_t r = step->recipe->lora_rank, experts = spec->rows;
    vp_dtype dtype = vp_lora_dtype(step->recipe, step->priv->plan.params_dtype);
    vp_leaf_spec a = vp_param(r * experts * spec->param_in, "lora_A.weight", VP_MODULE_NONE, 0);
    vp_leaf_spec b = vp_param(spec->param_out * r * experts, "lora_B.weight", VP_MODULE_NONE, 0);
    a.dtype = b.dtype = dtype;
    a.rows = r * experts;
    b.rows = spec->param_out;
    out[0] = make_leaf(step, &a, true, repeat);
    out[1] = make_leaf(step, &b, true, repeat);
    vp_lora_adapter adapter = {weight, out[0], out[1], 0, spec->param_out, experts, spec->param_in};
    if (!vp_step_add_adapter(step, &adapter)) step->sim.status = VP_SIM_NOMEM;
}

/* Where each leaf comes from, for vp_step_recast_leaf to name it. */
static void note_origin(vp_step *step, vp_t leaf, const vp_op *op, unsigned spec, unsigned copy) {
    if (step->priv->n_origins == step->priv->cap_origins) {
        unsigned cap = step->priv->cap_origins ? step->priv->cap_origins * 2 : 256;
        vp_leaf_origin *grown = realloc(step->priv->origins, cap * sizeof *grown);
        if (!grown) {
            step->sim.status = VP_SIM_NOMEM;
            return;
        }
        step->priv->origins = grown;
        step->priv->cap_origins = cap;
    }
    step->priv->origins[step->priv->n_origins++] = (vp_leaf_origin){leaf, op, spec, copy};
}

/* The spec a leaf is made from: its op's, in the dtype a first run found it
 * recast to (vp_step_recast_leaf), if any. */
static vp_leaf_spec leaf_spec(const vp_step *step, const vp_op *op, const vp_leaf_spec *specs, unsigned j,
                              unsigned copy) {
    vp_leaf_spec own = specs[j];
    for (unsigned i = 0; i < step->priv->n_recasts; i++)
        if (step->priv->recasts[i].op == op && step->priv->recasts[i].spec == j && step->priv->recasts[i].copy == copy)
            own.dtype = step->priv->recasts[i].dtype;
    return own;
}

void vp_layout_create_leaves(vp_step *step, const vp_op *ops, unsigned n, vp_t *slots, unsigned repeat, bool frozen) {
    vp_step_private *priv = step->priv;
    for (unsigned i = 0; i < n; i++) {
        const vp_op *op = &ops[i];
        vp_leaf_spec specs[VP_OP_MAX_LEAVES];
        vp_ranks split = {step->tp, step->ep, step->etp, vp_framework_of(step->recipe)->dtensor_tp,
                          vp_recipe_fused_experts(step->recipe)};
        unsigned k = op->kind->leaves ? op->kind->leaves(op, &split, specs) : 0;
        unsigned slot = op->slot;
        for (unsigned j = 0; j < k; j++) {
            unsigned count = vp_leaf_count(&specs[j]);
            if (specs[j].numel)
                for (unsigned c = 0; c < count; c++) {
                    vp_leaf_spec own = leaf_spec(step, op, specs, j, c);
                    /* modules_to_save: the original, frozen, then the copy the model uses */
                    if (vp_finetune_keeps_original(step->recipe, &own)) make_leaf(step, &own, false, repeat);
                    slots[slot + c] = make_leaf(step, &own, vp_finetune_trains(step->recipe, &own, frozen), repeat);
                    note_origin(step, slots[slot + c], op, j, c);
                }
            slot += count;
        }
        /* then LoRA's adapters, A and B (and DoRA's magnitude) beside each
         * targeted weight, or beside an experts parameter target_parameters names */
        for (unsigned j = 0; j < k; j++) {
            if (!vp_leaf_adaptable(&specs[j])) continue;
            unsigned count = vp_leaf_count(&specs[j]);
            bool linear = specs[j].out_features && vp_lora_adapts(step->recipe, &specs[j]);
            bool param = !specs[j].out_features && vp_lora_adapts_param(step->recipe, &specs[j], priv->leaves_layer);
            for (unsigned c = 0; specs[j].numel && (linear || param) && c < count; c++) {
                vp_t weight = slots[op->slot + j_slot(specs, j) + c];
                vp_t *adapters = slots + slot + VP_ADAPTER_SLOTS * c;
                if (linear) make_adapters(step, &specs[j], weight, adapters, repeat);
                else make_param_adapters(step, &specs[j], weight, adapters, repeat);
            }
            slot += VP_ADAPTER_SLOTS * count;
        }
        /* a tied head's nn.Linear holds the embedding's weight: ASP masks it there */
        if (op == step->model->facts.tied_head && step->stage.embed) {
            unsigned embedding = step->model->section[VP_SECTION_EMBED].ops[0].slot;
            const vp_tensor *w = vp_at(&step->sim, priv->embed_leaves[embedding]);
            if (w->requires_grad) asp_mask(step, w->rows, w->numel, (vp_dtype)w->dtype);
        }
        vp_layout_create_leaves(step, op->children, op->n_children, slots, repeat, frozen);
    }
}

/* One tensor of state: on the GPU (a ledger entry) or away. */
static void place(vp_step *step, vp_category category, uint64_t bytes, unsigned repeat, bool host, bool nvme,
                  const char *label) {
    if (host || nvme) vp_layout_host(step, bytes, repeat, nvme);
    else vp_ledger_alloc(&step->ledger, category, bytes, label);
}

void vp_layout_resident(vp_step *step, const vp_t *leaves, unsigned n, unsigned repeat) {
    vp_sim *sim = &step->sim;
    const vp_shard_plan *plan = &step->priv->plan;
    bool host = plan->states_on_host, nvme = plan->states_on_nvme;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(sim, leaves[i]) : NULL;
        if (!t || !t->requires_grad) continue;
        const vp_shards *shards = vp_plan_shards(plan, t->expert);
        /* an optimizer stepping on the parameter itself keeps states like it
         * (zeros_like): a leaf in a dtype of its own (LoRA's fp32 adapters in
         * a 16-bit model) has states in that dtype */
        vp_dtype states_dtype = plan->master_dtype == VP_DTYPE_NONE && t->dtype != plan->gather_dtype
                                    ? (vp_dtype)t->dtype : plan->states_dtype;
        uint64_t numel = t->numel, states = vp_layout_shard_numel(step, t, shards->states);
        /* the fp32 master copy belongs to the optimizer (apex, DeepSpeed and
         * Megatron wrap it): without one there is none */
        if (plan->master_dtype != VP_DTYPE_NONE && step->priv->optimizer->steps)
            place(step, VP_CAT_MASTER, vp_bytes_of(plan->master_dtype, states), repeat, host, nvme, "master weights");
        /* states of this rank's shard; bitsandbytes' paged states live in
         * unified memory, which the host backs (paged in at the step) */
        vp_param_shape shape = {states, states == numel ? t->rows : 0};
        uint64_t state_bytes = vp_optimizer_state_bytes(step->priv->optimizer, step->recipe, &shape, states_dtype);
        bool paged = step->priv->optimizer->paged;
        place(step, VP_CAT_OPTIMIZER, state_bytes, repeat, host || paged, nvme, "optimizer state");
        if (plan->grads_on_host) /* FSDP2's CPUOffloadPolicy: the sharded gradient on the host */
            vp_layout_host(step, vp_bytes_of(plan->shard_grads_dtype, vp_layout_shard_numel(step, t, shards->grads)),
                           repeat, false);
        if (plan->grads == VP_GRADS_BUCKET) {
            /* ZeRO-2/3's gradient partition (offloaded: fp32 on the host); DDP's
             * buckets the .grad views live in */
            uint64_t part = vp_layout_shard_numel(step, t, shards->grads);
            if (host || nvme) place(step, VP_CAT_GRADS, vp_bytes_of(VP_FP32, part), repeat, host, nvme, "grad partition");
            else vp_ledger_alloc(&step->ledger, VP_CAT_GRADS, vp_bytes_of(plan->shard_grads_dtype, part), "grad partition");
        } else if (plan->bucket_bytes_per_param_byte) {
            vp_ledger_alloc(&step->ledger, VP_CAT_COMM, vp_bytes_of(plan->grads_dtype, numel), "ddp bucket");
        }
        if (!step->recipe->grads_set_to_none && plan->grads == VP_GRADS_KEEP) {
            vp_t grad = vp_new_in(sim, numel, (vp_dtype)t->grad_dtype, VP_CAT_GRADS, "param.grad");
            vp_at(sim, leaves[i])->param_grad = grad; /* vp_new_in may move the tensor array */
        }
    }
}

/* ---- per-layer hooks ---- */

/* FSDP2 with torchao's float8 all-gather (fp8_all_gather): a float8
 * linear's weight is all-gathered as its float8 data, 1 byte an element
 * (fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather
 * returns float8_training_tensor._data; its scale goes as metadata) */
static vp_dtype gathered_dtype(const vp_step *step, const vp_tensor *t) {
    return t->fp8 && step->recipe->fp8_all_gather ? VP_FP8_E4M3 : step->priv->plan.gather_dtype;
}

/* the padded unsharded buffer: every rank's shard, side by side */
static uint64_t unsharded_bytes(vp_step *step, const vp_tensor *t) {
    unsigned ranks = step->priv->plan.shards.params;
    return vp_bytes_of(gathered_dtype(step, t), vp_layout_shard_numel(step, t, ranks) * ranks);
}

/* fsdp_pre_all_gather casts each float8 weight's fp32 shard with
 * hp_tensor_to_float8_dynamic (torchao 0.19): the abs for the amax goes
 * first, then `shard.to(float32) * scale` (the shard is fp32: to() returns
 * it) and its clamp, two fp32 copies alive together beside the 1-byte
 * result; the shards are cast one after another, the largest matters. */
static uint64_t float8_cast_scratch(vp_step *step, const vp_t *leaves, unsigned n) {
    uint64_t most = 0;
    unsigned ranks = step->priv->plan.shards.params;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (!t || !t->fp8 || !step->recipe->fp8_all_gather) continue;
        uint64_t bytes = 2 * vp_bytes_of(VP_FP32, vp_layout_shard_numel(step, t, ranks));
        if (bytes > most) most = bytes;
    }
    return most;
}

/* FSDP2 with CPUOffloadPolicy: a unit's all-gather inputs are its
 * parameters' shards copied to the GPU (FSDPParam.all_gather_inputs,
 * _fsdp_param.py, torch 2.6: sharded_param_data.to(device, non_blocking=True)),
 * in their resident dtype, all of the unit's made before
 * foreach_all_gather copies them into the all-gather input and drops them.
 * (Under mixed precision each is then cast to param_dtype, per parameter:
 * not counted. Without offload the casts are one flat buffer,
 * copy_in_bytes.) */
static uint64_t host_copy_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    const vp_shard_plan *plan = &step->priv->plan;
    if (!plan->params_on_host || !plan->dim0_shards) return 0;
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (!t || t->category != VP_CAT_PARAMS) continue;
        vp_dtype resident = t->dtype != plan->gather_dtype ? (vp_dtype)t->dtype : plan->params_dtype;
        total += vp_bytes_of(resident, vp_layout_shard_numel(step, t, plan->shards.params));
    }
    return total;
}

/* FSDP2 with a param_dtype other than the shards' (mixed precision): the
 * all-gather's inputs are the unit's padded shards cast into one flat
 * buffer of param_dtype (_get_param_all_gather_inputs, the foreach-copy
 * path: flat_foreach_copy_input, torch 2.4-2.6 _fsdp_collectives.py),
 * made before the all-gather output on the copy-in stream and gone once
 * all_gather_copy_in has copied it over. Float8 weights (their
 * fsdp_pre_all_gather), offloaded shards (host_copy_bytes) and packed
 * 4-bit ones take the per-parameter path instead. Its bytes: */
static uint64_t copy_in_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    const vp_shard_plan *plan = &step->priv->plan;
    if (!plan->collective_buffers || plan->params_on_host || plan->params_dtype == plan->gather_dtype) return 0;
    uint64_t numel = 0;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (!t || t->quantized || (t->fp8 && step->recipe->fp8_all_gather)) continue;
        if (!vp_layout_gathered_bytes(step, leaves[i])) continue; /* not gathered: no parameter, or persistent */
        numel += vp_layout_shard_numel(step, t, plan->shards.params);
    }
    return vp_bytes_of(plan->gather_dtype, numel);
}

/* A transient the size of `bytes`: made and dropped at once. */
static void scratch(vp_step *step, uint64_t bytes, const char *label) {
    vp_ledger_alloc(&step->ledger, VP_CAT_TRANSIENT, bytes, label);
    vp_ledger_release(&step->ledger, VP_CAT_TRANSIENT, bytes, label);
}

static bool persistent(const vp_step *step, const vp_tensor *t) {
    return t->numel < step->priv->plan.persistence_threshold;
}

uint64_t vp_layout_gathered_bytes(vp_step *step, vp_t leaf) {
    const vp_tensor *t = leaf ? vp_at(&step->sim, leaf) : NULL;
    if (!t || t->category != VP_CAT_PARAMS || persistent(step, t)) return 0;
    if (t->quantized) { /* the packed 4-bit storage, gathered as it is */
        unsigned ranks = step->priv->plan.shards.params;
        return packed_shard_bytes(&step->priv->plan, t->numel, ranks) * ranks;
    }
    return unsharded_bytes(step, t);
}

static uint64_t gathered_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) total += vp_layout_gathered_bytes(step, leaves[i]);
    return total;
}

/* DeepSpeed's persistent parameters (ds_persist): gathered at the first
 * use and never released, a whole copy on every rank. */
static uint64_t persistent_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (t && t->category == VP_CAT_PARAMS && persistent(step, t)) total += unsharded_bytes(step, t);
    }
    return total;
}

/* FSDP2's reduce-scatter input for a unit: every trainable parameter's
 * padded unsharded gradient in reduce_dtype, one flat buffer
 * (foreach_reduce, _fsdp_collectives.py: reduce_scatter_input = torch.empty
 * of the padded unsharded sizes' sum, in reduce_dtype). */
static uint64_t reduce_input_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    uint64_t total = 0;
    unsigned ranks = step->priv->plan.shards.grads;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (t && t->category == VP_CAT_PARAMS && t->requires_grad)
            total += vp_bytes_of(step->priv->plan.reduce_dtype, vp_layout_shard_numel(step, t, ranks) * ranks);
    }
    return total;
}

/* FSDP2 keeps one all-gather output (in forward) and one reduce-scatter
 * input alive after their collectives, each until the next of its kind
 * (FSDPParamGroup.wait_for_unshard: comm_ctx.all_gather_state;
 * post_backward: comm_ctx.reduce_scatter_state): one slot of each, as
 * large as the largest block's, held from the first such collective on.
 * The slots sit on the last block's hook, the unit backward starts with,
 * which the step never folds (step.c, coordinated_from), so that a folded run of
 * blocks repeats no event of theirs. */
static vp_layer_hook *collective_slots(vp_step *step) {
    return step->priv->plan.collective_buffers && step->priv->n_layer_instances ? &step->priv->hooks[step->priv->n_layer_instances - 1] : NULL;
}

static void hold_slot(vp_step *step, uint64_t *live, uint64_t bytes, const char *label) {
    vp_ledger_alloc(&step->ledger, VP_CAT_COMM, bytes - *live, label);
    *live = bytes;
}

static void free_slot(vp_step *step, uint64_t *live, const char *label) {
    vp_ledger_release(&step->ledger, VP_CAT_COMM, *live, label);
    *live = 0;
}

/* An all-gather output of `bytes` made into `*live` (its slot; NULL: one
 * of its own), its copy-in buffer of `copy_in` bytes (copy_in_bytes)
 * alive beside it until it is made. */
static void make_gather_output(vp_step *step, uint64_t copy_in, uint64_t *live, uint64_t bytes, const char *label) {
    vp_ledger_alloc(&step->ledger, VP_CAT_COMM, copy_in, "all_gather.copy_in");
    if (live) hold_slot(step, live, bytes, label);
    else vp_ledger_alloc(&step->ledger, VP_CAT_COMM, bytes, label);
    vp_ledger_release(&step->ledger, VP_CAT_COMM, copy_in, "all_gather.copy_in");
}

static bool reshard_after_forward(const vp_step *step) {
    return step->priv->plan.gather && !step->priv->plan.keeps_gathered;
}

/* The b-th decoder layer of the final ops' branches (a multi-token
 * prediction module's: op_branch.c), as slots of the final section; false
 * past the last. Each is a unit of its own, as the model's layers are:
 * DeepSpeed's hooks gather and release every module at use, and FSDP's
 * auto-wrap policy wraps it as the model's layers (the same decoder-layer
 * class). */
static bool branch_layer_at(const vp_step *step, unsigned b, unsigned *first, unsigned *n) {
    const vp_section *final = &step->model->section[VP_SECTION_FINAL];
    for (unsigned i = 0; step->stage.final && i < final->n_ops; i++) {
        const vp_op_kind *kind = final->ops[i].kind;
        if (kind->unit_slots && kind->unit_slots(&final->ops[i], first, n) && b-- == 0) return true;
    }
    return false;
}

static unsigned count_branch_layers(const vp_step *step) {
    unsigned b = 0, first, n;
    while (branch_layer_at(step, b, &first, &n)) b++;
    return b;
}

static void prepare_gather(vp_step *step, vp_layer_hook *h) {
    h->gather = gathered_bytes(step, h->leaves, h->n);
    h->cast_scratch = float8_cast_scratch(step, h->leaves, h->n);
    h->host_copy = host_copy_bytes(step, h->leaves, h->n);
    h->copy_in = copy_in_bytes(step, h->leaves, h->n);
    /* DeepSpeed prefetches stage3_prefetch_bucket_size elements ahead;
     * FSDP's BACKWARD_PRE prefetch is the next layer, in backward only */
    uint64_t ahead = vp_framework_of(step->recipe)->param_coordinator
                         ? vp_bytes_of(step->priv->plan.gather_dtype, step->priv->plan.prefetch_elements)
                         : h->gather;
    h->prefetch = ahead < h->gather ? ahead : h->gather;
    if (!reshard_after_forward(step)) h->prefetch = 0; /* nothing to gather again in backward */
}

/* FSDP's backward prefetch gathers the unit that ran before the current
 * one in forward (FSDP2: FSDPState._backward_prefetch over
 * post_forward_order; FSDP1's BACKWARD_PRE: the previous handle in the
 * execution order): before the first block that is the root, which stays
 * gathered, so the first block's pre-backward prefetches nothing. */
bool vp_layout_first_prefetches_none(const vp_step *step) {
    return step->priv->plan.gather && !vp_framework_of(step->recipe)->param_coordinator &&
           reshard_after_forward(step) && step->stage.embed;
}

bool vp_layout_prepare(vp_step *step) {
    vp_step_private *priv = step->priv;
    const vp_model *m = step->model;
    unsigned slots = vp_model_layer_slots(m);
    priv->n_branch_layers = count_branch_layers(step);
    unsigned units = priv->n_layer_instances + priv->n_branch_layers;
    priv->hooks = calloc(units + 1, sizeof *priv->hooks);
    vp_zero3_kept *kept = calloc(units + 1, sizeof *kept);
    bool traced = priv->hooks && kept && (!priv->plan.gather || vp_zero3_kept_bytes(step, kept));
    if (!traced) {
        free(kept);
        return false;
    }
    uint64_t persistent_total = 0;
    for (unsigned i = 0; i < priv->n_layer_instances; i++) {
        vp_layer_hook *h = &priv->hooks[i];
        h->step = step;
        h->leaves = priv->layer_leaves + (size_t)i * slots;
        h->n = slots;
        h->kept = kept[i];
        if (priv->plan.gather) {
            /* a folded instance stands for several layers' persistent parameters */
            persistent_total += persistent_bytes(step, h->leaves, h->n) * vp_step_leaf_group_at(step, i + 1).repeat;
            prepare_gather(step, h);
            /* torchtitan's apply_fsdp: the last block not resharded after forward */
            if (step->priv->plan.keeps_last_block && i + 1 == step->priv->n_layer_instances) h->kept.forward = h->gather;
        }
    }
    if (vp_layout_first_prefetches_none(step) && priv->n_layer_instances) priv->hooks[0].prefetch = 0;
    /* the branches' layers: their parameters (persistent ones too) are the
     * root's leaves, gathered as a unit's, not with the root */
    uint64_t branch_gather = 0, branch_host_copy = 0, branch_copy_in = 0;
    for (unsigned b = 0; b < priv->n_branch_layers; b++) {
        vp_layer_hook *h = &priv->hooks[priv->n_layer_instances + b];
        unsigned first, n;
        branch_layer_at(step, b, &first, &n);
        h->step = step;
        h->leaves = priv->final_leaves + first;
        h->n = n;
        h->kept = kept[priv->n_layer_instances + b];
        if (priv->plan.gather) {
            prepare_gather(step, h);
            branch_gather += h->gather;
            branch_host_copy += h->host_copy;
            branch_copy_in += h->copy_in;
        }
    }
    free(kept);
    for (unsigned i = 0; collective_slots(step) && i < priv->n_layer_instances; i++)
        priv->hooks[i].reduce = reduce_input_bytes(step, priv->hooks[i].leaves, priv->hooks[i].n);
    /* FSDP's root unit (the embeddings, final norm and head; an
     * encoder-decoder's bridge: the encoder's final norm, the decoder's
     * position-bias table) is not resharded between forward and backward;
     * DeepSpeed gathers those modules at use, which this counts for the
     * whole step too (at most one embedding more) */
    if (priv->plan.gather) {
        const vp_t *roots[3] = {priv->embed_leaves, priv->bridge_leaves, priv->final_leaves};
        const unsigned n_roots[3] = {m->section[VP_SECTION_EMBED].n_slots, m->section[VP_SECTION_BRIDGE].n_slots,
                                     m->section[VP_SECTION_FINAL].n_slots};
        for (unsigned r = 0; r < 3; r++) {
            priv->root_gather_bytes += gathered_bytes(step, roots[r], n_roots[r]);
            priv->root_host_copy += host_copy_bytes(step, roots[r], n_roots[r]);
            priv->root_copy_in += copy_in_bytes(step, roots[r], n_roots[r]);
            persistent_total += persistent_bytes(step, roots[r], n_roots[r]);
        }
        priv->root_gather_bytes -= branch_gather;
        priv->root_host_copy -= branch_host_copy;
        priv->root_copy_in -= branch_copy_in; /* bytes of whole-byte elements: additive */
        vp_ledger_alloc(&step->ledger, VP_CAT_PARAMS, persistent_total, "persistent parameters");
    }
    /* made in _setup_for_real_optimizer: none without an optimizer (DummyOptim) */
    if (priv->optimizer->steps) vp_ledger_alloc(&step->ledger, VP_CAT_COMM, priv->plan.resident_buffers, "ipg bucket");
    return true;
}


static bool forward_prefetch(const vp_step *step) { return vp_framework_of(step->recipe)->param_coordinator; }

/* The unit's reduce-scatter output in a reduce dtype other than the
 * kept shards' (FSDP2's foreach_reduce: reduce_output, one flat tensor of
 * the unit's shards, cast to the sharded parameters' dtype by
 * _to_dtype_if_needed; FSDP1's _reduce_grad: new_sharded_grad, cast by
 * _cast_grad_to_param_dtype; the 16-bit one freed once the cast is made):
 * its bytes, or 0 where the shards are the output itself. */
static uint64_t reduce_output_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    const vp_shard_plan *plan = &step->priv->plan;
    if (plan->reduce_dtype == plan->shard_grads_dtype) return 0;
    uint64_t numel = 0;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (t && t->requires_grad && t->param_grad)
            numel += vp_layout_shard_numel(step, t, vp_plan_shards(plan, t->expert)->grads);
    }
    return vp_bytes_of(plan->reduce_dtype, numel);
}

/* FSDP2's foreach_reduce copies a unit's unsharded gradients into the
 * reduce-scatter input and lets go of them (unsharded_grads.clear(),
 * _fsdp_collectives.py, torch 2.4-2.10) before it makes the output the
 * shards are views of; FSDP1's _reduce_grad makes the sharded gradient
 * while the unsharded one is still its local. */
static bool clears_before_output(const vp_step *step) { return step->priv->plan.collective_buffers; }

/* The unsharded gradients of these leaves freed. Each leaf's param_grad
 * keeps the freed handle (nothing reads the tensor again) until
 * make_shards replaces it: it marks the leaves that had a gradient. */
static void clear_unsharded(vp_step *step, vp_t *leaves, unsigned n, uint64_t *unused) {
    (void)unused;
    vp_sim *sim = &step->sim;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(sim, leaves[i]) : NULL;
        if (t && t->requires_grad && t->param_grad) vp_drop(sim, t->param_grad);
    }
}

/* FSDP's post-backward hook, once the output is made: each unsharded
 * gradient replaced by its shard (fp32 with MixedPrecision). A shard from
 * an earlier micro-batch of the step takes the new one in place, which
 * then goes (FSDP2's foreach_reduce: sharded_param.grad += a view of
 * reduce_output; FSDP1's _accumulate_sharded_grad into _saved_grad_shard).
 * Until the step's last micro-batch the shards are held apart from the
 * leaves' .grad, so that each micro-batch's backward starts with none:
 * autograd fills the .grad of another tensor (FSDP2's unsharded_param,
 * FSDP1's flat parameter, whose sharded gradient its pre-backward sets
 * aside). */
static void make_shards(vp_step *step, vp_t *leaves, unsigned n, uint64_t *unused) {
    (void)unused;
    vp_sim *sim = &step->sim;
    bool last = step->priv->final_micro_batch, cleared = clears_before_output(step);
    for (unsigned i = 0; i < n; i++) {
        vp_t leaf = leaves[i];
        if (!leaf || !vp_at(sim, leaf)->requires_grad || !vp_at(sim, leaf)->param_grad) continue;
        const vp_tensor *t = vp_at(sim, leaf);
        uint64_t numel = vp_layout_shard_numel(step, t, vp_plan_shards(&step->priv->plan, t->expert)->grads);
        vp_t shard = vp_new_in(sim, numel, step->priv->plan.shard_grads_dtype, VP_CAT_GRADS, "reduce_scatter.grad");
        vp_t full = vp_at(sim, leaf)->param_grad;
        vp_at(sim, leaf)->param_grad = shard;
        if (!cleared) vp_drop(sim, full);
        if (step->priv->plan.grads_on_host) { /* copied to the host's .grad (vp_layout_resident) */
            vp_at(sim, leaf)->param_grad = 0;
            vp_drop(sim, shard);
        }
    }
    for (unsigned i = 0; i < n; i++) {
        vp_tensor *t = leaves[i] ? vp_at(sim, leaves[i]) : NULL;
        if (!t || !t->requires_grad) continue;
        if (t->grad_stash && t->param_grad) vp_drop(sim, t->param_grad); /* added into the held shard */
        if (t->grad_stash) t->param_grad = 0;
        else t->grad_stash = t->param_grad;
        if (last) { /* the optimizer's .grad */
            t->param_grad = t->grad_stash;
            t->grad_stash = 0;
        } else {
            t->param_grad = 0;
        }
    }
}

static void add_output_bytes(vp_step *step, vp_t *leaves, unsigned n, uint64_t *bytes) {
    *bytes += reduce_output_bytes(step, leaves, n);
}

typedef void (*leaves_fn)(vp_step *step, vp_t *leaves, unsigned n, uint64_t *acc);

/* `fn` over the runs of leaves one reduce-scatter covers: a unit's
 * (`leaves`), or with `leaves` NULL the root unit's, which reduce-scatters
 * last (its final callback) as one unit: the embeddings', the bridge's and
 * the final ops' but the branch layers' (theirs went with their units). */
static void each_run(vp_step *step, vp_t *leaves, unsigned n, leaves_fn fn, uint64_t *acc) {
    if (leaves) {
        fn(step, leaves, n, acc);
        return;
    }
    vp_step_private *priv = step->priv;
    const vp_model *m = step->model;
    fn(step, priv->embed_leaves, m->section[VP_SECTION_EMBED].n_slots, acc);
    fn(step, priv->bridge_leaves, m->section[VP_SECTION_BRIDGE].n_slots, acc);
    unsigned at = 0, end = m->section[VP_SECTION_FINAL].n_slots;
    for (unsigned b = 0; b < priv->n_branch_layers; b++) {
        const vp_layer_hook *h = &priv->hooks[priv->n_layer_instances + b];
        unsigned first = (unsigned)(h->leaves - priv->final_leaves);
        fn(step, priv->final_leaves + at, first - at, acc);
        at = first + h->n;
    }
    fn(step, priv->final_leaves + at, end - at, acc);
}

/* A unit's reduce-scatter (`leaves` NULL: the root's): the unsharded
 * gradients cleared where FSDP2 clears them, the output made (in a reduce
 * dtype other than the shards'), the shards made, the output gone. */
static void reduce_scatter(vp_step *step, vp_t *leaves, unsigned n) {
    uint64_t output = 0;
    each_run(step, leaves, n, add_output_bytes, &output);
    if (clears_before_output(step)) each_run(step, leaves, n, clear_unsharded, NULL);
    if (output) vp_ledger_alloc(&step->ledger, VP_CAT_COMM, output, "reduce_scatter.grad");
    each_run(step, leaves, n, make_shards, NULL);
    if (output) vp_ledger_release(&step->ledger, VP_CAT_COMM, output, "reduce_scatter.grad");
}

static void pass_gradient(vp_sim *sim, uint32_t index) {
    vp_node *node = vp_node_at(sim, index);
    vp_t g = vp_grad_out(sim, node, 0);
    vp_hold(sim, g);
    vp_give_grad(sim, node, 0, g);
}

/* The layer's parameters gathered for a pass (those kept since the last
 * one are there already), and `ahead` bytes more prefetched: DeepSpeed
 * stops prefetching at stage3_max_live_parameters gathered. */
static void gather_layer(vp_layer_hook *h, uint64_t ahead) {
    vp_step *step = h->step;
    if (h->cast_scratch && h->gather > h->held) scratch(step, h->cast_scratch, "all_gather.float8_cast");
    if (h->host_copy && h->gather > h->held) scratch(step, h->host_copy, "all_gather.host_copy");
    vp_ledger_alloc(&step->ledger, VP_CAT_PARAMS, h->gather - h->held, "all_gather");
    step->priv->gathered_live += h->gather - h->held;
    h->held = h->gather;
    if (step->priv->plan.max_live_elements) {
        uint64_t cap = vp_bytes_of(step->priv->plan.gather_dtype, step->priv->plan.max_live_elements);
        uint64_t room = cap > step->priv->gathered_live ? cap - step->priv->gathered_live : 0;
        if (ahead > room) ahead = room;
    }
    vp_ledger_alloc(&step->ledger, VP_CAT_PARAMS, ahead, "all_gather.prefetch");
    h->prefetched = ahead;
    h->gathered = true;
}

/* The unit's gathered parameters go but `keep` bytes of them; what it
 * prefetched stays. */
static void release_gathered(vp_layer_hook *h, uint64_t keep) {
    if (keep > h->held) keep = h->held;
    /* as they were allocated: the ledger rounds each block */
    vp_ledger_release(&h->step->ledger, VP_CAT_PARAMS, h->held - keep, "all_gather.release");
    h->step->priv->gathered_live -= h->held - keep;
    h->held = keep;
}

/* The pass is over: the prefetch goes, and the layer's parameters but
 * `keep` bytes of them. */
static void release_layer(vp_layer_hook *h, uint64_t keep) {
    release_gathered(h, keep);
    vp_ledger_release(&h->step->ledger, VP_CAT_PARAMS, h->prefetched, "all_gather.release");
    h->prefetched = 0;
    h->gathered = false;
}

/* FSDP2 in a pipeline stage (defers_reduce): torch.distributed.pipelining
 * runs every micro-batch's backward with set_requires_gradient_sync(False)
 * and set_reshard_after_backward(False) (PipelineStage
 * backward_maybe_with_nosync, torch/distributed/pipelining/stage.py, torch
 * 2.5-2.6), so a unit's post_backward neither reduces nor reshards: each
 * parameter's unsharded gradient is converted to reduce_dtype once
 * (FSDPParam.to_accumulated_grad_if_needed, _fsdp_param.py: fp32 under
 * torchtitan's MixedPrecisionPolicy) and later ones are added into it
 * (accumulate_unsharded_grad_if_needed), the 16-bit gradient freed each
 * time. The stage's last backward (last_backward) then runs every unit's
 * post_backward with syncing on: reduce-scatter, then reshard. Here that
 * happens as each unit's backward of the last micro-batch ends, the peak
 * of which (the start of backward) already holds every unit's accumulated
 * gradients and gathered parameters. The accumulated gradients' bytes of
 * these leaves: */
static uint64_t accumulated_bytes(vp_step *step, const vp_t *leaves, unsigned n) {
    uint64_t bytes = 0;
    for (unsigned i = 0; i < n; i++) {
        const vp_tensor *t = leaves[i] ? vp_at(&step->sim, leaves[i]) : NULL;
        if (t && t->requires_grad && t->param_grad) bytes += vp_bytes_of(step->priv->plan.shard_grads_dtype, t->numel);
    }
    return bytes;
}

/* the 16-bit gradients, added into the accumulated ones and freed */
static void add_into_accumulated(vp_step *step, vp_t *leaves, unsigned n) {
    vp_sim *sim = &step->sim;
    for (unsigned i = 0; i < n; i++) {
        vp_t g = leaves[i] && vp_at(sim, leaves[i])->requires_grad ? vp_at(sim, leaves[i])->param_grad : 0;
        if (!g) continue;
        vp_at(sim, leaves[i])->param_grad = 0;
        vp_drop(sim, g);
    }
}

static void hold_accumulated(vp_step *step, uint64_t *held, uint64_t bytes) {
    if (*held) return;
    vp_ledger_alloc(&step->ledger, VP_CAT_GRADS, bytes, "grad.accumulated");
    *held = bytes;
}

static void free_accumulated(vp_step *step, uint64_t *held) {
    vp_ledger_release(&step->ledger, VP_CAT_GRADS, *held, "grad.accumulated");
    *held = 0;
}

/* The layer's backward is done: its gradients are reduce-scattered and its
 * gathered parameters released. */
static void layer_done(vp_layer_hook *h) {
    vp_layer_hook *slots = collective_slots(h->step);
    /* FSDP's post-backward reshards before it reduce-scatters (FSDP2's
     * FSDPParamGroup.post_backward; FSDP1's _post_backward_hook runs
     * _post_backward_reshard before _reduce_grad): the unit's gathered
     * parameters go first, the next unit's prefetch stays */
    if (!h->step->priv->plan.defers_reduce && h->step->priv->plan.grads == VP_GRADS_UNIT) release_gathered(h, 0);
    /* FSDP2's reduce-scatter input: the last unit's goes as this one's is
     * made (comm_ctx.reduce_scatter_state), where the unit has gradients */
    if (slots && h->reduce) {
        free_slot(h->step, &slots->reduce_input, "reduce_scatter.input");
        hold_slot(h->step, &slots->reduce_input, h->reduce, "reduce_scatter.input");
    }
    if (h->step->priv->plan.defers_reduce) {
        hold_accumulated(h->step, &h->accumulated, accumulated_bytes(h->step, h->leaves, h->n));
        if (!h->step->priv->final_micro_batch) {
            add_into_accumulated(h->step, h->leaves, h->n);
            return; /* stays gathered */
        }
        reduce_scatter(h->step, h->leaves, h->n); /* the shards from the last gradients, added in */
        free_accumulated(h->step, &h->accumulated);
    } else if (h->step->priv->plan.grads == VP_GRADS_UNIT) {
        reduce_scatter(h->step, h->leaves, h->n);
    }
    if (!h->gathered && !h->held) return; /* a frozen layer: resharded after forward, never gathered again */
    release_layer(h, 0);
}

static void backward_layer_start(vp_sim *sim, uint32_t index) {
    layer_done(vp_node_at(sim, index)->context);
    pass_gradient(sim, index);
}

/* FSDP2 before PyTorch 2.10 (vp_recipe_fsdp2_rerun_reshards): a reentrant
 * checkpoint's rerun inside backward runs the post-forward in full, so the
 * unit is resharded and its place recorded again (FSDPParamGroup.post_forward,
 * _record_post_forward, before pytorch#164009). Its pre-backward then
 * gathers it anew (unless the unit before prefetched it) and prefetches
 * the unit recorded before that last place (_backward_prefetch pops it):
 * within one checkpointed chunk the block below, gathered in time; for a
 * chunk's first block the last block of the chunk rerun before, whose
 * backward is done: that flat output is waited on by no one and stays
 * until the final callback (finalize_backward), one block's parameters
 * more for every chunk but the first rerun. With reshard_after_forward
 * false nothing is resharded, but the places are recorded all the same
 * (rerun_records), and the mistargeted prefetches made. */
static bool rerun_records(const vp_step *step) {
    return step->priv->plan.collective_buffers && vp_recipe_fsdp2_rerun_reshards(step->recipe);
}

static bool rerun_reshards(const vp_step *step) { return rerun_records(step) && reshard_after_forward(step); }

/* The unit's post-forward places it in post_forward_order. */
static void record_post_forward(vp_layer_hook *h) {
    h->recorded_after = h->step->priv->last_recorded;
    h->step->priv->last_recorded = h;
}

static void prefetch_recorded_before(vp_layer_hook *h) {
    vp_step *step = h->step;
    vp_step_private *priv = step->priv;
    const vp_layer_hook *target = h->recorded_after;
    if (!target || target->gathered) return; /* none, the root, or gathered: unshard() is a no-op */
    if (target < h) { /* below it: its backward is still to come */
        make_gather_output(step, target->copy_in, &collective_slots(step)->gather_output, target->gather,
                           "all_gather.prefetch");
        priv->flat_for = target;
        return;
    }
    /* mistargeted; a folded instance stands for as many blocks, each with its own */
    make_gather_output(step, target->copy_in, NULL, target->gather, "all_gather.mistargeted");
    priv->mistargeted += target->gather * vp_step_instance_repeat(step, (unsigned)(h - priv->hooks));
}

static void backward_layer_end(vp_sim *sim, uint32_t index) {
    vp_layer_hook *h = vp_node_at(sim, index)->context;
    vp_layer_hook *slots = collective_slots(h->step);
    if (!slots) {
        gather_layer(h, h->prefetch);
    } else {
        /* FSDP2's pre-backward: the copy-out makes the unit's parameters
         * beside the flat all-gather output prefetched for it, which goes
         * after (wait_for_unshard); then the unit before it in forward is
         * prefetched, its flat output in flight until that unit's own
         * copy-out (_backward_prefetch); a unit gathered already (a
         * reentrant rerun of several blocks leaves them all gathered) is
         * not gathered again */
        vp_step_private *priv = h->step->priv;
        bool rerun_resharded = rerun_reshards(h->step) && !h->gathered;
        if (rerun_resharded && priv->flat_for != h) /* gathered again */
            make_gather_output(h->step, h->copy_in, &slots->gather_output, h->gather, "all_gather.output");
        gather_layer(h, 0);
        free_slot(h->step, &slots->gather_output, "all_gather.output");
        if (rerun_records(h->step)) {
            prefetch_recorded_before(h);
        } else {
            const vp_layer_hook *target =
                h > priv->hooks && h < priv->hooks + priv->n_layer_instances ? h - 1 : NULL;
            if (h->prefetch && !(target && target->gathered)) {
                make_gather_output(h->step, target ? target->copy_in : h->copy_in, &slots->gather_output,
                                   target ? target->gather : h->prefetch, "all_gather.prefetch");
                priv->flat_for = target;
            }
        }
    }
    pass_gradient(sim, index);
}

static vp_t hook(vp_step *step, vp_t x, vp_backward_fn backward, vp_layer_hook *h, const char *label) {
    vp_t y = vp_view(&step->sim, x, vp_at(&step->sim, x)->numel, label);
    vp_node *node = vp_record(&step->sim, backward, label, &x, 1, &y, 1);
    if (node) node->context = h;
    return y;
}

static vp_layer_hook *hook_of(vp_step *step, unsigned layer) {
    vp_t *leaves = vp_step_layer_leaves(step, layer);
    unsigned slots = vp_model_layer_slots(step->model);
    return &step->priv->hooks[(leaves - step->priv->layer_leaves) / (slots ? slots : 1)];
}

/* The sharding hooks around a layer's call: none without gathered or
 * unit-reduced parameters. */
static bool hooks_around_layer(const vp_step *step) {
    return step->priv->plan.gather || step->priv->plan.grads == VP_GRADS_UNIT;
}

/* Inside a non-reentrant rerun the hooks do not run: the layer's parameters
 * are still gathered by its pre-backward hook, and FSDP's forward hooks
 * wrap the checkpoint (FSDP(CheckpointWrapper(layer))). Where the forward
 * made a hook's view, an alias keeps the rerun making the tensors the
 * forward made, in order. */
static vp_t rerun_alias(vp_step *step, vp_t x, const char *label) {
    vp_t y = vp_view(&step->sim, x, vp_at(&step->sim, x)->numel, label);
    vp_at(&step->sim, y)->requires_grad = vp_at(&step->sim, x)->requires_grad;
    return y;
}

/* DeepSpeed's hooks sit on every module inside the checkpointed function,
 * so a non-reentrant rerun (torch.utils.checkpoint's unpack hook, inside
 * the layer's backward) fires them (parameter_offload.py and
 * partitioned_param_coordinator.py, DeepSpeed 0.16-0.19): each module's
 * pre-forward hook gathers what is not gathered (in a call of several
 * layers, those whose backward has not begun; the layer being unpacked was
 * gathered by its pre-backward hooks) and its post-forward hook partitions
 * it (param.data = empty), but the rerun's saved tensors hold the gathered
 * storage until the layer's backward unpacks them: trainable parameters
 * saved detached (torch/utils/checkpoint.py, the recomputation's pack hook),
 * frozen ones not partitioned in a rerun at all (deepspeedai/DeepSpeed
 * #8148; before it torch >= 2.1 raises CheckpointError there). So a layer
 * the rerun reaches stays gathered from the rerun to its backward. The
 * rerun's graph is dropped, and with it the PostBackwardFunctionModule
 * nodes its hooks made; the count they add is reset by the next forward
 * call of the module's hook (ds_grads_remaining = 0 in
 * _post_backward_module_hook, deepspeedai/DeepSpeed 042b847a, 2026), so
 * each module is released after its backward as in a plain step (0.16's
 * hook reset it only once, and leaked: #8481). Layer by layer, as the
 * reentrant rerun: a module the rerun partitioned is gathered again for its
 * backward beside its rerun copy, one module's parameters more for a
 * moment, which the layer's granularity does not show. */
static void rerun_gather(vp_step *step, unsigned layer) {
    vp_layer_hook *h = hook_of(step, layer);
    if (!h->gathered) gather_layer(h, 0);
}

static vp_t unit_start(vp_step *step, vp_t x, vp_layer_hook *h);
static vp_t unit_end(vp_step *step, vp_t y, vp_layer_hook *h);

vp_t vp_layout_layer_start(vp_step *step, vp_t x, unsigned layer) {
    if (hooks_around_layer(step) && step->priv->frame_rerun && forward_prefetch(step) && step->priv->plan.gather)
        rerun_gather(step, layer);
    if (hooks_around_layer(step) && step->priv->frame_rerun && vp_at(&step->sim, x)->requires_grad)
        return rerun_alias(step, x, "layer.start");
    if (!hooks_around_layer(step) || step->priv->frame_rerun) {
        vp_hold(&step->sim, x);
        return x;
    }
    return unit_start(step, x, hook_of(step, layer));
}

/* FSDP2's all-gather output kept by a reentrant rerun (below) goes. */
static void free_rerun_gather_state(vp_step *step) {
    vp_ledger_release(&step->ledger, VP_CAT_COMM, step->priv->rerun_gather_state, "all_gather.state");
    step->priv->rerun_gather_state = 0;
}

/* A reentrant checkpoint's rerun runs FSDP2's forward hooks in forward's
 * state (its pre-forward returns early only after a pre-backward hook,
 * which the no-grad forward registered none of): the rerun's all-gather
 * output, the one its pre-backward neighbour prefetched, becomes
 * comm_ctx.all_gather_state, each rerun's replacing the last's
 * (FSDPParamGroup.wait_for_unshard), and the last one stays through the
 * optimizer step until the next forward's first unshard (the root's) lets
 * go of it. The rerun's post-forward neither reshards nor records its
 * place (is_bw(), PyTorch 2.10: pytorch#164009), so the block stays
 * gathered for its backward and the backward prefetch goes to the block
 * before it. (Before 2.10 the rerun resharded, the pre-backward gathered
 * again and prefetched the block after it, whose backward was done: a
 * block's parameters more each block, held to the end of backward.) */
static void hold_rerun_gather_state(vp_step *step, const vp_layer_hook *h) {
    vp_layer_hook *slots = collective_slots(step);
    vp_step_private *priv = step->priv;
    /* a unit still gathered (reshard_after_forward false) gathers nothing */
    if (!slots || step->ledger.place.phase != VP_PHASE_RECOMPUTE || h->gathered) return;
    if (slots->gather_output && priv->flat_for == h) { /* the flat output prefetched for it, kept on */
        free_rerun_gather_state(step);
        priv->rerun_gather_state = slots->gather_output;
        slots->gather_output = 0;
        priv->flat_for = NULL;
        return;
    }
    /* none prefetched for it: its own, made before the last state goes */
    make_gather_output(step, h->copy_in, NULL, h->gather, "all_gather.state");
    free_rerun_gather_state(step);
    priv->rerun_gather_state = h->gather;
}

void vp_layout_step_end(vp_step *step) { free_rerun_gather_state(step); }

/* A unit's forward begins: its parameters gathered (and the next's
 * prefetched), a node whose backward releases them once the unit's
 * backward is done. */
/* FSDP2's forward: a block's flat all-gather output is made before the
 * last one goes (FSDPParamGroup.unshard, then wait_for_unshard lets go of
 * comm_ctx.all_gather_state, _fsdp_param_group.py), so the all-gather
 * stream holds both; it is kept in turn until the next block's copy-out. */
static void forward_gather_output(vp_step *step, const vp_layer_hook *h) {
    vp_layer_hook *slots = collective_slots(step);
    if (!slots || step->ledger.place.phase == VP_PHASE_RECOMPUTE || h->gathered) return;
    make_gather_output(step, h->copy_in, NULL, h->gather, "all_gather.output");
    free_slot(step, &slots->gather_output, "all_gather.output");
    slots->gather_output = h->gather;
}

static vp_t unit_start(vp_step *step, vp_t x, vp_layer_hook *h) {
    forward_gather_output(step, h);
    hold_rerun_gather_state(step, h);
    gather_layer(h, h->prefetch * forward_prefetch(step));
    if (step->sim.grad_mode && !vp_at(&step->sim, x)->requires_grad) {
        /* frozen embeddings feed the first layer (LoRA): no node on its input
         * runs in backward; the frameworks' post-backward hooks on the
         * parameters and their final callback release it when backward ends */
        h->deferred = true;
        vp_hold(&step->sim, x);
        return x;
    }
    return hook(step, x, backward_layer_start, h, "layer.start");
}

vp_t vp_layout_layer_end(vp_step *step, vp_t y, unsigned layer) {
    if (hooks_around_layer(step) && step->priv->frame_rerun && reshard_after_forward(step))
        return rerun_alias(step, y, "layer.end");
    if (!hooks_around_layer(step) || step->priv->frame_rerun) {
        vp_hold(&step->sim, y);
        return y;
    }
    return unit_end(step, y, hook_of(step, layer));
}

/* A unit's forward ends: its parameters released but what is kept, a node
 * whose backward gathers them again. */
static vp_t unit_end(vp_step *step, vp_t y, vp_layer_hook *h) {
    bool recomputing = step->ledger.place.phase == VP_PHASE_RECOMPUTE;
    /* FSDP2's post-forward records the unit's place, in a reentrant rerun
     * only before 2.10 (rerun_records) */
    if (collective_slots(step) && (!recomputing || rerun_records(step))) record_post_forward(h);
    if (reshard_after_forward(step)) {
        /* DeepSpeed keeps what is used again soon: the last layers' weights
         * through the turn into backward, a recomputed layer's until its
         * backward. FSDP2 does not reshard in a rerun inside backward
         * (is_bw(), above): the unit stays gathered to its post-backward,
         * its pre-backward a no-op but for the prefetch; before 2.10 it did
         * (rerun_reshards) */
        if (!(recomputing && collective_slots(step)))
            release_layer(h, recomputing ? h->kept.recompute : h->kept.forward);
        else if (rerun_reshards(step))
            release_layer(h, h->kept.forward);
        return hook(step, y, backward_layer_end, h, "layer.end");
    }
    /* SHARD_GRAD_OP: the layer stays gathered until its backward is done;
     * before 2.10 a reentrant rerun's outputs get FSDP2's pre-backward all
     * the same, which prefetches the block recorded before it */
    if (recomputing && rerun_records(step)) return hook(step, y, backward_layer_end, h, "layer.end");
    vp_hold(&step->sim, y);
    return y;
}

/* ---- around forward and backward ---- */

void vp_layout_forward_begin(vp_step *step) {
    if (step->priv->root_held) return; /* a pipeline stage's root: gathered since the first micro-batch */
    if (step->priv->root_host_copy) scratch(step, step->priv->root_host_copy, "all_gather.host_copy");
    vp_ledger_alloc(&step->ledger, VP_CAT_PARAMS, step->priv->root_gather_bytes, "all_gather.root");
    /* FSDP2's forward: the root's flat all-gather output, kept until the
     * first block's copy-out (unit_start); its wait lets go of a reentrant
     * rerun's output the last step left */
    vp_layer_hook *slots = collective_slots(step);
    step->priv->last_recorded = NULL; /* post_forward_order starts again */
    if (slots) {
        make_gather_output(step, step->priv->root_copy_in, &slots->gather_output, step->priv->root_gather_bytes,
                           "all_gather.output");
        free_rerun_gather_state(step);
    }
}

/* FSDP2's root returns from its forward: its post-forward drops the last
 * block's all-gather output (FSDPState._post_forward, iter_forward_root:
 * comm_ctx.all_gather_state = None). Under transformers' model code the
 * loss was computed inside that forward; torchtitan and torchtune compute
 * it after the model returns, so there the output is gone during the
 * loss's forward already, which this step, ending with the loss, still
 * counts (a block's parameters more, where the loss's forward would be the
 * peak: its backward, with the logits' gradients, is larger). */
void vp_layout_forward_end(vp_step *step) {
    vp_layer_hook *slots = collective_slots(step);
    if (slots) free_slot(step, &slots->gather_output, "all_gather.output");
    step->priv->last_recorded = NULL; /* the root's place: its prefetch is a no-op */
}

void vp_layout_backward_begin(vp_step *step) {
    /* the root's pre-backward hook (on the loss) prefetches the last block
     * (FSDPState._pre_backward, _backward_prefetch): its flat all-gather
     * output, which that block's own pre-backward copies out and frees;
     * nothing when the block stayed gathered (torchtitan's last block) */
    vp_layer_hook *slots = collective_slots(step);
    if (slots && reshard_after_forward(step) && !step->priv->plan.keeps_last_block) {
        make_gather_output(step, slots->copy_in, &slots->gather_output, slots->gather, "all_gather.prefetch");
        step->priv->flat_for = slots;
    }
    vp_ledger_alloc(&step->ledger, VP_CAT_COMM, step->priv->plan.backward_buffers, "reduce buckets");
}

/* The hook of the branch layer whose leaves start at `leaves`. */
static vp_layer_hook *branch_hook(vp_step *step, const vp_t *leaves) {
    for (unsigned b = 0; b < step->priv->n_branch_layers; b++)
        if (step->priv->hooks[step->priv->n_layer_instances + b].leaves == leaves)
            return &step->priv->hooks[step->priv->n_layer_instances + b];
    return NULL;
}

/* `at` (unit_start, unit_end) around the branch layer whose leaves start
 * at `leaves`; without hooks, t itself (a new reference). */
static vp_t around_branch_layer(vp_step *step, vp_t t, const vp_t *leaves,
                                vp_t (*at)(vp_step *, vp_t, vp_layer_hook *)) {
    vp_layer_hook *h = hooks_around_layer(step) ? branch_hook(step, leaves) : NULL;
    if (!h) {
        vp_hold(&step->sim, t);
        return t;
    }
    return at(step, t, h);
}

vp_t vp_layout_branch_layer_start(vp_step *step, vp_t x, const vp_t *leaves) {
    return around_branch_layer(step, x, leaves, unit_start);
}

vp_t vp_layout_branch_layer_end(vp_step *step, vp_t y, const vp_t *leaves) {
    return around_branch_layer(step, y, leaves, unit_end);
}

/* Layers whose input needed no gradient: their post-backward runs now
 * (unit_start's `deferred`). */
static void run_deferred(vp_step *step) {
    for (unsigned i = 0; i < step->priv->n_layer_instances + step->priv->n_branch_layers; i++)
        if (step->priv->hooks[i].deferred) {
            step->priv->hooks[i].deferred = false;
            layer_done(&step->priv->hooks[i]);
        }
}

void vp_layout_backward_end(vp_step *step) {
    const vp_model *m = step->model;
    vp_step_private *priv = step->priv;
    vp_layer_hook *slots = collective_slots(step);
    /* FSDP2's final callback (FSDPState._root_post_backward_final_callback)
     * goes over every state in order, the root's first: its post-backward
     * (resharded, then reduce-scattered where it has gradients, its input
     * the last unit's state), then each block's that the graph did not run
     * (deferred), each state's finalize_backward after its own */
    bool root_first = slots && !priv->plan.defers_reduce;
    if (!root_first) run_deferred(step);
    vp_ledger_release(&step->ledger, VP_CAT_COMM, priv->plan.backward_buffers, "reduce buckets");
    if (priv->plan.defers_reduce) { /* the root unit's gradients, as a block's (layer_done) */
        vp_t *roots[3] = {priv->embed_leaves, priv->bridge_leaves, priv->final_leaves};
        const unsigned n_roots[3] = {m->section[VP_SECTION_EMBED].n_slots, m->section[VP_SECTION_BRIDGE].n_slots,
                                     m->section[VP_SECTION_FINAL].n_slots};
        uint64_t bytes = 0;
        for (unsigned r = 0; r < 3; r++) bytes += accumulated_bytes(step, roots[r], n_roots[r]);
        hold_accumulated(step, &priv->root_accumulated, bytes);
        priv->root_held = !priv->final_micro_batch;
        if (priv->root_held) {
            for (unsigned r = 0; r < 3; r++) add_into_accumulated(step, roots[r], n_roots[r]);
            return;
        }
    }
    bool root_released = false;
    if (priv->plan.grads == VP_GRADS_UNIT) {
        /* FSDP2's root unit reduce-scatters last, through its own input
         * buffer, all of which the final callback frees */
        uint64_t root_input = 0;
        if (slots) {
            free_slot(step, &slots->gather_output, "all_gather.output");
            root_input = reduce_input_bytes(step, priv->embed_leaves, m->section[VP_SECTION_EMBED].n_slots) +
                         reduce_input_bytes(step, priv->bridge_leaves, m->section[VP_SECTION_BRIDGE].n_slots) +
                         reduce_input_bytes(step, priv->final_leaves, m->section[VP_SECTION_FINAL].n_slots);
        }
        if (root_first) {
            vp_ledger_release(&step->ledger, VP_CAT_PARAMS, priv->root_gather_bytes, "all_gather.root");
            root_released = true;
            if (root_input) {
                free_slot(step, &slots->reduce_input, "reduce_scatter.input");
                hold_slot(step, &slots->reduce_input, root_input, "reduce_scatter.input");
            }
            reduce_scatter(step, NULL, 0);
            run_deferred(step);
        } else {
            if (slots) {
                free_slot(step, &slots->reduce_input, "reduce_scatter.input");
                vp_ledger_alloc(&step->ledger, VP_CAT_COMM, root_input, "reduce_scatter.input");
            }
            reduce_scatter(step, NULL, 0);
        }
        /* finalize_backward: mistargeted prefetches go */
        vp_ledger_release(&step->ledger, VP_CAT_COMM, priv->mistargeted, "all_gather.mistargeted");
        priv->mistargeted = 0;
        if (root_first) free_slot(step, &slots->reduce_input, "reduce_scatter.input");
        else vp_ledger_release(&step->ledger, VP_CAT_COMM, root_input, "reduce_scatter.input");
    }
    if (priv->plan.defers_reduce) free_accumulated(step, &priv->root_accumulated);
    if (!root_released) vp_ledger_release(&step->ledger, VP_CAT_PARAMS, priv->root_gather_bytes, "all_gather.root");
}

