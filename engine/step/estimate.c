/* estimate.c — the pipeline's stages, the allocator's reservation, runtime
 * costs and the fit verdict. */
#include "estimate.h"

#include "allocator.h"
#include "framework.h"
#include "pp_split_backward.h"
#include "run_phases.h"
#include "shard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* PyTorch's cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp,
 * getChainedCublasWorkspaceSize): 4096 KiB x 2 + 16 KiB x 8 by default,
 * 4096 KiB x 8 = 32 MiB on compute capability 9.0 and later. One workspace
 * is kept per (handle, stream), and handles are per thread: the forward's
 * thread and the autograd engine's backward thread each get one. */
static uint64_t cublas_workspace_each(const vp_gpu *gpu) {
    return gpu && gpu->compute_major >= 9 ? 4096u * 8u * 1024u : 4096u * 2u * 1024u + 16u * 8u * 1024u;
}

/* async TP runs half its matmuls on symmetric memory's backend stream
 * (_get_backend_stream; _pipelined_all_gather_and_consume and
 * _pipelined_produce_and_all2all): one more workspace per thread */
static unsigned cublas_workspaces(const vp_recipe *recipe) { return recipe->async_tp ? 4 : 2; }

static uint64_t cublas_workspace(const vp_gpu *gpu, const vp_recipe *recipe) {
    return cublas_workspaces(recipe) * cublas_workspace_each(gpu);
}

/* PyTorch 2.x takes the workspaces from the caching allocator: measured on
 * an H200 (torch 2.11, CUDA 13.0; tests/gpu, docs/gpu-check.md), every
 * case's torch.cuda.max_memory_allocated() held 64-66 MiB beyond the step's
 * tensors, the two 32 MiB workspaces, resident from the first step on. So
 * they are tensors of the step's ledger (category workspace), in the
 * allocated and reserved figures, not beside them. PyTorch 1.13's is not
 * established and stays outside, with the context. */
static bool cublas_in_allocator(const vp_recipe *recipe) {
    return recipe->device != VP_DEVICE_CPU && vp_recipe_torch2(recipe);
}

/* Async TP's symmetric-memory workspace: get_symm_mem_workspace
 * (torch/distributed/_symmetric_memory/__init__.py, torch 2.6) keeps one
 * per process group, grown to the largest min_size a fused op asked for
 * and kept for the run; _SymmetricMemory.empty_strided_p2p allocates it
 * through CUDASymmetricMemoryAllocator::alloc (c10d
 * CUDASymmetricMemory.cu): round_up(size, 16) + a 2,048-byte signal pad,
 * rounded up to cuMemGetAllocationGranularity's recommended granularity,
 * by cuMemCreate and cuMemMap: the driver's, outside the caching allocator
 * (not in memory_reserved, in nvidia-smi's figure). The granularity is
 * taken as 2 MiB (not read from a source: it moves the figure by < 2 MiB).
 * The peers' buffers are mapped, not allocated, on this GPU. */
static uint64_t symm_mem_workspace(uint64_t request) {
    const uint64_t granularity = 2u << 20, signal_pad = 2048;
    if (!request) return 0;
    uint64_t block = ((request + 15) / 16) * 16 + signal_pad;
    return (block + granularity - 1) / granularity * granularity;
}

static unsigned microbatches(const vp_recipe *r) { return vp_recipe_microbatches(r); }

/* sdpa_backend = auto: PyTorch prefers cuDNN's attention on compute
 * capability 9.x and 10.x (sdp_utils.cpp, check_prefer_cudnn_attention,
 * with cuDNN 9.15.1 or later; the H200 check saw it, docs/gpu-check.md) */
static bool sdpa_cudnn(const vp_recipe *recipe, const vp_gpu *gpu) {
    if (recipe->sdpa_backend != VP_SDPA_AUTO) return recipe->sdpa_backend == VP_SDPA_CUDNN;
    unsigned major = gpu ? gpu->compute_major : 0;
    return recipe->device != VP_DEVICE_CPU && vp_recipe_torch2(recipe) && (major == 9 || major == 10);
}

/* SDPA's flash kernel wants compute capability 8.0 or later (sdp_utils.cpp,
 * check_flash_attention_hardware_support: sm80 to sm121); an unknown GPU
 * or none is taken to have it */
static bool sdpa_no_flash(const vp_recipe *recipe, const vp_gpu *gpu) {
    return recipe->device != VP_DEVICE_CPU && gpu && gpu->compute_major && gpu->compute_major < 8;
}

