/* recipe.h — how a step is run: precision, optimizer, batch, checkpointing,
 * attention kernel, framework. Strings became these enums at the Lua
 * boundary; the core never compares names. */
#ifndef VP_RECIPE_H
#define VP_RECIPE_H

#include "modules.h"
#include <stdbool.h>
#include <stdint.h>

#include "allocator.h"
#include "prims.h"

/* The precision: the index of its policy in precision.c's table (whose
 * names a recipe uses); code asks the policy (vp_precision_get). */
typedef enum {
    VP_PREC_FP32,
    VP_PREC_BF16,
    VP_PREC_FP16,
    VP_PREC_AMP_BF16,
    VP_PREC_AMP_FP16,
    VP_PREC_MIXED_BF16,
    VP_PREC_MIXED_FP16,
    VP_PREC_FP8,
    VP_PREC_FP8_TORCHAO,
    VP_PREC_BF16_AUTOCAST,
    VP_PREC_FP16_AUTOCAST,
    VP_PREC_COUNT
} vp_precision_id;

typedef enum { VP_IMPL_FOR_LOOP, VP_IMPL_FOREACH, VP_IMPL_FUSED, VP_IMPL_AUTO, VP_IMPL_COUNT } vp_optimizer_impl;

/* The model code's element-wise kernels, for the step time: transformers'
 * and torchtitan's eager modules (an RMSNorm written in Python is one
 * kernel per op) or fused ones (Megatron-LM's, Transformer Engine's,
 * Liger's, torch.compile's); auto: fused under Megatron-LM or compile. */
typedef enum { VP_KERNELS_AUTO, VP_KERNELS_EAGER, VP_KERNELS_FUSED } vp_kernels;

typedef enum {
    VP_ATTN_EAGER,
    VP_ATTN_SDPA,
    VP_ATTN_FLASH,
    VP_ATTN_MEM_EFFICIENT,
    VP_ATTN_COUNT
} vp_attention_impl;

/* SDPA's backend for 16-bit inputs: auto is PyTorch's choice (cuDNN's
 * attention on compute capability 9.x and 10.x, the flash kernel elsewhere;
 * estimate.c's stage_of decides with the GPU), or one named. */
typedef enum { VP_SDPA_AUTO, VP_SDPA_FLASH, VP_SDPA_CUDNN } vp_sdpa_backend;

/* FSDP2's MixedPrecisionPolicy reduce_dtype, the dtype gradients are
 * reduce-scattered in: auto is torchtitan's fp32, or the parameters'
 * 16-bit dtype under transformers' model code (accelerate's
 * set_mixed_precision: param_dtype = reduce_dtype = the mixed precision's). */
typedef enum { VP_REDUCE_AUTO, VP_REDUCE_FP32, VP_REDUCE_BF16, VP_REDUCE_FP16 } vp_reduce_dtype;

/* Whose modelling code runs the model, where their layouts differ:
 * transformers' (its sdpa_attention_forward makes q, k, v contiguous),
 * torchtune's or torchtitan's (the query handed to SDPA as a transposed
 * view); auto: torchtitan's under framework fsdp2, else transformers'. */
typedef enum { VP_CODE_AUTO, VP_CODE_TRANSFORMERS, VP_CODE_TORCHTUNE, VP_CODE_TORCHTITAN } vp_model_code;
/* How transformers runs a mixture's routed experts: 4.x's ModuleList of
 * nn.Linear experts (modules), or 5.x's 3-D parameters through its
 * per-expert loop (eager) or torch._grouped_mm (grouped_mm, 5.x's default
 * from PyTorch 2.9 on). */
typedef enum { VP_EXPERTS_AUTO, VP_EXPERTS_MODULES, VP_EXPERTS_EAGER, VP_EXPERTS_GROUPED_MM } vp_experts_impl;

/* The training framework: the index of its entry among the registered
 * frameworks (framework.h, listed in framework_list.h). Code asks the
 * entry's properties (vp_framework_of), never compares these. */
typedef enum {
#define VP_FRAMEWORK(id, name) VP_FRAMEWORK_##id,
#include "framework_list.h"
#undef VP_FRAMEWORK
    VP_FRAMEWORK_COUNT
} vp_framework;

