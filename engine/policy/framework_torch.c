/* framework_torch.c — a plain PyTorch loop over transformers' model, DDP
 * with dp > 1. */
#include "framework.h"

/* torch.nn.parallel.DistributedDataParallel: every rank keeps everything;
 * the Reducer allocates flat buckets covering every gradient (reducer.cpp,
 * initialize_buckets: bucket.gradients = at::empty({total_length})). With
 * gradient_as_bucket_view the .grad tensors are views into them, so a
 * gradient autograd makes is copied in and freed. */
static const char *plan_torch(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    if (r->tp > 1) return "tp: tensor parallelism needs framework = \"megatron\"";
    if (r->zero) return "zero: ZeRO stages need framework = \"deepspeed\"";
    if (r->fsdp != VP_FSDP_NONE) return "fsdp: a sharding strategy needs framework = \"fsdp\"";
    if (r->offload_optimizer) return "offload_optimizer: optimizer offload needs framework = \"deepspeed\"";
    if (r->offload_params) return "offload_params: parameter offload needs framework = \"deepspeed\" (zero = 3) or \"fsdp\"";
    plan->grads = r->dp > 1 && r->ddp_bucket_view ? VP_GRADS_BUCKET : VP_GRADS_KEEP;
    plan->bucket_bytes_per_param_byte = r->dp > 1;
    plan->master_grads = p->master != VP_DTYPE_NONE;
    return NULL;
}

/* DDP all-reduces its buckets from backward hooks, overlapped by design */
static void torch_traffic(const vp_recipe *r, vp_dp_traffic *out) {
    (void)r;
    *out = (vp_dp_traffic){.overlaps = true};
}

/* torch.optim picks foreach by default when every tensor is on CUDA
 * (torch/optim/optimizer.py, _default_to_fused_or_foreach) */
const vp_framework_kind vp_framework_torch = {
    .name = "torch",
    .plan = plan_torch,
    .dp_traffic = torch_traffic,
    .optimizer_impl = VP_IMPL_FOREACH,
    .hf_modeling = true,
    .accelerate_native_amp = true,
    .python_locals = true,
    /* torchtune's single-device recipes compile each decoder layer
     * (training.compile_model: TransformerSelfAttentionLayer.compile()), as
     * torchtitan's apply_compile does (docs/compile.md) */
    .compiles_blocks = true,
};