static vp_stage stage_of(const vp_rank_estimate *e, const vp_recipe *recipe, const vp_gpu *gpu) {
    vp_stage stage = {e->first_layer, e->layers, e->stage_embeds, e->stage_final, microbatches(recipe), 0, 0, false, false};
    stage.sdpa_cudnn = sdpa_cudnn(recipe, gpu);
    stage.sdpa_no_flash = sdpa_no_flash(recipe, gpu);
    if (cublas_in_allocator(recipe)) {
        stage.cublas_workspaces = cublas_workspaces(recipe);
        stage.cublas_workspace_bytes = cublas_workspace_each(gpu);
    }
    return stage;
}

/* torchtitan's split of the layers over its pp x v stages
 * (_generate_llm_fqn_per_model_part, torchtitan/distributed/
 * pipeline_parallel.py since 3c84ce0, 2025-07-30): the embeddings count as
 * pipeline_parallel_first_stage_less_layers layers and the final norm with
 * the head as _last_stage_less_layers (1 each by default); the layers plus
 * those are dealt out evenly, the first (that sum) % stages stages one
 * more; the first stage's share less the embeddings' weight, the last's
 * less the head's. It refuses a stage's even share below either weight.
 * (Dec 2024's generate_split_points, parallelisms/pipelining_utils.py at
 * 9dec370, gave the extra layers to the middle stages instead: the same
 * split for 126 layers over 16 stages, 7 + 14 x 8 + 7.) Or pp_layers, one
 * count per stage (its module_fqns_per_model_part). NULL, or the problem. */
static const char *torch_split(const vp_model *model, const vp_recipe *r, unsigned *sizes) {
    unsigned pp = r->pp ? r->pp : 1, stages = pp * vp_pp_chunks(r);
    if (stages > VP_MAX_STAGES) return "virtual_stages: pp x virtual_stages too large";
    if (r->n_pp_layers) {
        if (r->n_pp_layers != stages) return "pp_layers: one layer count per stage (pp x virtual_stages of them)";
        unsigned total = 0;
        for (unsigned s = 0; s < stages; s++) total += sizes[s] = r->pp_layers[s];
        return total == model->layers ? NULL : "pp_layers: the counts must add up to the model's layers";
    }
    if (stages == 1) {
        sizes[0] = model->layers;
        return NULL;
    }
    uint64_t effective = (uint64_t)model->layers + r->pp_first_less + r->pp_last_less;
    if (stages > effective)
        return "pp: more stages than layers + pp_first_stage_less_layers + pp_last_stage_less_layers (torchtitan "
               "counts the embeddings and the head as that many layers)";
    unsigned per = (unsigned)(effective / stages), extra = (unsigned)(effective % stages);
    if (r->pp_first_less > per)
        return "pp_first_stage_less_layers: more than a stage's even share of the layers (torchtitan refuses it)";
    if (r->pp_last_less > per)
        return "pp_last_stage_less_layers: more than a stage's even share of the layers (torchtitan refuses it)";
    for (unsigned s = 0; s < stages; s++)
        sizes[s] = per + (s < extra) - (s == 0 ? r->pp_first_less : 0) - (s == stages - 1 ? r->pp_last_less : 0);
    return NULL;
}

/* torchtitan's _get_pipeline_metadata (torchtitan/distributed/
 * pipeline_parallel.py, 2026-08): with pipeline_parallel_layers_per_stage
 * the stages are ceil((layers + the two weights) / it), which must divide
 * over the pp ranks; a single-stage schedule (1F1B, GPipe) needs exactly
 * one per rank, a multi-stage one at least two (and the V schedules
 * exactly two: torch's "ZBV requires exactly 2 stages per rank"). The
 * stages per rank become the recipe's virtual_stages. */
const char *vp_pipeline_resolve(const vp_model *model, vp_recipe *r) {
    unsigned pp = r->pp ? r->pp : 1;
    /* torchtitan reads it only with pipelining on; under Megatron's
     * schedules vp_pipeline_problem refuses it */
    if (!r->pp_layers_per_stage || pp < 2 || !vp_pp_torch(r) || r->n_pp_layers) return NULL;
    uint64_t effective = (uint64_t)model->layers + r->pp_first_less + r->pp_last_less;
    uint64_t stages = (effective + r->pp_layers_per_stage - 1) / r->pp_layers_per_stage;
    if (stages % pp)
        return "pp_layers_per_stage: its stages, ceil((layers + pp_first_stage_less_layers + "
               "pp_last_stage_less_layers) / it), must divide over the pp ranks";
    uint64_t per_rank = stages / pp;
    bool single = !vp_pp_looped(r) && !vp_pp_v_shape(r);
    if (single && per_rank != 1)
        return "pp_layers_per_stage: a single-stage schedule (1F1B, GPipe) runs exactly 1 stage per rank";
    if (!single && per_rank < 2)
        return "pp_layers_per_stage: a multi-stage schedule runs at least 2 stages per rank";
    if (vp_pp_v_shape(r) && per_rank != 2)
        return "pp_layers_per_stage: ZBVZeroBubble and DualPipeV run exactly 2 stages per rank";
    if (per_rank * pp > VP_MAX_STAGES) return "pp_layers_per_stage: too many stages";
    if (r->virtual_stages > 1 && r->virtual_stages != per_rank)
        return "virtual_stages: pp_layers_per_stage sets the stages per rank; give one of the two";
    r->virtual_stages = (unsigned)per_rank;
    return NULL;
}

