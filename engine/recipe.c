/* recipe.c — recipe defaults and the names of its enums. */
#include "recipe.h"

#include <stddef.h>
#include <string.h>

const char *const vp_precision_names[] = {
    "fp32", "bf16", "fp16", "amp-bf16", "amp-fp16", "mixed-bf16", "mixed-fp16", "fp8", NULL,
};
const char *const vp_optimizer_impl_names[] = {"for-loop", "foreach", "fused", "auto", NULL};
const char *const vp_attention_names[] = {"eager", "sdpa", "flash", "sdpa-mem-efficient", NULL};
const char *const vp_framework_names[] = {"torch", "deepspeed", "fsdp", "megatron", NULL};
vp_module_set vp_lora_targets(const vp_recipe *recipe) {
    if (recipe->lora_targets) return recipe->lora_targets;
    /* TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama, mistral,
     * mixtral, qwen2 -> q_proj, v_proj; gpt2 -> c_attn; bloom -> query_key_value;
     * t5, mt5 -> q, v; bert -> query, value */
    return vp_module_bit(VP_MODULE_Q_PROJ) | vp_module_bit(VP_MODULE_V_PROJ) | vp_module_bit(VP_MODULE_C_ATTN) |
           vp_module_bit(VP_MODULE_QUERY_KEY_VALUE) | vp_module_bit(VP_MODULE_Q) | vp_module_bit(VP_MODULE_V) |
           vp_module_bit(VP_MODULE_QUERY) | vp_module_bit(VP_MODULE_VALUE);
}

unsigned vp_recipe_first_trained_layer(const vp_recipe *r, unsigned layers) {
    if (r->finetune != VP_FINETUNE_FREEZE) return 0;
    return r->trainable_layers >= layers ? 0 : layers - r->trainable_layers;
}

unsigned vp_recipe_microbatches(const vp_recipe *r) {
    if (r->microbatches) return r->microbatches;
    if (r->grad_accum) return r->grad_accum;
    /* Megatron-LM's global_batch_size = micro_batch_size x data-parallel
     * size x num_microbatches (megatron/core/num_microbatches_calculator.py);
     * DeepSpeed's train_batch_size likewise with gradient_accumulation_steps */
    unsigned per_pass = r->micro_batch * r->dp;
    if (r->global_batch && per_pass && r->global_batch % per_pass == 0) return r->global_batch / per_pass;
    return r->pp > 1 ? r->pp : 1;
}

const char *vp_recipe_batch_problem(const vp_recipe *r) {
    if (!r->global_batch) return NULL;
    unsigned per_pass = r->micro_batch * r->dp;
    if (r->global_batch % per_pass)
        return "global_batch: must be a multiple of micro_batch x dp (the sequences of one pass over every "
               "data-parallel rank)";
    unsigned given = r->microbatches ? r->microbatches : r->grad_accum;
    if (given && given * per_pass != r->global_batch)
        return "global_batch: disagrees with micro_batch x dp x grad_accum (or num_microbatches); give two of them";
    return NULL;
}

const char *const vp_quant_names[] = {"none", "nf4", "fp4", "int8", NULL};
const char *const vp_sparsity_names[] = {"none", "2:4", NULL};

const char *const vp_finetune_names[] = {"full", "lora", "qlora", "prefix", "prompt", "freeze", NULL};
const char *const vp_fsdp_names[] = {"none", "no_shard", "shard_grad_op", "full_shard", "hybrid_shard", NULL};
const char *const vp_offload_names[] = {"none", "cpu", "nvme", NULL};
const char *const vp_pp_schedule_names[] = {"1f1b", "gpipe", "interleaved-1f1b", NULL};
const char *const vp_torch_version_names[] = {"2.x", "1.13", NULL};
const char *const vp_device_names[] = {"cuda", "cpu", NULL};

