/* framework_fsdp.c — PyTorch's FSDP over transformers' model, each layer
 * a wrapped unit (as accelerate wraps them). */
#include "framework.h"

/* FSDP (torch/distributed/fsdp): flat parameters per wrapped layer. With
 * MixedPrecision(param_dtype=16-bit) the sharded parameters stay fp32 and
 * are the optimizer's own (no separate master copy), the all-gathered ones
 * are 16-bit, and the reduce-scattered gradient is kept as an fp32 shard.
 * FULL_SHARD frees the gathered layer after forward and gathers it again in
 * backward (the next layer prefetched, BACKWARD_PRE); SHARD_GRAD_OP keeps
 * it from forward to the end of its backward; NO_SHARD is DDP-like. */
/* The strategy a recipe runs: FULL_SHARD, FSDP's default, when it names none. */
static vp_fsdp_strategy strategy_of(const vp_recipe *r) {
    return r->fsdp == VP_FSDP_NONE ? VP_FSDP_FULL_SHARD : r->fsdp;
}

static const char *plan_fsdp(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    if (r->tp > 1) return "tp: tensor parallelism needs framework = \"megatron\"";
    if (r->zero) return "zero: ZeRO stages need framework = \"deepspeed\"";
    if (r->offload_optimizer) return "offload_optimizer: with FSDP, offload is offload_params (CPUOffload)";
    if (r->offload_params == VP_OFFLOAD_NVME) return "offload_params: FSDP offloads to the CPU only";
    vp_fsdp_strategy s = strategy_of(r);
    unsigned group = vp_shard_group(r);
    if (s == VP_FSDP_HYBRID_SHARD && (group == 0 || r->dp % group))
        return "fsdp_shard_size: HYBRID_SHARD needs a shard group that divides dp";
    unsigned n = s == VP_FSDP_NO_SHARD ? 1 : group;
    plan->shards = (vp_shards){n, n, n};
    plan->gather = n > 1;
    plan->keeps_gathered = s == VP_FSDP_SHARD_GRAD_OP;
    plan->grads = n > 1 ? VP_GRADS_UNIT : VP_GRADS_KEEP;
    if (vp_precision_mixed(p)) {
        plan->params_dtype = VP_FP32;
        plan->shard_grads_dtype = VP_FP32;
        /* MixedPrecision(reduce_dtype=) the 16-bit one, as accelerate's
         * set_mixed_precision and Answer.AI's fsdp_qlora pass it: each
         * unit's reduce-scatter output is a 16-bit shard (_reduce_grad:
         * new_sharded_grad) cast to the fp32 parameter's dtype and freed
         * (_accumulate_sharded_grad, _cast_grad_to_param_dtype) */
        plan->reduce_dtype = p->params;
    }
    plan->master_dtype = VP_DTYPE_NONE;
    plan->master_grads = false;
    plan->params_on_host = r->offload_params == VP_OFFLOAD_CPU;
    plan->states_on_host = plan->params_on_host; /* CPUOffload runs the optimizer on the CPU */
    return NULL;
}

/* FSDP's flat parameters are sharded storage (bitsandbytes' 4-bit weights
 * too, with bnb_4bit_quant_storage) */
static bool fsdp_shards_params(const vp_recipe *r) {
    (void)r;
    return true;
}

/* FULL_SHARD and HYBRID_SHARD gather the weights every micro-batch;
 * bucketed hooks overlap the traffic with compute by design */
static void fsdp_traffic(const vp_recipe *r, vp_dp_traffic *out) {
    vp_fsdp_strategy s = strategy_of(r);
    out->gathers_params = s == VP_FSDP_FULL_SHARD || s == VP_FSDP_HYBRID_SHARD;
    out->shards_states = true;
    out->overlaps = true;
}

/* FSDP all-gathers a unit's parameters on its unshard stream and makes the
 * reduce-scattered gradient shard on its post-backward stream
 * (torch/distributed/fsdp/_runtime_utils.py: _unshard under
 * state._unshard_stream, _post_backward_hook and _reduce_grad under
 * state._post_backward_stream): their blocks are cached for those streams
 * alone. The gathered parameters are freed as "all_gather.release". */
static const char *const fsdp_gathers[] = {"all_gather", "all_gather.prefetch", "all_gather.root",
                                           "all_gather.release", NULL};
static const char *const fsdp_reduced[] = {"reduce_scatter.grad", NULL};
static const vp_stream_ops fsdp_streams = {{fsdp_gathers, fsdp_reduced, vp_offload_stream_ops}};

const vp_framework_kind vp_framework_fsdp = {
    .name = "fsdp",
    .plan = plan_fsdp,
    .shards_params = fsdp_shards_params,
    .dp_traffic = fsdp_traffic,
    .streams = &fsdp_streams,
    .optimizer_impl = VP_IMPL_FOREACH,
    .hf_modeling = true,
    .accelerate_native_amp = true,
    .python_locals = true,
    .bucketed_grads = true,
    .layer_units = true,
};
