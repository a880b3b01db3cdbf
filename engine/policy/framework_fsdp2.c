/* framework_fsdp2.c — PyTorch's FSDP2 (fully_shard, torch 2.4-2.6:
 * torch/distributed/_composable/fsdp) as torchtitan applies it
 * (torchtitan/parallelisms/parallelize_llama.py, apply_fsdp): each
 * transformer block one fully_shard unit, the root (embeddings, final norm,
 * head) another, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32). */
#include "finetune_method.h"
#include "framework.h"

/* What FSDP2 does to the model states, and where FSDP's plan
 * (framework_fsdp.c) already says the same:
 * - per-parameter sharding (FSDPParam._init_sharded_param, _fsdp_param.py):
 *   every parameter a DTensor with Shard(0), its dim 0 padded to a multiple
 *   of the ranks (vp_plan_shard_numel), not one flat parameter per unit;
 * - with MixedPrecisionPolicy the sharded parameters stay in their own
 *   dtype (fp32) and are the optimizer's parameters (no master copy), the
 *   all-gathered ones are in param_dtype (_fsdp_param.py, init_all_gather_outputs
 *   in param_dtype), as with FSDP1's MixedPrecision;
 * - each unit's unsharded gradients are copied into one reduce_dtype (fp32)
 *   reduce-scatter input and freed, and the fp32 shard becomes the sharded
 *   parameter's .grad (foreach_reduce, _fsdp_collectives.py): FSDP1's
 *   timeline, with the input buffer kept until the next unit's
 *   reduce-scatter (FSDPParamGroup.post_backward: comm_ctx.reduce_scatter_state);
 * - in forward the all-gather output of a unit is kept until the next
 *   unit's all-gather (FSDPParamGroup.wait_for_unshard: comm_ctx.all_gather_state,
 *   the implicit forward prefetch); in backward the next unit is prefetched
 *   explicitly (FSDPState._pre_backward, _backward_prefetch: one unit
 *   ahead), as FSDP1's BACKWARD_PRE;
 * - reshard_after_forward=True frees a block's unsharded parameters after its
 *   forward (FSDPParamGroup.post_forward -> reshard) and gathers them again
 *   in backward; torchtitan passes False for the last block ("FSDP would
 *   prefetch it immediately"), and the root is never resharded after forward
 *   (FSDPState._lazy_init sets the root's post_forward_mesh_info = None). */
/* MixedPrecisionPolicy.reduce_dtype (recipe key reduce_dtype): torchtitan
 * reduces in fp32 (apply_fsdp's mixed_precision_reduce); accelerate's
 * set_mixed_precision for fsdp_version 2 (utils/dataclasses.py) passes the
 * mixed precision's dtype as both param_dtype and reduce_dtype. */
static vp_dtype reduce_dtype_of(const vp_recipe *r, const vp_precision *p) {
    switch (r->reduce_dtype) {
    case VP_REDUCE_FP32: return VP_FP32;
    case VP_REDUCE_BF16: return VP_BF16;
    case VP_REDUCE_FP16: return VP_FP16;
    default: return vp_recipe_model_code(r) == VP_CODE_TRANSFORMERS ? p->params : VP_FP32;
    }
}

