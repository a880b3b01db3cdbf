/* framework_deepspeed.c — DeepSpeed's engine over transformers' model:
 * ZeRO 0-3 with offload, its own mixed precision and fused Adam. */
#include "framework.h"

/* DeepSpeed (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py): a 16-bit
 * model with fp32 master weights in the optimizer. Stage 1 partitions the
 * master weights and Adam states, stage 2 also the gradients (each is copied
 * into the IPG bucket of reduce_bucket_size elements, two with overlap_comm,
 * and reduced into this rank's partition), stage 3 also the parameters
 * (gathered per module, stage3_prefetch_bucket_size ahead). The step turns
 * the rank's 16-bit gradient partition into fp32 (single_partition_of_fp32_groups
 * [i].grad), on the host with offload_optimizer. */
static const char *plan_deepspeed(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    if (r->tp > 1) return "tp: tensor parallelism needs framework = \"megatron\"";
    if (r->fsdp != VP_FSDP_NONE) return "fsdp: a sharding strategy needs framework = \"fsdp\"";
    if (r->zero > 3) return "zero: the ZeRO stage is 0, 1, 2 or 3";
    if (!vp_precision_own_mixed(p))
        return "precision: DeepSpeed runs its own mixed precision: use mixed-bf16, mixed-fp16 or fp32";
    if (r->offload_params && r->zero != 3) return "offload_params: parameter offload needs zero = 3 (ZeRO-Infinity)";
    if (r->offload_optimizer && r->zero == 0) return "offload_optimizer: optimizer offload needs zero >= 1";
    if (r->offload_optimizer == VP_OFFLOAD_NVME && r->zero != 3) return "offload_optimizer: NVMe offload needs zero = 3";
    unsigned n = r->dp;
    plan->shards.states = r->zero >= 1 ? n : 1;
    plan->shards.grads = r->zero >= 2 ? n : 1;
    plan->shards.params = r->zero >= 3 ? n : 1;
    plan->gather = r->zero == 3;
    plan->grads = r->zero >= 2 ? VP_GRADS_BUCKET : VP_GRADS_KEEP;
    plan->master_dtype = vp_precision_mixed(p) ? VP_FP32 : VP_DTYPE_NONE;
    plan->master_grads = true;
    plan->states_on_host = r->offload_optimizer == VP_OFFLOAD_CPU;
    plan->states_on_nvme = r->offload_optimizer == VP_OFFLOAD_NVME;
    plan->params_on_host = r->offload_params == VP_OFFLOAD_CPU;
    plan->params_on_nvme = r->offload_params == VP_OFFLOAD_NVME;
    int overlap = r->overlap_comm >= 0 ? r->overlap_comm : r->zero == 3; /* stage 3 defaults it on */
    if (r->zero >= 2) {
        uint64_t bucket;
        vp_tensor_bytes(p->grads, (uint64_t)r->reduce_bucket_size, &bucket);
        if (r->zero == 3) {
            /* stage3.py allocates one IPG buffer (__ipg_bucket_flat_buffer)
             * when it sets up the optimizer, whatever overlap_comm says, and
             * keeps it: the forward has it too. The second bucket in backward
             * stands for about that much more that PEFT's measured T0-3B
             * ZeRO-3 row needs beyond everything else modelled
             * (tests/lua/peft_memory_spec.lua: 18 % low without it). What it
             * really is (a transient of the fetch's H2D copies?) takes a GPU
             * run of DeepSpeed to settle. */
            plan->resident_buffers = bucket;
            plan->backward_buffers = overlap ? bucket : 0;
        } else { /* stage_1_and_2.py: ipg_buffer made in backward, two with overlap_comm */
            plan->backward_buffers = bucket * (overlap ? 2 : 1);
        }
    }
    plan->prefetch_elements = r->zero == 3 ? (uint64_t)r->prefetch_bucket_size : 0;
    if (r->zero == 3) {
        plan->max_live_elements = (uint64_t)r->max_live_parameters;
        plan->reuse_distance_elements = (uint64_t)r->max_reuse_distance;
        plan->persistence_threshold = (uint64_t)r->persistence_threshold;
    }
    return NULL;
}

/* ZeRO-3 partitions the parameters (bitsandbytes' 4-bit storage too, with
 * bnb_4bit_quant_storage) */
static bool deepspeed_shards_params(const vp_recipe *r) { return r->zero == 3; }

/* ZeRO-3 gathers the weights every micro-batch; overlap_comm (on by
 * default for stage 3 only) hides the traffic */
static void deepspeed_traffic(const vp_recipe *r, vp_dp_traffic *out) {
    out->gathers_params = r->zero == 3;
    out->shards_states = r->zero >= 1;
    out->overlaps = r->overlap_comm >= 0 ? r->overlap_comm > 0 : r->zero == 3;
}

/* ZeRO-3 with overlap_comm gathers on a stream of its own
 * (deepspeed/runtime/zero/parameter_offload.py: __allgather_stream, a new
 * Stream when overlap_comm, else the default stream; partitioned_param_
 * coordinator.py fetch_sub_module: all_gather_coalesced under it, which
 * allocates the gathered parameters there). Its reduce stream's
 * allocations (the contiguous ipg bucket is resident) are not split out. */
static const char *const deepspeed_gathers[] = {"all_gather", "all_gather.prefetch", "all_gather.root",
                                                "all_gather.release", NULL};
static const vp_stream_ops deepspeed_streams = {{deepspeed_gathers, NULL, vp_offload_stream_ops}};

static bool deepspeed_uses_streams(const vp_recipe *r) {
    return r->zero == 3 && r->overlap_comm != 0; /* unset (-1): stage 3's default, on */
}

/* DeepSpeed builds its own FusedAdam (multi-tensor apply, no temporaries) */
const vp_framework_kind vp_framework_deepspeed = {
    .name = "deepspeed",
    .plan = plan_deepspeed,
    .shards_params = deepspeed_shards_params,
    .dp_traffic = deepspeed_traffic,
    .streams = &deepspeed_streams,
    .uses_streams = deepspeed_uses_streams,
    .optimizer_impl = VP_IMPL_FUSED,
    .hf_modeling = true,
    .python_locals = true,
    .bucketed_grads = true,
    .param_coordinator = true,
    .step_grad_partitions = true,
};