/* Rank i's chunks in torchtitan's loop style (stage_ids_this_rank,
 * _get_pp_rank_to_stage_indices_mapping): stages i, i + pp, ...; in its V
 * style stages i and 2 pp - 1 - i (vp_pp_stage_of). The rank is evaluated
 * as its layers in a row from its first stage's first. */
static unsigned torch_rank_layers(const vp_recipe *r, const unsigned *sizes, unsigned i, unsigned *first) {
    unsigned v = vp_pp_chunks(r), n = 0, start = 0;
    for (unsigned s = 0; s < i; s++) start += sizes[s];
    for (unsigned c = 0; c < v; c++) n += sizes[vp_pp_stage_of(r, i, c)];
    *first = start;
    return n;
}

/* torch.distributed.pipelining's ScheduleInterleaved1F1B
 * (torch/distributed/pipelining/schedules.py, torch 2.5-2.6,
 * _calculate_single_rank_operations): rounds = max(1, m // pp),
 * microbatches_per_round = m // rounds; rank i warms up with (v - 1) x
 * microbatches_per_round + 2 (pp - 1 - i) forwards (at most m v), then runs
 * one forward and one backward per step, then the remaining backwards. The
 * forward of step k runs local chunk (k // per_round) % v, the backward of
 * step k chunk v - 1 - ((k - warmup) // per_round) % v. Walked through:
 * the most layers' activations it holds at once, over the rank's layers.
 * With equal chunks and m a multiple of pp this is Megatron's count below;
 * with torchtitan's uneven chunks each chunk weighs its layers. */
static double torch_interleaved_in_flight(const vp_recipe *r, const unsigned *sizes, unsigned i) {
    unsigned m = microbatches(r), pp = r->pp ? r->pp : 1, v = vp_pp_chunks(r);
    unsigned rounds = m / pp > 1 ? m / pp : 1, per_round = m / rounds, total = m * v;
    unsigned warmup = (v - 1) * per_round + 2 * (pp - 1 - i);
    if (warmup > total) warmup = total;
    uint64_t held = 0, most = 0, layers = 0;
    for (unsigned c = 0; c < v; c++) layers += sizes[i + c * pp];
    for (unsigned k = 0; k < total + warmup; k++) {
        if (k < total) { /* forward k */
            held += sizes[i + (k / per_round) % v * pp];
            if (held > most) most = held;
        }
        if (k >= warmup) /* backward k - warmup */
            held -= sizes[i + (v - 1 - ((k - warmup) / per_round) % v) * pp];
    }
    return layers ? (double)most / (double)layers : 1;
}

/* In flight at a stage's peak, per schedule:
 *  - GPipe: every micro-batch's forward runs before any backward: m.
 *  - 1F1B: stage i warms up with pp - i - 1 forwards, then alternates: at a
 *    backward it holds pp - i micro-batches (at most m).
 *  - interleaved 1F1B with v model chunks per rank (Megatron's
 *    forward_backward_pipelining_with_interleaving): warm-up of
 *    (pp - i - 1) * 2 + (v - 1) * pp chunk forwards, plus the one in
 *    progress (at most m * v), each a 1/v of the stage's layers. For the
 *    first stage that is (1 + (pp - 1) / (pp v)) stages' worth (Korthikanti
 *    et al. 2022, section 4.2.3). */
double vp_pipeline_in_flight(const vp_recipe *r, unsigned i) {
    unsigned m = microbatches(r), pp = r->pp ? r->pp : 1;
    switch (vp_pp_kind(r)) {
    case VP_PP_GPIPE: return m;
    case VP_PP_INTERLEAVED: {
        unsigned v = r->virtual_stages ? r->virtual_stages : 1;
        double chunks = 2.0 * (pp - i - 1) + (double)(v - 1) * pp + 1;
        if (chunks > (double)m * v) chunks = (double)m * v;
        return chunks / v;
    }
    default: return pp - i < m ? pp - i : m;
    }
}