void vp_recipe_defaults(vp_recipe *recipe) {
    memset(recipe, 0, sizeof *recipe); /* every key unset, then the defaults */
    recipe->precision = VP_PREC_MIXED_BF16;
    recipe->optimizer = 0;
    recipe->optimizer_impl = VP_IMPL_AUTO;
    recipe->weight_decay = -1.0;
    recipe->micro_batch = 1;
    recipe->seq_len = 2048;
    recipe->checkpoint_every = 0;
    /* transformers 4.x's gradient_checkpointing_enable passes
     * use_reentrant=True when given no kwargs (huggingface/transformers
     * #28538); 5.0 passes False (#43203) */
    recipe->use_reentrant = true;
    recipe->checkpoint_early_stop = -1;
    recipe->attention = VP_ATTN_SDPA; /* transformers' default attn_implementation */
    recipe->framework = VP_FRAMEWORK_TORCH;
    recipe->torch_version = VP_TORCH_2;
    recipe->device = VP_DEVICE_CUDA;
    recipe->keep_logits = true;
    recipe->use_cache = true; /* PretrainedConfig.use_cache */
    recipe->grads_set_to_none = true;
    recipe->training = true;
    /* A reported out-of-memory error: 1.83 GiB reserved but unallocated
     * beside 75.31 GiB allocated (vllm-project/compressed-tensors#587):
     * 2.43 %. Fragmentation depends on the workload; set it per recipe. */
    recipe->fragmentation = 1.83 / 75.31;
    /* The context alone, with CUDA's lazy module loading (the default since
     * PyTorch 1.13): 426 MiB in nvidia-smi on an RTX 6000 Ada with PyTorch
     * 2.10 / CUDA 13 (unslothai/unsloth-zoo#1053); before CUDA 11.7 every
     * kernel was loaded up front and it was over 1 GiB (1343 MiB on a V100
     * in HF's perf_train_gpu_one docs). */
    recipe->cuda_context_mib = 426.0;
    recipe->dp = 1;
    recipe->zero = 0;
    recipe->fsdp = VP_FSDP_NONE;
    recipe->fsdp_shard_size = 0;
    recipe->offload_optimizer = VP_OFFLOAD_NONE;
    recipe->offload_params = VP_OFFLOAD_NONE;
    /* DeepSpeed's defaults (deepspeed/runtime/zero/config.py): 5e8, 5e8, 5e7 */
    recipe->reduce_bucket_size = 5e8;
    recipe->allgather_bucket_size = 5e8;
    recipe->prefetch_bucket_size = 5e7;
    /* DeepSpeed's DeepSpeedZeroConfig defaults */
    recipe->max_live_parameters = 1e9;
    recipe->max_reuse_distance = 1e9;
    recipe->persistence_threshold = 1e5;
    recipe->overlap_comm = -1;
    /* DistributedDataParallel(bucket_cap_mb=25, gradient_as_bucket_view=False) */
    recipe->ddp_bucket_view = false;
    recipe->ddp_bucket_mb = 25.0;
    recipe->gpus_per_node = 0;
    recipe->tp = 1;
    recipe->ep = 1;
    recipe->etp = 0;
    recipe->cp = 1;
    recipe->grad_accum = 0;
    recipe->trainable_layers = 0;
    /* peft.LoraConfig: r=8, lora_alpha=8, lora_dropout=0.0 */
    recipe->finetune = VP_FINETUNE_FULL;
    recipe->lora_rank = 8;
    recipe->lora_alpha = 8;
    recipe->lora_dropout = 0.0;
    recipe->lora_targets = 0;
    recipe->use_dora = false;
    recipe->modules_to_save = 0;
    /* QLoRA's recipe (Dettmers et al. 2023): NF4, double quantization, bf16 compute */
    recipe->quant = VP_QUANT_NONE;
    recipe->double_quant = true;
    recipe->int8_threshold = 6.0; /* transformers' BitsAndBytesConfig default */
    recipe->compute_dtype = VP_BF16;
    recipe->sequence_parallel = false;
    recipe->distributed_optimizer = false;
    recipe->grads_in_fp32 = true; /* Megatron-LM's default for bf16 (arguments.py) */
    recipe->selective = false;
    recipe->pp = 1;
    recipe->pp_schedule = VP_PP_1F1B;
    recipe->virtual_stages = 1;
    recipe->microbatches = 0;
    recipe->n_pp_layers = 0;
    recipe->gpus = 0;
}

bool vp_recipe_checkpoint_early_stop(const vp_recipe *recipe) {
    /* torch.utils.checkpoint.set_checkpoint_early_stop: on by default since 2.1 */
    if (recipe->checkpoint_early_stop >= 0) return recipe->checkpoint_early_stop;
    return recipe->torch_version != VP_TORCH_1_13;
}

void vp_recipe_resolve(vp_recipe *recipe) {
    if (recipe->optimizer_impl != VP_IMPL_AUTO) return;
    /* DeepSpeed builds its own FusedAdam (multi-tensor apply, no
     * temporaries); torch.optim picks foreach by default when every tensor
     * is on CUDA (torch/optim/optimizer.py, _default_to_fused_or_foreach) */
    bool own_fused = recipe->framework == VP_FRAMEWORK_DEEPSPEED || recipe->framework == VP_FRAMEWORK_MEGATRON;
    /* Megatron-LM steps with apex's or Transformer Engine's FusedAdam */
    recipe->optimizer_impl = own_fused ? VP_IMPL_FUSED : VP_IMPL_FOREACH;
}