static const char *plan_fsdp2(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    /* torchtitan's context parallelism replaces SDPA (context_parallel's
     * buffers and its SDPA dispatch): flash_attn's library kernel is not it */
    if (r->cp > 1 && r->attention != VP_ATTN_SDPA)
        return "cp: PyTorch's context parallelism rings SDPA's kernels: use attention = sdpa";
    /* torchtitan's parallelize_llama (9dec370): "Async TP requires
     * --training.compile" (Inductor's _micro_pipeline_tp pass does the
     * fusing), and it applies to the tp mesh's group */
    if (r->async_tp && r->tp <= 1) return "async_tp: needs tp > 1 (async tensor parallelism fuses tp's collectives)";
    if (r->async_tp && !r->sequence_parallel)
        return "async_tp: needs sequence_parallel = true (torchtitan's tp always runs it; without it tp has no "
               "all-gathers or reduce-scatters to fuse)";
    if (r->async_tp && !r->compile)
        return "async_tp: needs compile = true (torchtitan: \"Async TP requires --training.compile\"; Inductor's "
               "micro-pipeline TP pass does the fusing)";
    if (r->pp > 1 && !vp_pp_torch(r))
        return "pp_schedule: framework = fsdp2 runs torch.distributed.pipelining's schedules: 1F1B, GPipe, "
               "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble or DualPipeV";
    if (r->ep > 1) return "ep: framework = fsdp2 with ep is not modelled yet";
    if (r->tp > 1 && vp_finetune_method_of(r)->peft)
        return "finetune: PEFT's adapters under DTensor's tensor parallelism (framework = fsdp2 with tp) are not "
               "modelled";
    if (r->tp > 1 && p->fp8_gemms && !p->fp8_dynamic)
        return "precision: Transformer Engine's fp8 under DTensor's tensor parallelism (framework = fsdp2 with tp) "
               "is not modelled";
    if (r->zero) return "zero: ZeRO stages need framework = \"deepspeed\"";
    if (r->fsdp != VP_FSDP_NONE)
        return "fsdp: FSDP1's sharding strategies need framework = \"fsdp\"; fsdp2 shards over dp, "
               "reshard_after_forward says when";
    /* CPUOffloadPolicy is one switch: parameters, gradients and optimizer
     * states together (torchtitan's training.enable_cpu_offload) */
    if (r->offload_optimizer)
        return "offload_optimizer: with framework = fsdp2, offload is offload_params = cpu (CPUOffloadPolicy: "
               "parameters, gradients and optimizer states)";
    if (r->offload_params == VP_OFFLOAD_NVME) return "offload_params: FSDP2's CPUOffloadPolicy offloads to the CPU only";
    if (r->offload_params && r->pp > 1)
        return "offload_params: CPUOffloadPolicy in a pipeline stage (gradients accumulated on the host) is not "
               "modelled";
    if (vp_finetune_method_of(r)->quantizes_base && r->quant == VP_QUANT_INT8)
        return "quant: an 8-bit base with framework = fsdp2 is not modelled yet (QLoRA's 4-bit one is)";
    /* with tp (torchtitan's 2-D mesh: apply_tp, then fully_shard over the
     * dp mesh) each parameter is a DTensor already split over tp, and
     * FSDP2 shards its local tensor on dim 0 over dp
     * (FSDPParam._init_sharded_param, _StridedShard where both split dim
     * 0): the leaves are made tp-local (their rows), so the dim-0 rule
     * below pads ceil(local dim 0 / dp) rows */
    /* with cp, torchtitan's FSDP mesh is dp_shard_cp: dp x cp ranks
     * (parallelize_llama: apply_fsdp over world_mesh["dp_shard_cp"]) */
    /* HSDP (torchtitan's data_parallel_replicate_degree: fully_shard over a
     * (replicate, shard) mesh): parameters Shard(0) over the shard
     * dimension, replicated over the other; each unit's reduce-scatter over
     * the shard group, then its output all-reduced over the replicas in
     * place (foreach_reduce, _fsdp_collectives.py, torch 2.6: dist.all_reduce
     * on reduce_output, which becomes the sharded gradient in the reduce
     * dtype, fp32 as the sharded parameters): no buffer beyond FSDP's over
     * the shard group. The replicas' all-reduce is traffic (steptime.c) and
     * a second data-parallel communicator (estimate.c). */
    unsigned group = r->fsdp_shard_size ? r->fsdp_shard_size : r->dp;
    if (r->fsdp_shard_size && (r->fsdp_shard_size > r->dp || r->dp % r->fsdp_shard_size))
        return "fsdp_shard_size: HSDP needs a shard group that divides dp (dp = replicas x fsdp_shard_size)";
    unsigned n = group * (r->cp ? r->cp : 1);
    plan->shards = (vp_shards){n, n, n};
    plan->gather = n > 1;
    plan->grads = n > 1 ? VP_GRADS_UNIT : VP_GRADS_KEEP;
    if (vp_precision_mixed(p)) { /* torchtitan: param_dtype bf16, reduce_dtype fp32 */
        plan->params_dtype = VP_FP32;
        plan->shard_grads_dtype = VP_FP32;
        plan->reduce_dtype = reduce_dtype_of(r, p);
        /* a pipeline stage accumulates unsharded gradients in reduce_dtype
         * (layout.c, defers_reduce), modelled in torchtitan's fp32 alone */
        if (r->pp > 1 && plan->reduce_dtype != VP_FP32)
            return "reduce_dtype: a 16-bit reduce dtype in a pipeline stage (gradients accumulated in it) is not "
                   "modelled";
    }
    plan->master_dtype = VP_DTYPE_NONE;
    plan->master_grads = false;
    plan->dim0_shards = true;
    plan->keeps_gathered = !r->reshard_after_forward;
    plan->collective_buffers = n > 1;
    /* torchtitan keeps the last block gathered after its forward (backward
     * starts with it); accelerate's fsdp2_prepare_model (model_code
     * transformers, as its importer sets) calls fully_shard on every
     * auto-wrapped layer with the plugin's reshard_after_forward, the last
     * one too */
    plan->keeps_last_block = vp_recipe_model_code(r) != VP_CODE_TRANSFORMERS;
    /* fully_shard(offload_policy=CPUOffloadPolicy(pin_memory=...)), torch
     * 2.6: the sharded parameters live on the CPU (FSDPParam
     * _init_sharded_param: moved to CPU, pinned with pin_memory), each
     * all-gather first copies them to the GPU (all_gather_inputs:
     * sharded_param_data.to(device)), each reduce-scattered gradient shard
     * goes to the CPU and its GPU output is dropped (foreach_reduce:
     * new_sharded_grad.to("cpu")), and the optimizer steps on the CPU;
     * pin_memory only decides whether the copies can overlap */
    if (r->offload_params == VP_OFFLOAD_CPU) {
        plan->params_on_host = true;
        plan->states_on_host = true;
        plan->grads_on_host = n > 1;
    }
    if (r->pp > 1 && n > 1) {
        /* torchtitan's apply_fsdp with pp: reshard_after_forward=False for
         * every block and the root (parallelize_llama.py at 9dec370; the
         * "default" of fsdp_reshard_after_forward since), and the pipeline
         * stage neither syncs nor reshards until the last micro-batch
         * (layout.c, defers_reduce): the stage stays gathered through the
         * step whatever reshard_after_forward says. The all-gather output
         * and reduce-scatter input slots are not modelled there (one
         * block's worth each). */
        plan->keeps_gathered = true;
        plan->defers_reduce = true;
        plan->collective_buffers = false;
    }
    return NULL;
}

