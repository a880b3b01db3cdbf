/* framework.h — the training frameworks as registered kinds: each one entry
 * (framework_<name>.c, listed once in framework_list.h) holding its name,
 * its data-parallel plan and the implementation style the ops, the step and
 * the time model consult. No code compares a recipe's framework with a
 * particular one: it asks the entry (vp_framework_of). A new framework is
 * its entry and its plan. */
#ifndef VP_FRAMEWORK_H
#define VP_FRAMEWORK_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger.h"
#include "precision.h"
#include "recipe.h"
#include "shard.h"

/* How the step-time model sees a framework's data-parallel traffic under a
 * recipe (steptime.c, data_parallel_time). */
typedef struct {
    bool gathers_params;  /* every micro-batch all-gathers the weights (ZeRO-3, FSDP's FULL and HYBRID) */
    bool shards_states;   /* gradients reduce-scattered, parameters all-gathered after a sharded step */
    bool overlaps;        /* the traffic hides behind compute */
} vp_dp_traffic;

typedef struct vp_framework_kind {
    const char *name;     /* as a recipe names it: framework = deepspeed */
    /* The data-parallel layout under the recipe (vp_shard_plan_make has
     * filled the precision's dtypes and whole shards first), or a message
     * naming the key that does not hold together with the framework. */
    const char *(*plan)(const vp_recipe *recipe, const vp_precision *precision, vp_shard_plan *plan);
    /* Whether the framework shards the parameters' storage under the
     * recipe (FSDP; DeepSpeed at ZeRO-3); NULL: never. */
    bool (*shards_params)(const vp_recipe *recipe);
    /* Its data-parallel traffic for the time model. */
    void (*dp_traffic)(const vp_recipe *recipe, vp_dp_traffic *out);
    /* The ops whose tensors its communication streams allocate (and free),
     * each stream's blocks cached for that stream alone (ledger.h); NULL:
     * all on the default stream. The labels are engine/step/layout.c's;
     * the last list is OffloadActivations' (vp_offload_stream_ops). */
    const vp_stream_ops *streams;
    /* Whether the streams are used under the recipe; NULL: always. */
    bool (*uses_streams)(const vp_recipe *recipe);
    /* optimizer_impl = auto: the implementation it steps with (torch.optim's
     * foreach default, or its own fused Adam) */
    vp_optimizer_impl optimizer_impl;

    /* ---- the model's code: whose, and in what style ---- */
    /* transformers' modeling code as PyTorch modules, which PEFT, apex's
     * ASP and save_on_cpu wrap: the families' transformers-only paths
     * (ALiBi, Gemma's sliding masks, encoder-decoders, parallel branches,
     * the router's load-balancing loss), the model's outputs with their
     * key/value cache, transformers' gradient checkpointing */
    bool hf_modeling;
    /* the modules' Python frames keep the locals the engine models
     * (vp_step_keep_local: the embeddings the model body holds, ...) */
    bool python_locals;
    bool fused_softmax;   /* scale, mask and softmax in one kernel that keeps its 16-bit output */
    bool fused_swiglu;    /* a gated MLP's gate and up as one GEMM, then one fused SwiGLU */
    bool fused_rmsnorm;   /* RMSNorm as one fused kernel (Transformer Engine's, apex's) */
    bool token_dispatcher; /* mixtures run as a token dispatcher with grouped experts */
    /* the head and the loss run inside the model's forward: the tensors
     * the body made once for all layers live until the loss */
    bool head_in_forward;
    /* the forward step returns the loss alone: the outputs (logits, cache)
     * go at once and the graph after backward, whatever keep_logits says */
    bool returns_loss_only;
    /* accelerate prepares the model with native amp under the Trainer's
     * fp16 / bf16: autocast and convert_outputs_to_fp32 around its forward
     * (accelerator.py: native_amp is off under DeepSpeed and Megatron-LM,
     * whose engines run their own mixed precision) */
    bool accelerate_native_amp;

    /* ---- what it runs ---- */
    bool selective_recompute; /* the attention core recomputed alone (Korthikanti et al. 2022) */
    bool context_parallel;    /* the sequence split over cp ranks, ring attention */
    bool sdpa_ring;           /* ... as PyTorch's context_parallel rings SDPA (not Transformer Engine's) */
    bool expert_parallel;     /* experts split over ep ranks, their states over their own data-parallel group */
    bool experts_need_sequence_parallel; /* with tp > 1, experts need sequence parallelism */
    bool vocab_parallel_loss; /* the loss is its vocabulary-parallel cross-entropy, whatever `loss` says */
    /* tensor parallelism as torch.distributed.tensor.parallel plans it
     * (torchtitan's apply_tp): the vocabulary split unpadded, each module's
     * input all-gathered once (PrepareModuleInput) for its column-parallel
     * linears, which save the gathered input (vp_module_input) */
    bool dtensor_tp;
    bool bucketed_grads;      /* gradients live in its own buffers (buckets, shards): never kept as .grad */
    bool layer_units;         /* each layer is a unit with its own hooks (FSDP's wrapping) */
    /* fsdp_shard_size without a strategy key: HSDP over a 2-D mesh,
     * sharded over that many ranks, replicated over dp / it (FSDP2) */
    bool hsdp;
    /* ZeRO-3's parameter coordinator: prefetches stage3_prefetch_bucket_size
     * elements ahead, in the forward too */
    bool param_coordinator;
    /* the optimizer step makes each parameter's fp32 gradient partition
     * for itself and drops it after (DeepSpeed's fp32 groups) */
    bool step_grad_partitions;
    /* with mixed precision and accumulate_allreduce_grads_in_fp32 the
     * weight gradients go straight into fp32 main_grad buffers */
    bool main_grad_buffers;
    /* compile = true is modelled as torchtitan's apply_compile runs it:
     * each TransformerBlock a torch.compile region, the rest eager */
    bool compiles_blocks;
} vp_framework_kind;

#define VP_FRAMEWORK(id, name) extern const vp_framework_kind vp_framework_##name;
#include "framework_list.h"
#undef VP_FRAMEWORK

/* The index-th registered framework, NULL past the last. */
const vp_framework_kind *vp_framework_at(unsigned index);

/* The recipe's framework. */
const vp_framework_kind *vp_framework_of(const vp_recipe *recipe);
/* The streams of the recipe's step: the framework's communication
 * streams, and OffloadActivations' copy stream under offload_streams
 * (NULL: none but the default). */
const vp_stream_ops *vp_framework_streams(const vp_recipe *recipe);

/* The ranks a parameter is sharded over: vp_shard_group, or FSDP2's
 * shard dimension under HSDP (fsdp_shard_size). */
unsigned vp_framework_shard_group(const vp_recipe *r);

#endif