/* Layers of stage i: the custom layout, or an even split with the first
 * stages taking one more when the layers do not divide. */
static unsigned stage_layers(const vp_model *model, const vp_recipe *r, unsigned i, unsigned *first) {
    unsigned pp = r->pp ? r->pp : 1, start = 0, n = 0;
    for (unsigned s = 0; s <= i; s++) {
        start += n;
        n = r->n_pp_layers ? r->pp_layers[s] : model->layers / pp + (s < model->layers % pp);
    }
    *first = start;
    return n;
}

const char *vp_pipeline_problem(const vp_model *model, const vp_recipe *r) {
    unsigned pp = r->pp ? r->pp : 1;
    if (pp > VP_MAX_STAGES) return "pp: too many stages";
    if (r->gpus && r->gpus != r->dp * r->tp * pp * r->cp) return "gpus: must equal dp x tp x pp x cp";
    if (r->microbatches && r->grad_accum && r->microbatches != r->grad_accum)
        return "grad_accum: the micro-batches are the accumulation: give num_microbatches or grad_accum, not both";
    /* ScheduleZBVZeroBubble, ScheduleDualPipeV: "ZBV requires exactly 2
     * stages per rank" */
    if (vp_pp_v_shape(r) && r->virtual_stages > 2)
        return "virtual_stages: ZBVZeroBubble and DualPipeV run exactly 2 stages per rank";
    if (r->virtual_stages > 1 && !vp_pp_looped(r) && !vp_pp_v_shape(r))
        return "virtual_stages: needs pp_schedule = \"interleaved-1f1b\", \"Interleaved1F1B\" or "
               "\"InterleavedZeroBubble\"";
    if (vp_pp_looped(r) && pp < 2) return "pp_schedule: interleaving needs pp > 1";
    if (r->pp_layers_per_stage && pp > 1 && !vp_pp_torch(r))
        return "pp_layers_per_stage: torchtitan's key, for torch's schedules (pp_schedule = 1F1B, Interleaved1F1B, ...)";
    if (r->pp_layers_per_stage && r->n_pp_layers) return "pp_layers_per_stage: give it or pp_layers, not both";
    if (vp_pp_torch(r) && vp_pp_looped(r)) {
        /* ScheduleInterleaved1F1B.__init__: "Interleaved 1F1B requires the
         * number of microbatches to be a multiple of the number of rounds";
         * ScheduleInterleavedZeroBubble's: "Zero bubble requires ..." */
        unsigned m = microbatches(r), rounds = m / pp > 1 ? m / pp : 1;
        if (m % rounds)
            return r->pp_schedule == VP_PP_TORCH_INTERLEAVED_ZB
                       ? "num_microbatches: InterleavedZeroBubble needs a multiple of max(1, num_microbatches / pp)"
                       : "num_microbatches: Interleaved1F1B needs a multiple of max(1, num_microbatches / pp)";
    }
    /* ScheduleDualPipeV.__init__: "DualPipeV requires at least as many
     * microbatches as stages" */
    if (r->pp_schedule == VP_PP_TORCH_DUALPIPEV && microbatches(r) < 2 * pp)
        return "num_microbatches: DualPipeV needs at least as many micro-batches as stages (2 x pp)";
    if (!model) return NULL;
    if (vp_pp_torch(r)) {
        unsigned sizes[VP_MAX_STAGES];
        const char *problem = torch_split(model, r, sizes);
        for (unsigned i = 0; !problem && i < pp; i++) {
            unsigned first;
            if (!torch_rank_layers(r, sizes, i, &first)) problem = "pp: a pipeline rank would hold no layer";
        }
        return problem;
    }
    if (r->n_pp_layers) {
        if (r->n_pp_layers != pp) return "pp_layers: one layer count per stage";
        unsigned total = 0;
        for (unsigned i = 0; i < pp; i++) {
            if (!r->pp_layers[i]) return "pp_layers: every stage needs a layer";
            total += r->pp_layers[i];
        }
        if (total != model->layers) return "pp_layers: the counts must add up to the model's layers";
    } else if (model->layers < pp) {
        return "pp: more stages than layers";
    }
    unsigned v = r->virtual_stages ? r->virtual_stages : 1;
    if (vp_pp_kind(r) == VP_PP_INTERLEAVED && model->layers % (pp * v))
        return "virtual_stages: pp x virtual_stages must divide the layers";
    return NULL;
}