/* torch.distributed.fsdp.ShardingStrategy */
typedef enum {
    VP_FSDP_NONE,          /* not FSDP */
    VP_FSDP_NO_SHARD,
    VP_FSDP_SHARD_GRAD_OP,
    VP_FSDP_FULL_SHARD,
    VP_FSDP_HYBRID_SHARD,
    VP_FSDP_COUNT
} vp_fsdp_strategy;

typedef enum { VP_OFFLOAD_NONE, VP_OFFLOAD_CPU, VP_OFFLOAD_NVME, VP_OFFLOAD_COUNT } vp_offload;

/* Pipeline schedules (Huang et al. 2019 GPipe; Narayanan et al. 2021 1F1B
 * and its interleaved variant with virtual stages): Megatron-LM's, with its
 * even split of the layers, then torch.distributed.pipelining's under the
 * names torchtitan gives them (pipeline_parallel_schedule), with
 * torchtitan's split (engine/step/estimate.c). The last three split each
 * backward into its input and weight halves (Qi et al. 2023, "Zero Bubble
 * Pipeline Parallelism"; engine/step/pp_split_backward.c). */
typedef enum {
    VP_PP_1F1B,
    VP_PP_GPIPE,
    VP_PP_INTERLEAVED,
    VP_PP_TORCH_1F1B,
    VP_PP_TORCH_GPIPE,
    VP_PP_TORCH_INTERLEAVED,
    VP_PP_TORCH_ZBV,
    VP_PP_TORCH_INTERLEAVED_ZB,
    VP_PP_TORCH_DUALPIPEV,
    VP_PP_COUNT
} vp_pp_schedule;

enum { VP_MAX_STAGES = 1024 };
/* lora_targets' names of Lua blocks' own linears (and modules_to_save's
 * of their own modules): how many, how long */
enum { VP_LORA_NAMES = 8, VP_LORA_NAME = 40 };
#define VP_LORA_MISSING "lora_targets: no linear module of the model is called "
#define VP_SAVED_MISSING "modules_to_save: no module of the model is called "

/* PEFT's target_parameters (LoraConfig, lora.ParamWrapper): a mixture's
 * 3-D experts parameters given adapters, each of one layer or of all */
enum { VP_LORA_PARAMS = 64 };
typedef struct {
    int layer;                   /* the model's layer index; -1: every layer */
    vp_param_target param;
} vp_lora_param;

/* What a step trains: everything, or a parameter-efficient method as
 * Hugging Face PEFT applies it. */
typedef enum {
    VP_FINETUNE_FULL,
    VP_FINETUNE_LORA,
    VP_FINETUNE_QLORA,
    VP_FINETUNE_PREFIX,
    VP_FINETUNE_PROMPT,
    VP_FINETUNE_FREEZE,
    VP_FINETUNE_COUNT
} vp_finetune;

/* bitsandbytes' storage of a frozen base (QLoRA). */
typedef enum { VP_QUANT_NONE, VP_QUANT_NF4, VP_QUANT_FP4, VP_QUANT_INT8, VP_QUANT_COUNT } vp_quant;

/* 2:4 structured sparsity as NVIDIA apex's ASP trains it
 * (apex/contrib/sparsity/asp.py): a bool mask buffer beside every pruned
 * weight, gradients and weights masked in place around the step. */
typedef enum { VP_SPARSITY_NONE, VP_SPARSITY_2_4, VP_SPARSITY_COUNT } vp_sparsity;

/* How the caching allocator's reservation is found: the peak's segments
 * plus a constant fragmentation share, or the allocator simulated over the
 * step's events (engine/core/allocator.c). */
typedef enum { VP_ALLOCATOR_CONSTANT, VP_ALLOCATOR_SIMULATED } vp_allocator_model;

/* How the model reaches the GPU before the first step (the run before the
 * steady state, engine/step/run_phases.c): built or loaded on the CPU and
 * moved parameter by parameter (model.to, FSDP's device_id); loaded straight
 * to the GPU by from_pretrained(device_map=...) (bitsandbytes quantizing
 * there); the same after transformers' caching_allocator_warmup. auto:
 * device-map for qlora (transformers' bitsandbytes quantizers set a device
 * map of the current GPU when none is given), cpu otherwise. */