static bool fsdp2_shards_params(const vp_recipe *r) {
    (void)r;
    return true;
}

/* every micro-batch gathers the blocks (twice with reshard_after_forward);
 * FSDP2's separate all-gather and reduce-scatter streams overlap compute */
static void fsdp2_traffic(const vp_recipe *r, vp_dp_traffic *out) {
    (void)r;
    out->gathers_params = true;
    out->shards_states = true;
    out->overlaps = true;
}

/* FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, torch
 * 2.4-2.6): the flat all-gather output is made on the all-gather streams
 * (foreach_all_gather, under all_gather_copy_in_stream, in forward and for
 * backward's prefetches alike: get_all_gather_streams; layout.c labels it
 * all_gather.output, .prefetch and, a reentrant rerun's, .state; under
 * mixed precision the cast shards it is copied in from, .copy_in) and copied
 * out into the unsharded parameters on the default stream
 * (foreach_all_gather_copy_out, in wait_for_unshard); the reduce-scatter
 * input is made on the default stream and its output, the sharded
 * gradient, on the reduce-scatter stream (foreach_reduce: reduce_output
 * under reduce_scatter_stream). */
static const char *const fsdp2_gathers[] = {"all_gather.copy_in", "all_gather.output",     "all_gather.prefetch",
                                             "all_gather.state",   "all_gather.mistargeted", NULL};
static const char *const fsdp2_reduced[] = {"reduce_scatter.grad", NULL};
static const vp_stream_ops fsdp2_streams = {{fsdp2_gathers, fsdp2_reduced, vp_offload_stream_ops}};

/* The model's code as framework = fsdp runs it: the families' modules,
 * each block a unit with its own hooks; torch.optim's foreach AdamW. */
const vp_framework_kind vp_framework_fsdp2 = {
    .name = "fsdp2",
    .plan = plan_fsdp2,
    .shards_params = fsdp2_shards_params,
    .dp_traffic = fsdp2_traffic,
    .streams = &fsdp2_streams,
    .optimizer_impl = VP_IMPL_FOREACH,
    .hf_modeling = true,
    .accelerate_native_amp = true,
    .python_locals = true,
    .bucketed_grads = true,
    .layer_units = true,
    .hsdp = true,
    .dtensor_tp = true,
    .compiles_blocks = true,
    .context_parallel = true,
    .sdpa_ring = true,
};