/* Beside the step's own tensors, held all step: buffers (pipelining's
 * receive buffers, pp_buffers): `fb` of them through forward and backward
 * (the rest the step counts there itself), `all` through the optimizer
 * step. */
typedef struct {
    uint64_t fb, all;
} held_buffers;

/* The stage's peak with `extra` bytes of other micro-batches' activations
 * held through its forward and backward: those phases' peak moves up by
 * extra; the optimizer step's does not (every micro-batch is done). The
 * held buffers are added to each phase's peak as they are held there. */
static vp_meter with_in_flight(const vp_meter *fb, const vp_meter *all, uint64_t extra, held_buffers buffers,
                               bool *fb_wins) {
    vp_meter m = *fb, a = *all;
    m.peak += extra + buffers.fb;
    m.peak_breakdown[VP_CAT_ACTIVATIONS] += extra;
    m.peak_breakdown[VP_CAT_COMM] += buffers.fb;
    /* the whole step's peak is forward's or backward's unless the
     * optimizer step's is higher: only then is it a's own */
    *fb_wins = a.peak <= fb->peak;
    if (*fb_wins) return m;
    a.peak += buffers.all;
    a.peak_breakdown[VP_CAT_COMM] += buffers.all;
    *fb_wins = a.peak <= m.peak;
    return *fb_wins ? m : a; /* or the optimizer step is higher still */
}

static void verdict(vp_rank_estimate *e, const vp_gpu *gpu) {
    if (gpu && gpu->memory_bytes) {
        e->headroom = (int64_t)gpu->memory_bytes - (int64_t)e->peak_total;
        e->fits = e->headroom >= 0;
    }
}

/* The constant allocator's reservation of a peak `m`: its pools' segments
 * and the fragmentation share of its bytes. The other micro-batches'
 * activations sit in large blocks of their own. */
static uint64_t segments_and_share(const vp_meter *m, const vp_recipe *recipe, uint64_t extra, held_buffers buffers,
                                   bool fb_wins) {
    uint64_t segments = vp_segment_bytes(m->peak_pools) + (fb_wins ? extra + buffers.fb : buffers.all);
    if (segments < m->peak) segments = m->peak;
    return segments + (uint64_t)llround(recipe->fragmentation * (double)m->peak);
}

/* With a framework's own streams (FSDP's all-gather and reduce-scatter,
 * framework.h), each stream's blocks are cached for that stream alone
 * (c10/cuda/CUDACachingAllocator.cpp at pytorch 001074d2: "Once freed,
 * blocks can be re-allocated on the same stream, but not on any other
 * stream"; the free list is ordered by stream first, BlockComparatorSize):
 * the default stream cannot reuse what a side stream's pool holds, nor the
 * reverse. So the reservation is the default stream's own peak with its
 * segments and fragmentation share, plus each side stream's high-water in
 * whole segments (its pools at its own peak rounded as the allocator
 * makes segments: kSmallBuffer 2 MiB for blocks up to kSmallSize 1 MiB,
 * kLargeBuffer 20 MiB below kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB
 * above: vp_segment_bytes). A side stream's few large blocks of one size
 * per unit leave no fragmentation share to add. Without streams: the
 * whole step's peak `m`. */
static uint64_t constant_reserved(const vp_step_result *step, const vp_recipe *recipe, uint64_t extra,
                                  held_buffers buffers, const vp_meter *m, bool fb_wins) {
    if (!step->has_streams) return segments_and_share(m, recipe, extra, buffers, fb_wins);
    bool main_fb_wins;
    vp_meter main = with_in_flight(&step->streams_fb[0], &step->streams[0], extra, buffers, &main_fb_wins);
    uint64_t reserved = segments_and_share(&main, recipe, extra, buffers, main_fb_wins);
    for (unsigned s = 1; s < VP_STREAMS; s++) reserved += vp_segment_bytes(step->streams[s].peak_pools);
    return reserved > m->peak ? reserved : m->peak;
}

/* torch.distributed.pipelining's receive buffers on rank i: a
 * PipelineStage makes, the first time its schedule runs, one buffer per
 * micro-batch for the activation each of its stages but the model's first
 * receives (_prepare_forward_infra: _create_act_recv_info for every chunk)
 * and one for the gradient each of its stages but the last receives
 * (_prepare_backward_infra: _create_grad_recv_info, each
 * _make_tensor_from_meta), and keeps them (torch/distributed/pipelining/
 * stage.py, torch 2.5 on: "this method should be deleted once lazy buffer
 * allocation is implemented"). Megatron's schedules receive into tensors
 * made per micro-batch, which the step's activations count. */