typedef enum { VP_LOAD_AUTO, VP_LOAD_CPU, VP_LOAD_DEVICE_MAP, VP_LOAD_WARMUP, VP_LOAD_COUNT } vp_load;
extern const char *const vp_load_names[];

/* The checkpoint's own quantization, which from_pretrained dequantizes
 * while loading (the run before the steady state): none, or GPT-OSS's
 * MXFP4 experts under transformers' Mxfp4Config(dequantize=True). */
typedef enum { VP_CHECKPOINT_PLAIN, VP_CHECKPOINT_MXFP4, VP_CHECKPOINT_COUNT } vp_checkpoint_quant;
extern const char *const vp_checkpoint_quant_names[];
extern const char *const vp_sparsity_names[];

/* The adapters' dtype (LoRA, DoRA, prompt and prefix tuning): PEFT 0.12+
 * upcasts 16-bit adapters to fp32 (autocast_adapter_dtype); PEFT before it,
 * fsdp_qlora and torchtune keep the base's dtype. */
typedef enum { VP_LORA_DTYPE_AUTO, VP_LORA_DTYPE_FP32, VP_LORA_DTYPE_BASE, VP_LORA_DTYPE_COUNT } vp_lora_dtype_rule;
extern const char *const vp_lora_dtype_names[];

/* The causal-LM loss and what it materialises (docs/loss.md): HF's
 * cross-entropy over full fp32 logits; FlashAttention's fused kernel on the
 * 16-bit logits; torchtune's chunked output and loss; Liger's fused linear
 * cross-entropy; Apple's cut cross-entropy. */
typedef enum {
    VP_LOSS_CROSS_ENTROPY,
    VP_LOSS_FUSED,
    VP_LOSS_CHUNKED,
    VP_LOSS_FUSED_LINEAR,
    VP_LOSS_CUT,
    VP_LOSS_CHUNKED_LINEAR,
    VP_LOSS_LIGER_CE,
    VP_LOSS_COUNT
} vp_loss_kind;
extern const char *const vp_loss_names[];
extern const char *const vp_float8_recipe_names[];
/* loss = chunked: at most this many chunks (one split node's outputs) */
enum { VP_LOSS_CHUNKS_MAX = 8 };

/* Behaviour that changed between the PyTorch versions we model: 2.x is
 * the newest 2.x behaviour (2.10 on); a minor version from 2.4 (FSDP2's
 * first) is 2.x but where it is named (vp_recipe_fsdp2_rerun_reshards). */
typedef enum {
    VP_TORCH_2,
    VP_TORCH_1_13,
    VP_TORCH_2_4,
    VP_TORCH_2_5,
    VP_TORCH_2_6,
    VP_TORCH_2_7,
    VP_TORCH_2_8,
    VP_TORCH_2_9,
    VP_TORCH_2_10,
    VP_TORCH_2_11,
    VP_TORCH_2_12,
    VP_TORCH_COUNT
} vp_torch_version;

