/* recipe.c — recipe defaults and the names of its enums. */
#include "recipe.h"

#include <stddef.h>
#include <string.h>

#include "finetune_method.h"
#include "framework.h"
#include "precision.h"

const char *const vp_optimizer_impl_names[] = {"for-loop", "foreach", "fused", "auto", NULL};
const char *const vp_kernels_names[] = {"auto", "eager", "fused", NULL};
const char *const vp_attention_names[] = {"eager", "sdpa", "flash", "sdpa-mem-efficient", NULL};
const char *const vp_sdpa_backend_names[] = {"auto", "flash", "cudnn", NULL};
const char *const vp_reduce_dtype_names[] = {"auto", "fp32", "bf16", "fp16", NULL};
const char *const vp_model_code_names[] = {"auto", "transformers", "torchtune", "torchtitan", NULL};
const char *const vp_experts_impl_names[] = {"auto", "modules", "eager", "grouped_mm", NULL};
bool vp_lora_targets_given(const vp_recipe *recipe) { return recipe->lora_targets || recipe->n_lora_names; }

vp_module_set vp_lora_targets(const vp_recipe *recipe) {
    if (vp_lora_targets_given(recipe)) return recipe->lora_targets;
    /* target_parameters alone: no module (vp_finetune_problem refuses the
     * model types PEFT has defaults for) */
    if (recipe->n_lora_params) return 0;
    /* TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: llama, mistral,
     * mixtral, qwen2 -> q_proj, v_proj; gpt2 -> c_attn; bloom -> query_key_value;
     * t5, mt5 -> q, v; bert -> query, value; mpt -> Wqkv */
    return vp_module_bit(VP_MODULE_Q_PROJ) | vp_module_bit(VP_MODULE_V_PROJ) | vp_module_bit(VP_MODULE_C_ATTN) |
           vp_module_bit(VP_MODULE_QUERY_KEY_VALUE) | vp_module_bit(VP_MODULE_Q) | vp_module_bit(VP_MODULE_V) |
           vp_module_bit(VP_MODULE_QUERY) | vp_module_bit(VP_MODULE_VALUE) | vp_module_bit(VP_MODULE_WQKV);
}

bool vp_lora_params_by_layer(const vp_recipe *r) {
    for (unsigned i = 0; i < r->n_lora_params; i++)
        if (r->lora_params[i].layer >= 0) return true;
    return false;
}