static uint64_t pp_buffers(const vp_recipe *r, unsigned i, uint64_t boundary) {
    unsigned pp = r->pp ? r->pp : 1, v = vp_pp_chunks(r), last = pp * v - 1, m = microbatches(r);
    if (pp < 2 || !vp_pp_torch(r)) return 0;
    uint64_t buffers = 0;
    for (unsigned c = 0; c < v; c++) {
        unsigned stage = vp_pp_stage_of(r, i, c);
        buffers += (stage > 0) + (stage < last);
    }
    return buffers * m * boundary;
}

/* The receive buffers beyond the tensors the step already counts: each
 * micro-batch in flight's received activation (the stage's input leaf,
 * part of its activations) and the received gradient backward starts from
 * (made when backward starts), which are those buffers. The optimizer
 * step counts none. */
static uint64_t pp_buffers_beside_step(const vp_rank_estimate *e) {
    uint64_t counted = 0;
    if (!e->stage_embeds) counted += (uint64_t)llround(e->in_flight * (double)e->step.boundary_bytes);
    if (!e->stage_final) counted += e->step.boundary_bytes;
    return e->pp_buffers_bytes > counted ? e->pp_buffers_bytes - counted : 0;
}

/* What the other micro-batches in flight add to a stage's own peak: their
 * activations and the gradients kept for their weight passes. */
static uint64_t in_flight_extra(const vp_rank_estimate *e, const vp_recipe *recipe) {
    uint64_t extra = e->pending_weight_bytes, held = e->step.activations_bytes;
    /* An interleaved schedule's in-flight count is of the rank's layers;
     * the head and the loss belong to the last stage's chunk alone, whose
     * forward is the warm-up's last (Megatron: (v - 1) pp chunk forwards
     * before it; torch's ScheduleInterleaved1F1B: (v - 1) x per-round), and
     * whose backward follows it at once: one micro-batch's at a time. (The
     * zero-bubble walks weigh each chunk's bytes themselves.) */
    bool head_once = vp_pp_kind(recipe) == VP_PP_INTERLEAVED && !vp_pp_splits_backward(recipe) &&
                     e->step.head_activations_bytes < held;
    if (head_once) held -= e->step.head_activations_bytes;
    if (e->in_flight > 1) extra += (uint64_t)llround((e->in_flight - 1) * (double)held);
    /* The last stage's outputs kept to the step's end (pp_return_outputs)
     * are counted by the step itself, every micro-batch's: where the
     * micro-batches in flight hold their heads too (GPipe's m, a
     * zero-bubble walk's), their logits above are those outputs, not more. */
    if (e->step.pp_outputs_bytes && e->in_flight > 1 && !head_once) {
        double chunk = (double)e->step.pp_outputs_bytes / microbatches(recipe);
        uint64_t overlap = (uint64_t)llround((e->in_flight - 1) * chunk);
        extra = extra > overlap ? extra - overlap : 0;
    }
    return extra;
}

static void finish_rank(vp_rank_estimate *e, const vp_recipe *recipe, const vp_gpu *gpu) {
    uint64_t extra_rounded = in_flight_extra(e, recipe), extra_raw = extra_rounded;
    e->pp_buffers_bytes = pp_buffers(recipe, e->stage, e->step.boundary_bytes);
    held_buffers buffers = {pp_buffers_beside_step(e), e->pp_buffers_bytes};
    bool fb_wins;
    vp_meter raw = with_in_flight(&e->step.raw_fb, &e->step.raw, extra_raw, buffers, &fb_wins);
    e->peak_unrounded = raw.peak;
    if (recipe->device == VP_DEVICE_CPU) {
        /* the CPU twin: exact tensor bytes, no caching allocator, no CUDA */
        e->peak = raw;
        e->peak_allocated = e->peak_reserved = e->peak_total = raw.peak;
    } else {
        e->peak = with_in_flight(&e->step.rounded_fb, &e->step.rounded, extra_rounded, buffers, &fb_wins);
        const vp_meter *m = &e->peak;
        e->peak_allocated = m->peak;
        e->peak_reserved = constant_reserved(&e->step, recipe, extra_rounded, buffers, m, fb_wins);
        e->cuda_context_bytes = (uint64_t)llround(recipe->cuda_context_mib * MIB);
        e->cublas_workspace_bytes = cublas_workspace(gpu, recipe);
        vp_nccl_buffers(recipe, gpu, e->stage, &e->nccl);
        e->nccl_bytes = e->nccl.bytes;
        e->symm_mem_bytes = symm_mem_workspace(e->step.symm_mem_request);
        uint64_t cublas_outside = cublas_in_allocator(recipe) ? 0 : e->cublas_workspace_bytes;
        e->runtime_bytes = e->cuda_context_bytes + cublas_outside + e->nccl_bytes + e->symm_mem_bytes;
        e->peak_total = e->peak_reserved + e->runtime_bytes;
    }
    e->allocator_bytes = e->peak_reserved - e->peak_allocated;
    verdict(e, gpu);
}