typedef struct {
    vp_precision_id precision;
    unsigned optimizer;          /* index into the optimizer registry */
    vp_optimizer_impl optimizer_impl;
    vp_kernels kernels;
    double weight_decay;         /* < 0: the optimizer's own default */
    bool first_moment;           /* the optional first moment of an optimizer that has one (Adafactor's beta1) */
    bool optimizer_in_backward;  /* torchtune's: one optimizer per parameter, stepped in backward (optim_in_backward.c) */
    bool compile;                /* torch.compile per block, torchtitan's (compile_region.c; docs/compile.md) */
    bool compile_loss;           /* ... and around the loss: torchtune's compile_loss */
    uint64_t micro_batch;
    uint64_t seq_len;
    uint64_t target_len;         /* encoder-decoder models: the decoder's tokens (labels); 0: seq_len */
    unsigned checkpoint_every;   /* 0: none; k: the input of every k-layer chunk is kept */
    unsigned checkpoint_layers;  /* layers-K: only every K-th layer is checkpointed (one layer a chunk) */
    bool checkpoint_ops;         /* op-selective: each layer checkpointed under torchtitan's op-level policy */
    bool selective;              /* Korthikanti et al.'s selective recompute: the attention core only */
    bool offload_torchtune;      /* offload_activations by torchtune's OffloadActivations, not save_on_cpu */
    int offload_streams;         /* ... with use_streams (its stashes); -1: the version's */
    bool offload_trl;            /* ... as TRL 1.8+'s copy of it does (storage keys, parameters' views) */
    bool offload_clone_views;    /* ... with axolotl 0.18's patch: views cloned contiguous before the hook */
    bool use_reentrant;          /* torch.utils.checkpoint(use_reentrant=...) for checkpointed chunks */
    int checkpoint_early_stop;   /* use_reentrant=False: the rerun stops at the last saved tensor; -1: the version's */
    vp_attention_impl attention;
    vp_sdpa_backend sdpa_backend;
    vp_model_code model_code;
    vp_experts_impl experts_impl;
    unsigned transformers_major;   /* transformers' major version where a stack or the recipe names it (0: not) */
    unsigned transformers_minor;   /* ... and its minor version, where the recipe's transformers_version has one */
    int sdpa_enable_gqa;         /* transformers hands SDPA the key/value heads with enable_gqa; -1: the versions' */
    vp_reduce_dtype reduce_dtype; /* framework = fsdp2 with a mixed precision */
    vp_framework framework;
    vp_torch_version torch_version;
    vp_device device;
    bool keep_logits;            /* the loop holds the model's outputs through backward */
    bool outputs_fp32;           /* accelerate's convert_outputs_to_fp32 around the forward (step.c) */
    bool pp_return_outputs;      /* torch.distributed.pipelining: step(return_outputs=) */
    vp_loss_kind loss;           /* how the causal-LM loss is computed */
    bool liger_rms_norm;         /* Liger-Kernel's RMSNorm in place of transformers' (ops/op_norm.c) */
    bool liger_swiglu;           /* Liger-Kernel's SwiGLU in the gated MLPs (ops/op_mlp.c) */
    bool liger_before_load;      /* Liger's patch swaps the classes before the model is built */
    unsigned loss_chunks;        /* loss = chunked, chunked-linear: torchtune's num_output_chunks */
    bool offload_activations;    /* the forward under torch.autograd.graph.save_on_cpu(pin_memory=True) */
    bool use_cache;              /* the model's outputs keep every layer's keys and values (HF configs' default) */
    bool grads_set_to_none;      /* zero_grad(set_to_none=True) */
    bool training;               /* dropout active */
    double fragmentation;        /* reserved beyond segments, as a fraction of the allocated peak */
    vp_allocator_model allocator; /* constant: segments + fragmentation; simulated: engine/core/allocator.c */
    vp_load load;                /* how the model reaches the GPU (the run before the steady state) */
    vp_checkpoint_quant checkpoint_quant; /* dequantized while loading (the run before the steady state) */
    vp_alloc_config alloc_conf;  /* PYTORCH_CUDA_ALLOC_CONF's options, for allocator = simulated */
    double cuda_context_mib;     /* the CUDA context and loaded kernels */
    unsigned nccl_channels;      /* NCCL's channels per communicator (0: by the GPU's interconnect) */
    bool nccl_nvls;              /* NCCL_NVLS_ENABLE: NVLink SHARP where the GPUs support it (engine/step/nccl.c) */
    /* data parallelism */
    unsigned dp;                 /* data-parallel ranks */
    unsigned zero;               /* DeepSpeed ZeRO stage 0-3 */
    bool zero_init;              /* ZeRO-3: the model built under deepspeed.zero.Init (run_phases.c) */
    vp_fsdp_strategy fsdp;
    unsigned fsdp_shard_size;    /* HYBRID_SHARD: ranks a model is sharded over (0: dp) */
    bool reshard_after_forward;  /* FSDP2: blocks resharded after forward (torchtitan's policy) */
    int fsdp2_rerun_reshards;    /* FSDP2: a reentrant rerun reshards and records its place; -1: the version's */
    bool fp8_all_gather;         /* FSDP2 + fp8-torchao: float8 weights all-gathered in float8 (layout.c) */
    vp_float8_recipe fp8_recipe; /* fp8-torchao: torchao's recipe (prims.c vp_linear_float8) */
    bool async_tp;               /* torchtitan's enable_async_tensor_parallel (needs compile) */
    vp_offload offload_optimizer;
    vp_offload offload_params;
    double reduce_bucket_size;   /* DeepSpeed, elements */
    double allgather_bucket_size;
    double prefetch_bucket_size; /* stage3_prefetch_bucket_size, elements */
    double max_live_parameters;  /* stage3_max_live_parameters: gathered elements that cap prefetching */
    double max_reuse_distance;   /* stage3_max_reuse_distance: gathered parameters used again within this many
                                  * elements of the trace stay gathered */
    double persistence_threshold; /* stage3_param_persistence_threshold: smaller parameters stay gathered */
    int overlap_comm;            /* -1: DeepSpeed's default (on for stage 3 only) */
    bool ddp_bucket_view;        /* DDP gradient_as_bucket_view */
    double ddp_bucket_mb;        /* DDP bucket_cap_mb */
    unsigned gpus_per_node;      /* for host memory per node (0: min(dp, 8)) */
    /* model parallelism (Megatron-LM) */
    unsigned tp;                 /* tensor-parallel ranks */
    unsigned ep;                 /* expert-parallel ranks (within dp x tp x cp) */
    unsigned etp;                /* expert-tensor-parallel ranks (0: tp, Megatron's default) */
    unsigned cp;                 /* context-parallel ranks: the sequence split, ring attention */
    bool sequence_parallel;      /* norms, dropouts and the residual stream split along the sequence */
    bool distributed_optimizer;  /* master weights and states sharded over dp */
    bool grads_in_fp32;          /* accumulate_allreduce_grads_in_fp32: fp32 main_grad buffers */
    /* pipeline parallelism */
    unsigned pp;                 /* pipeline stages */
    vp_pp_schedule pp_schedule;
    unsigned virtual_stages;     /* model chunks per rank with the interleaved schedule */
    unsigned microbatches;       /* micro-batches per step (0: grad_accum, else pp) */
    unsigned grad_accum;         /* gradient accumulation steps: micro-batches without pp (0: unset) */
    unsigned global_batch;       /* sequences per optimizer step over all dp ranks (0: unset) */
    unsigned n_pp_layers;        /* a custom layout: layers of each stage (0: even) */
    unsigned pp_layers[VP_MAX_STAGES];
    unsigned pp_layers_per_stage; /* torchtitan's: sets the stages per rank from the layers (0: unset) */
    unsigned pp_first_less;      /* torchtitan's weight of the embeddings in its split, in layers */
    unsigned pp_last_less;       /* ... and of the final norm with the head */
    unsigned gpus;               /* when given, must equal dp x tp x pp x cp */
    /* fine-tuning (PEFT's LoraConfig names and defaults) */
    vp_finetune finetune;
    unsigned lora_rank;          /* r */
    double lora_alpha;           /* scaling = alpha / r: no memory of its own */
    double lora_dropout;
    vp_module_set lora_targets;  /* target_modules; 0 and no lora_names: PEFT's default for the model */
    /* target_modules' names no core module has (a Lua block's own parameter
     * names), each kept as the message that says the model lacks it:
     * vp_lora_name gives the name */
    unsigned n_lora_names;
    char lora_names[VP_LORA_NAMES][sizeof VP_LORA_MISSING + VP_LORA_NAME];
    unsigned n_lora_params;      /* target_parameters: the experts' parameters given adapters */
    vp_lora_param lora_params[VP_LORA_PARAMS];
    bool use_dora;               /* DoRA: a magnitude vector per adapted weight, and its forward */
    vp_lora_dtype_rule lora_dtype; /* the adapters' dtype */
    vp_module_set modules_to_save; /* trained in full beside the adapters */
    /* modules_to_save's names no core module has (a Lua block's own
     * modules), each kept as the message that says the model lacks it */
    unsigned n_saved_names;
    char saved_names[VP_LORA_NAMES][sizeof VP_SAVED_MISSING + VP_LORA_NAME];
    unsigned trainable_layers;   /* freeze: the last layers trained (with the final norm and head) */
    unsigned virtual_tokens;     /* prompt tuning: num_virtual_tokens */
    vp_quant quant;              /* the base's linear weights (qlora; none: nf4 for qlora) */
    vp_sparsity sparsity;        /* 2:4 sparsity's masks (apex ASP) */
    bool double_quant;           /* bnb_4bit_use_double_quant */
    double int8_threshold;       /* llm_int8_threshold: LLM.int8's outlier search, off at 0 */
    vp_dtype compute_dtype;      /* bnb_4bit_compute_dtype */
} vp_recipe;

