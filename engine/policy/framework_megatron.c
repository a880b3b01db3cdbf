/* framework_megatron.c — Megatron-LM with Megatron-Core's own model:
 * tensor, pipeline, context and expert parallelism, fused kernels, its
 * distributed optimizer. */
#include "framework.h"

/* Megatron-LM (megatron/core/distributed, optimizer): a 16-bit model whose
 * weight gradients go straight into contiguous main_grad buffers (fp32 with
 * accumulate_allreduce_grads_in_fp32; gradient_accumulation_fusion writes
 * the wgrad GEMM into them), fp32 master weights and Adam states in the
 * optimizer, sharded over data parallel with the distributed optimizer;
 * main_param.grad is main_grad itself (.float() of an fp32 tensor). */
static const char *plan_megatron(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    if (r->zero) return "zero: ZeRO stages need framework = \"deepspeed\"";
    if (r->fsdp != VP_FSDP_NONE) return "fsdp: a sharding strategy needs framework = \"fsdp\"";
    if (r->offload_optimizer || r->offload_params) return "offload_optimizer: Megatron-LM does not offload";
    if (!vp_precision_own_mixed(p)) return "precision: Megatron-LM trains with mixed-bf16, mixed-fp16 or fp32";
    plan->grads = VP_GRADS_BUCKET;
    plan->shard_grads_dtype = r->grads_in_fp32 ? VP_FP32 : p->grads;
    /* gradients are reduced, and the distributed optimizer shards, over
     * the data-parallel group with context parallelism (dp x cp ranks);
     * experts' over the expert-data-parallel group, the ranks that hold
     * the same slice of the same experts: dp x tp x cp / (ep x etp)
     * (megatron/core/parallel_state.py) */
    unsigned etp = r->etp ? r->etp : r->tp, ep = r->ep ? r->ep : 1;
    plan->shards.states = r->distributed_optimizer ? r->dp * r->cp : 1;
    plan->expert_shards.states = r->distributed_optimizer ? r->dp * r->tp * r->cp / (ep * etp) : 1;
    plan->master_grads = false;
    return NULL;
}

/* --overlap-grad-reduce and --overlap-param-gather (overlap_comm here; off
 * by default) */
static void megatron_traffic(const vp_recipe *r, vp_dp_traffic *out) {
    out->gathers_params = false;
    out->shards_states = r->distributed_optimizer;
    out->overlaps = r->overlap_comm > 0;
}

/* Megatron-Core: FusedScaleMaskSoftmax; linear_fc1 with bias_swiglu;
 * Transformer Engine's (or apex's) fused RMSNorm, qk_layernorm too; its
 * MoE layer's token dispatcher; GPTModel runs the head and loss in its
 * forward, and the forward step returns the loss alone. Steps with apex's
 * or Transformer Engine's FusedAdam. megatron/training/arguments.py:
 * "When using MoE and tensor parallelism, sequence parallelism must be
 * used." */
const vp_framework_kind vp_framework_megatron = {
    .name = "megatron",
    .plan = plan_megatron,
    .dp_traffic = megatron_traffic,
    .optimizer_impl = VP_IMPL_FUSED,
    .fused_softmax = true,
    .fused_swiglu = true,
    .fused_rmsnorm = true,
    .token_dispatcher = true,
    .head_in_forward = true,
    .returns_loss_only = true,
    .selective_recompute = true,
    .context_parallel = true,
    .expert_parallel = true,
    .experts_need_sequence_parallel = true,
    .vocab_parallel_loss = true,
    .bucketed_grads = true,
    .main_grad_buffers = true,
};