void vp_estimate_free(vp_estimate *estimate) {
    for (unsigned i = 0; i < estimate->n_ranks; i++) vp_ledger_free(&estimate->ranks[i].events);
    free(estimate->ranks);
    estimate->ranks = NULL;
    estimate->n_ranks = 0;
}

vp_step_status vp_estimate_run(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu, bool fold,
                               bool record, vp_sim_arrays *reuse, vp_estimate *out) {
    memset(out, 0, sizeof *out);
    if (vp_pipeline_problem(model, recipe)) return VP_STEP_LAYOUT;
    unsigned pp = recipe->pp ? recipe->pp : 1;
    out->ranks = calloc(pp, sizeof *out->ranks);
    if (!out->ranks) return VP_STEP_NOMEM;
    out->n_ranks = pp;
    out->ranks_per_stage = recipe->dp * recipe->tp * recipe->cp;
    out->has_gpu = gpu && gpu->memory_bytes;
    if (recipe->attention == VP_ATTN_SDPA) { /* the kernel op_attention.c runs for it (its unmasked calls) */
        static const char *const names[] = {[VP_SDPA_KERNEL_EFFICIENT] = "efficient", [VP_SDPA_KERNEL_FLASH] = "flash",
                                            [VP_SDPA_KERNEL_CUDNN] = "cudnn"};
        const vp_precision *precision = vp_precision_get(recipe->precision);
        if (precision)
            out->sdpa_kernel = names[vp_sdpa_kernel_of(vp_precision_low(precision), sdpa_cudnn(recipe, gpu),
                                                       sdpa_no_flash(recipe, gpu))];
    }
    unsigned sizes[VP_MAX_STAGES];
    bool torch = vp_pp_torch(recipe) && !torch_split(model, recipe, sizes);
    for (unsigned i = 0; i < pp; i++) {
        vp_rank_estimate *e = &out->ranks[i];
        e->stage = i;
        e->stage_embeds = i == 0;
        e->stage_final = i == vp_pp_head_rank(recipe);
        if (torch) {
            e->layers = torch_rank_layers(recipe, sizes, i, &e->first_layer);
            e->in_flight = vp_pp_kind(recipe) == VP_PP_INTERLEAVED ? torch_interleaved_in_flight(recipe, sizes, i)
                                                                   : vp_pipeline_in_flight(recipe, i);
            /* (the zero-bubble schedules' once the step is known, below) */
        } else {
            e->layers = stage_layers(model, recipe, i, &e->first_layer);
            e->in_flight = vp_pipeline_in_flight(recipe, i);
        }
        /* stages alike in layers and position share one evaluation (not
         * when either holds some of the model's first layers; not when
         * each stage's events are recorded) */
        const vp_rank_estimate *same = NULL;
        for (unsigned j = 1; j < i && !same && !record; j++)
            if (out->ranks[j].layers == e->layers && i != vp_pp_head_rank(recipe) &&
                out->ranks[j].first_layer >= model->first_layers)
                same = &out->ranks[j];
        if (same && i != 0) {
            e->step = same->step;
            /* the same layers, numbered from this stage's first */
            int shift = (int)e->first_layer - (int)same->first_layer;
            vp_meter *meters[4] = {&e->step.rounded, &e->step.raw, &e->step.rounded_fb, &e->step.raw_fb};
            for (unsigned k = 0; k < 4; k++)
                if (meters[k]->peak_place.layer >= 0) meters[k]->peak_place.layer += shift;
        } else {
            vp_stage stage = stage_of(e, recipe, gpu);
            vp_step_status status =
                vp_step_run_stage(model, recipe, &stage, fold, record, &e->step, record ? &e->events : NULL, reuse);
            if (status != VP_STEP_OK) {
                vp_estimate_free(out);
                return status;
            }
        }
        if (torch && vp_pp_splits_backward(recipe)) {
            vp_pp_bytes bytes = {e->step.activations_bytes, e->step.head_activations_bytes,
                                 e->step.weight_pass_bytes, e->step.head_weight_pass_bytes};
            vp_pp_held held = vp_pp_split_held(recipe, sizes, i, &bytes);
            e->in_flight = held.in_flight;
            e->pending_weight_bytes = held.pending_bytes;
        }
        finish_rank(e, recipe, gpu);
        if (e->peak_total > out->ranks[out->worst].peak_total) out->worst = i;
    }
    if (recipe->allocator == VP_ALLOCATOR_SIMULATED) {
        vp_step_status status = vp_estimate_simulate_allocator(model, recipe, gpu, out);
        if (status != VP_STEP_OK) {
            vp_estimate_free(out);
            return status;
        }
    }
    return VP_STEP_OK;
}