void vp_recipe_defaults(vp_recipe *recipe);

/* Settles what depends on other keys: the optimizer implementation a
 * framework uses unless told otherwise. */
void vp_recipe_resolve(vp_recipe *recipe);

extern const char *const vp_optimizer_impl_names[];
extern const char *const vp_kernels_names[];
extern const char *const vp_attention_names[];
extern const char *const vp_sdpa_backend_names[];
extern const char *const vp_reduce_dtype_names[];
extern const char *const vp_model_code_names[];
extern const char *const vp_experts_impl_names[];
extern const char *const vp_quant_names[];

/* Micro-batches one optimizer step sees: num_microbatches, or grad_accum,
 * or one per pipeline stage. */
unsigned vp_recipe_microbatches(const vp_recipe *recipe);

/* What is wrong with the recipe's keys together, whatever the model: the
 * batch keys (global_batch against micro_batch x dp and the micro-batch
 * count), selective recompute outside Megatron; or NULL. */
const char *vp_recipe_problem(const vp_recipe *recipe);

/* Whether target_parameters name some layers only (their leaves differ). */
bool vp_lora_params_by_layer(const vp_recipe *recipe);

/* The first layer of a model of `layers` that the recipe trains in full
 * (0: all of them; freezing keeps the ones before it frozen). */