unsigned vp_recipe_first_trained_layer(const vp_recipe *r, unsigned layers) {
    if (!vp_finetune_method_of(r)->trains_last_layers) return 0;
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

const char *vp_recipe_problem(const vp_recipe *r) {
    /* selective recompute is Megatron-LM's (--recompute-granularity
     * selective, Korthikanti et al. 2022); transformers' and DeepSpeed's
     * checkpointing wrap whole layers */
    const vp_framework_kind *framework = vp_framework_of(r);
    if (r->transformers_major && r->transformers_major != 4 && r->transformers_major != 5)
        return "transformers_major: 4 or 5 (set from transformers_version)";
    /* torch.nn.functional.scaled_dot_product_attention's enable_gqa: 2.5's */
    if (r->sdpa_enable_gqa == 1 && (r->torch_version == VP_TORCH_1_13 || r->torch_version == VP_TORCH_2_4))
        return "sdpa_enable_gqa: SDPA's enable_gqa came with PyTorch 2.5 (torch_version 1.13 and 2.4 repeat the key "
               "and value heads)";
    if (r->selective && !framework->selective_recompute)
        return "checkpointing: selective recompute is Megatron-LM's: use framework = megatron, or full or every-K";
    /* tp > 1 computes Megatron's vocab-parallel cross-entropy
     * (tensor_parallel/cross_entropy.py) over the rank's slice */
    if (r->loss != VP_LOSS_CROSS_ENTROPY && (r->tp > 1 || framework->vocab_parallel_loss))
        return "loss: the fused, chunked, fused-linear, cut, chunked-linear and liger-ce losses are modelled on one rank's whole vocabulary; "
               "framework megatron and tp > 1 use Megatron's vocab-parallel cross-entropy (loss = cross-entropy)";
    /* cut_cross_entropy/cce_backward.py asserts both are float16 or bfloat16 */
    if (r->loss == VP_LOSS_CUT && vp_precision_get(r->precision)->compute == VP_FP32)
        return "loss: cut cross-entropy's backward takes 16-bit hidden states and head weights only "
               "(cce_backward_kernel): use a 16-bit precision";
    /* torch.amp.GradScaler.unscale_ raises "Attempting to unscale FP16
     * gradients." (grad_scaler.py _unscale_grads_): under fp16-autocast only
     * fp32 trainable parameters work, PEFT's adapters in fp32 */
    if (r->precision == VP_PREC_FP16_AUTOCAST &&
        (!vp_finetune_method_of(r)->peft || r->lora_dtype == VP_LORA_DTYPE_BASE))
        return "precision: fp16-autocast trains with GradScaler, which refuses fp16 gradients (\"Attempting to "
               "unscale FP16 gradients\"): only fp32 adapters train over fp16 weights (finetune lora, qlora, "
               "prefix or prompt, lora_dtype auto or fp32); use amp-fp16 (fp32 weights) or mixed-fp16";
    /* accelerate converts the outputs of the module it prepared under
     * native amp: its autocast over transformers' modules */
    if (r->outputs_fp32 && (!vp_precision_get(r->precision)->autocast || !framework->accelerate_native_amp ||
                            vp_recipe_model_code(r) != VP_CODE_TRANSFORMERS))
        return "outputs_fp32: accelerate's convert_outputs_to_fp32 wraps a transformers model's forward under its "
               "native amp only: an autocast precision (amp-bf16, amp-fp16, bf16-autocast, fp16-autocast), not "
               "under DeepSpeed or Megatron-LM (their engines' own mixed precision)";
    /* Liger-Kernel's apply_liger_kernel_to_* patch transformers' modules */
    if ((r->liger_rms_norm || r->liger_swiglu) &&
        (framework->fused_rmsnorm || vp_recipe_model_code(r) != VP_CODE_TRANSFORMERS))
        return "liger_rms_norm, liger_swiglu: Liger-Kernel patches transformers' modules (model_code transformers); "
               "Megatron-LM, torchtitan and torchtune run their own";
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
const char *const vp_lora_dtype_names[] = {"auto", "fp32", "base", NULL};
const char *const vp_loss_names[] = {"cross-entropy", "fused", "chunked", "fused-linear", "cut",
                                       "chunked-linear", "liger-ce", NULL};
/* torchao's Float8LinearRecipeName values (float8/config.py) */
const char *const vp_float8_recipe_names[] = {"tensorwise", "rowwise", "rowwise_with_gw_hp", NULL};
const char *const vp_sparsity_names[] = {"none", "2:4", NULL};

const char *const vp_fsdp_names[] = {"none", "no_shard", "shard_grad_op", "full_shard", "hybrid_shard", NULL};
const char *const vp_offload_names[] = {"none", "cpu", "nvme", NULL};
const char *const vp_pp_schedule_names[] = {"1f1b",          "gpipe",         "interleaved-1f1b",
                                            "1F1B",          "GPipe",         "Interleaved1F1B",
                                            "ZBVZeroBubble", "InterleavedZeroBubble", "DualPipeV", NULL};

const char *const vp_torch_version_names[] = {"2.x", "1.13", "2.4", "2.5",  "2.6",  "2.7",
                                              "2.8", "2.9",  "2.10", "2.11", "2.12", NULL};
const char *const vp_device_names[] = {"cuda", "cpu", NULL};
const char *const vp_allocator_model_names[] = {"constant", "simulated", NULL};
const char *const vp_load_names[] = {"auto", "cpu", "device-map", "warmup", NULL};
const char *const vp_checkpoint_quant_names[] = {"none", "mxfp4", NULL};

vp_load vp_recipe_load(const vp_recipe *recipe) {
    if (recipe->load != VP_LOAD_AUTO) return recipe->load;
    /* transformers' Bnb4BitHfQuantizer / Bnb8BitHfQuantizer.update_device_map:
     * no device_map given, every tensor goes to the current GPU */
    return vp_finetune_method_of(recipe)->quantizes_base ? VP_LOAD_DEVICE_MAP : VP_LOAD_CPU;
}

vp_model_code vp_recipe_model_code(const vp_recipe *recipe) {
    if (recipe->model_code != VP_CODE_AUTO) return recipe->model_code;
    /* torchtitan trains whole models; PEFT's adapters wrap transformers'
     * (accelerate's and axolotl's FSDP2 runs) */
    if (vp_finetune_method_of(recipe)->peft) return VP_CODE_TRANSFORMERS;
    return vp_framework_of(recipe)->dtensor_tp ? VP_CODE_TORCHTITAN : VP_CODE_TRANSFORMERS;
}

vp_experts_impl vp_recipe_experts_impl(const vp_recipe *recipe) {
    /* kept at 4.x's layout, which the PyTorch harness and every published
     * mixture row measured; 5.x's are chosen by name, or by auto under
     * transformers 5 where the model's block is modelled (op_moe.c's
     * moe_resolve_recipe, before the run) */
    return recipe->experts_impl == VP_EXPERTS_AUTO ? VP_EXPERTS_MODULES : recipe->experts_impl;
}

bool vp_recipe_fused_experts(const vp_recipe *recipe) {
    return vp_recipe_experts_impl(recipe) != VP_EXPERTS_MODULES;
}

bool vp_recipe_checkpoint_early_stop(const vp_recipe *recipe) {
    /* torch.utils.checkpoint.set_checkpoint_early_stop: on by default since 2.1 */
    if (recipe->checkpoint_early_stop >= 0) return recipe->checkpoint_early_stop;
    return vp_recipe_torch2(recipe);
}

bool vp_recipe_torch2(const vp_recipe *recipe) { return recipe->torch_version != VP_TORCH_1_13; }

bool vp_recipe_offload_streams(const vp_recipe *recipe) {
    if (!recipe->offload_activations || !recipe->offload_torchtune) return false;
    if (recipe->offload_streams >= 0) return recipe->offload_streams;
    /* use_streams=None: `torch.__version__ >= "2.5.0.dev20240907"` */
    return recipe->torch_version != VP_TORCH_1_13 && recipe->torch_version != VP_TORCH_2_4;
}

bool vp_recipe_fsdp2_rerun_reshards(const vp_recipe *recipe) {
    if (recipe->fsdp2_rerun_reshards >= 0) return recipe->fsdp2_rerun_reshards;
    /* FSDPParamGroup.post_forward skips both inside backward (is_bw()) from
     * PyTorch 2.10 on (pytorch#164009) */
    return recipe->torch_version >= VP_TORCH_2_4 && recipe->torch_version <= VP_TORCH_2_9;
}

bool vp_recipe_transformers_since(const vp_recipe *recipe, unsigned major, unsigned minor) {
    if (recipe->transformers_major != major) return recipe->transformers_major > major;
    return recipe->transformers_minor >= minor;
}

bool vp_recipe_sdpa_enable_gqa(const vp_recipe *recipe) {
    if (recipe->sdpa_enable_gqa >= 0) return recipe->sdpa_enable_gqa;
    /* integrations/sdpa_attention.py's use_gqa_in_sdpa (huggingface/
     * transformers#39412, in 4.54): on CUDA with PyTorch 2.5 or later, the
     * mask aside (op_attention.c) */
    bool torch = recipe->torch_version != VP_TORCH_1_13 && recipe->torch_version != VP_TORCH_2_4;
    return vp_recipe_transformers_since(recipe, 4, 54) && torch && recipe->device == VP_DEVICE_CUDA;
}

void vp_recipe_resolve(vp_recipe *recipe) {
    if (recipe->optimizer_impl != VP_IMPL_AUTO) return;
    /* the framework's own: torch.optim's foreach, or its fused Adam */
    recipe->optimizer_impl = vp_framework_of(recipe)->optimizer_impl;
}