/* The steady state: 3 steps at most (the reservation of PyTorch's
 * allocator only grows; in practice it stops after the second step). */
enum { SIMULATED_STEPS = 3 };

static const vp_stream_ops *streams_of(const vp_recipe *recipe) { return vp_framework_streams(recipe); }

/* The whole run replayed: the prelude (loading, quantizing, wrapping)
 * before the step's log. */
static void simulate_run(const vp_recipe *recipe, const vp_event *events, unsigned n, uint64_t extra,
                         vp_rank_estimate *e) {
    vp_run_prelude prelude;
    if (!vp_run_prelude_build(recipe, events, n, &prelude)) return;
    vp_allocator_replay run;
    if (vp_allocator_replay_run(prelude.events, prelude.n_events, events, n, SIMULATED_STEPS, streams_of(recipe),
                                &recipe->alloc_conf, &run)) {
        e->has_run = true;
        e->peak_reserved_run = run.peak_reserved + extra;
        e->reserved_at_start = run.reserved_at_start;
    }
    vp_run_prelude_free(&prelude);
}

/* The stage's unfolded event log replayed, alone and after the run's
 * prelude; no figure when it cannot be. */
static vp_step_status simulate_rank(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu,
                                    vp_rank_estimate *e) {
    vp_allocator_replay replay;
    bool ok = false;
    const vp_event *events = e->events.events;
    unsigned n = e->events.n_events;
    const vp_stream_ops *streams = streams_of(recipe);
    if (n) ok = vp_allocator_replay_run(NULL, 0, events, n, SIMULATED_STEPS, streams, &recipe->alloc_conf,
                                        &replay); /* not folded logs */
    vp_ledger log = {0};
    if (!ok) {
        vp_stage stage = stage_of(e, recipe, gpu);
        vp_step_result result;
        vp_step_status status = vp_step_run_stage(model, recipe, &stage, false, true, &result, &log, NULL);
        if (status != VP_STEP_OK) return status;
        events = log.events;
        n = log.n_events;
        ok = vp_allocator_replay_run(NULL, 0, events, n, SIMULATED_STEPS, streams, &recipe->alloc_conf, &replay);
    }
    /* the other micro-batches' activations a pipeline stage holds, and the
     * receive buffers the step does not count, in large blocks of their own
     * (as finish_rank counts them) */
    uint64_t extra = in_flight_extra(e, recipe) + pp_buffers_beside_step(e);
    extra = (extra + VP_ALLOC_ROUND_LARGE - 1) / VP_ALLOC_ROUND_LARGE * VP_ALLOC_ROUND_LARGE;
    if (ok) {
        e->has_simulated = true;
        e->simulated_steps = replay.steps;
        e->peak_reserved_simulated = replay.peak_reserved + extra;
        simulate_run(recipe, events, n, extra, e);
    }
    vp_ledger_free(&log);
    return VP_STEP_OK;
}

vp_step_status vp_estimate_simulate_allocator(const vp_model *model, const vp_recipe *recipe, const vp_gpu *gpu,
                                              vp_estimate *out) {
    if (recipe->device == VP_DEVICE_CPU) return VP_STEP_OK; /* no caching allocator */
    for (unsigned i = 0; i < out->n_ranks; i++) {
        vp_rank_estimate *e = &out->ranks[i];
        if (e->has_simulated) continue;
        vp_step_status status = simulate_rank(model, recipe, gpu, e);
        if (status != VP_STEP_OK) return status;
        if (recipe->allocator != VP_ALLOCATOR_SIMULATED || !e->has_simulated) continue;
        /* the simulation's reservation instead of segments + fragmentation */
        e->peak_reserved = e->peak_reserved_simulated > e->peak_allocated ? e->peak_reserved_simulated
                                                                            : e->peak_allocated;
        e->allocator_bytes = e->peak_reserved - e->peak_allocated;
        e->peak_total = e->peak_reserved + e->runtime_bytes;
        verdict(e, gpu);
    }
    out->worst = 0;
    for (unsigned i = 1; i < out->n_ranks; i++)
        if (out->ranks[i].peak_total > out->ranks[out->worst].peak_total) out->worst = i;
    return VP_STEP_OK;
}