unsigned vp_recipe_first_trained_layer(const vp_recipe *recipe, unsigned layers);

/* The modules LoRA adapts: the recipe's, or PEFT's defaults for the
 * supported models (q_proj and v_proj; c_attn for GPT-2). */
vp_module_set vp_lora_targets(const vp_recipe *recipe);

/* Whether the recipe names its targets (else PEFT's defaults apply). */
bool vp_lora_targets_given(const vp_recipe *recipe);

/* lora_targets' i-th name of a Lua block's own linear. */
static inline const char *vp_lora_name(const vp_recipe *recipe, unsigned i) {
    return recipe->lora_names[i] + sizeof VP_LORA_MISSING - 1;
}

/* modules_to_save's i-th name of a Lua block's own module. */
static inline const char *vp_saved_name(const vp_recipe *recipe, unsigned i) {
    return recipe->saved_names[i] + sizeof VP_SAVED_MISSING - 1;
}
extern const char *const vp_fsdp_names[];
extern const char *const vp_offload_names[];
extern const char *const vp_pp_schedule_names[];
/* The recipe's schedule as one of Megatron's three (what it holds in
 * flight; the zero-bubble ones stay themselves), whether it is
 * torch.distributed.pipelining's (torchtitan's split), and its model
 * chunks per rank (torchtitan's Interleaved1F1B: 2 unless virtual_stages
 * says more). */
static inline vp_pp_schedule vp_pp_kind(const vp_recipe *r) {
    switch (r->pp_schedule) {
    case VP_PP_TORCH_1F1B: return VP_PP_1F1B;
    case VP_PP_TORCH_GPIPE: return VP_PP_GPIPE;
    case VP_PP_TORCH_INTERLEAVED: return VP_PP_INTERLEAVED;
    default: return r->pp_schedule;
    }
}

static inline bool vp_pp_torch(const vp_recipe *r) { return r->pp_schedule >= VP_PP_TORCH_1F1B; }

/* torch's schedules whose backward runs as an input half (I,
 * stage_backward_input) and, later, a weight half (W,
 * stage_backward_weight): ScheduleZBVZeroBubble,
 * ScheduleInterleavedZeroBubble, ScheduleDualPipeV (schedules.py) */
static inline bool vp_pp_splits_backward(const vp_recipe *r) { return r->pp_schedule >= VP_PP_TORCH_ZBV; }

/* The V-shaped ones: exactly two stages per rank, rank i holding stages i
 * and 2 pp - 1 - i (torchtitan's _get_pp_rank_to_stage_indices_mapping,
 * style "v"; torch's "ZBV requires exactly 2 stages per rank"). */
static inline bool vp_pp_v_shape(const vp_recipe *r) {
    return r->pp_schedule == VP_PP_TORCH_ZBV || r->pp_schedule == VP_PP_TORCH_DUALPIPEV;
}

/* The rank holding the last stage (the head and the loss): the first in a
 * V, else the last. */
static inline unsigned vp_pp_head_rank(const vp_recipe *r) {
    unsigned pp = r->pp ? r->pp : 1;
    return vp_pp_v_shape(r) ? 0 : pp - 1;
}

/* The looped ones with virtual stages: rank i holding stages i, i + pp, ... */
static inline bool vp_pp_looped(const vp_recipe *r) {
    return vp_pp_kind(r) == VP_PP_INTERLEAVED || r->pp_schedule == VP_PP_TORCH_INTERLEAVED_ZB;
}

/* torchtitan's _get_pipeline_metadata (torchtitan/distributed/
 * pipeline_parallel.py, 2025-07 on; generate_split_points in
 * parallelisms/pipelining_utils.py at 9dec370, Dec 2024): a looped
 * schedule gets 2 stages per rank unless told otherwise */
static inline unsigned vp_pp_chunks(const vp_recipe *r) {
    unsigned v = r->virtual_stages ? r->virtual_stages : 1;
    if (vp_pp_v_shape(r)) return 2;
    if (!vp_pp_looped(r)) return 1;
    return vp_pp_torch(r) && v < 2 ? 2 : v;
}
extern const char *const vp_torch_version_names[];
extern const char *const vp_device_names[];
extern const char *const vp_allocator_model_names[];

/* Whether a non-reentrant checkpoint's rerun stops early: PyTorch >= 2.1's
 * default, which 1.13 lacks; the recipe may say otherwise. */
bool vp_recipe_checkpoint_early_stop(const vp_recipe *recipe);
/* Any 2.x (not 1.13). */
bool vp_recipe_torch2(const vp_recipe *recipe);
/* FSDP2's post-forward reshards and records its place in a reentrant
 * checkpoint's rerun inside backward (before 2.10: layout.c). */
bool vp_recipe_fsdp2_rerun_reshards(const vp_recipe *recipe);
/* OffloadActivations runs with use_streams (sim.h, vp_offload_stash). */
bool vp_recipe_offload_streams(const vp_recipe *recipe);
/* model_code resolved (auto: torchtitan's under a DTensor framework, fsdp2) */
vp_model_code vp_recipe_model_code(const vp_recipe *recipe);
/* experts_implementation resolved (auto: modules, transformers 4.x's) */
vp_experts_impl vp_recipe_experts_impl(const vp_recipe *recipe);
/* transformers 5's experts: each projection of all the experts one 3-D parameter */
bool vp_recipe_fused_experts(const vp_recipe *recipe);

/* Whether the recipe names transformers major.minor or a later release
 * (never when it names none: the PyTorch harness's 4.49-4.52 then). */
bool vp_recipe_transformers_since(const vp_recipe *recipe, unsigned major, unsigned minor);
/* Whether transformers' sdpa path passes enable_gqa=True (no repeat_kv)
 * where a model has fewer key/value heads than query heads and SDPA gets
 * no mask: sdpa_enable_gqa, or auto from the versions (op_attention.c). */
bool vp_recipe_sdpa_enable_gqa(const vp_recipe *recipe);

/* The load, auto resolved (vp_load). */
vp_load vp_recipe_load(const vp_recipe *recipe);

#endif
