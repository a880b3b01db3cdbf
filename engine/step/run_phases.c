/* run_phases.c — the run before the steady state as allocator events
 * (run_phases.h). Each phase follows the library code cited beside it; the
 * tensors it makes for good are the rank's resident tensors, named as the
 * step log's setup events name them, so that the replay's setup does not
 * make them again (vp_allocator_replay_run). */
#include "run_phases.h"

#include <stdlib.h>
#include <string.h>

#include "finetune_method.h"
#include "precision.h"
#include "shard.h"

#define MIB (1024ull * 1024ull)

/* The flat buffers a broadcast of module states coalesces tensors into:
 * DistributedDataParallel's broadcast_bucket_size = int(250 * 1024 * 1024)
 * (torch/nn/parallel/distributed.py, _sync_module_states) and FSDP's
 * PARAM_BROADCAST_BUCKET_SIZE, the same (torch/distributed/fsdp/
 * _init_utils.py, sync_module_states). dist._broadcast_coalesced
 * (torch/csrc/distributed/c10d/comm.cpp) fills a bucket until it reaches
 * the size (compute_bucket_assignment_by_size), flattens it into one new
 * tensor, and keeps at most two such broadcasts in flight. */
#define BROADCAST_BUCKET (250ull * MIB)
enum { BROADCAST_IN_FLIGHT = 2 };

typedef struct {
    vp_run_prelude *out;
    uint32_t next; /* the next handle for a tensor of the prelude's own */
} builder;

/* The prelude's next event slot (NULL once out of memory). */
static vp_event *next_event(builder *b) {
    vp_run_prelude *p = b->out;
    if (p->failed) return NULL;
    if (p->n_events == p->cap_events) {
        unsigned cap = p->cap_events ? p->cap_events * 2 : 256;
        vp_event *grown = realloc(p->events, (size_t)cap * sizeof *grown);
        if (!grown) {
            p->failed = true;
            return NULL;
        }
        p->events = grown;
        p->cap_events = cap;
    }
    return &p->events[p->n_events++];
}

static void emit(builder *b, uint64_t raw, uint32_t tensor, vp_category category, const char *op, bool alloc) {
    vp_event *e = raw ? next_event(b) : NULL;
    if (!e) return;
    int64_t rounded = (int64_t)vp_round_block(raw);
    *e = (vp_event){.place = {VP_PHASE_SETUP, -1, op},
                    .category = category,
                    .delta = alloc ? rounded : -rounded,
                    .raw_delta = alloc ? (int64_t)raw : -(int64_t)raw,
                    .repeat = 1,
                    .tensor = tensor};
}

/* A tensor of the prelude's own (a full weight before sharding, a flat
 * buffer): its handle. */
static uint32_t make(builder *b, uint64_t raw, const char *op) {
    uint32_t t = b->next++;
    emit(b, raw, t, VP_CAT_TRANSIENT, op, true);
    return t;
}

static void drop(builder *b, uint32_t t, uint64_t raw, const char *op) {
    if (t) emit(b, raw, t, VP_CAT_TRANSIENT, op, false);
}

/* torch.cuda.empty_cache() in the run */
static void empty_cache(builder *b) {
    vp_event *e = next_event(b);
    if (e) *e = (vp_event){.place = {VP_PHASE_SETUP, -1, "empty_cache"}, .category = VP_CAT_TRANSIENT, .repeat = 1,
                           .tensor = VP_EVENT_EMPTY_CACHE};
}

/* A resident tensor as the setup event makes it. */
static void resident(builder *b, const vp_event *e) {
    emit(b, (uint64_t)e->raw_delta, e->tensor, e->category, e->place.op, true);
}

static bool is_resident(const vp_event *e) {
    return e->place.phase == VP_PHASE_SETUP && e->delta > 0 && e->tensor && e->tensor != VP_EVENT_MOVE &&
           (e->category == VP_CAT_PARAMS || e->category == VP_CAT_BUFFERS);
}

static bool is_state(const vp_event *e) {
    return e->place.phase == VP_PHASE_SETUP && (e->category == VP_CAT_OPTIMIZER || e->category == VP_CAT_MASTER);
}

/* bitsandbytes' quant_state (engine/step/layout.c's labels): no parameter,
 * never sharded, moved with its weight. */
static bool is_quant_state(const vp_event *e) {
    return strncmp(e->place.op, "quant_state.", 12) == 0 || strcmp(e->place.op, "SCB") == 0;
}

typedef struct {
    const vp_recipe *recipe;
    const vp_event *events;
    unsigned n;
    unsigned shards;  /* the parameters' divisor: FSDP's or ZeRO-3's group, else 1 */
    vp_dtype params;  /* the resident parameters' dtype */
    bool dequantizes; /* GPT-OSS's MXFP4 experts dequantized on the GPU where they stay */
    uint32_t *full;   /* per event: the handle of a sharded parameter's full tensor (0: none), owned */
} plan;

static bool sharded(const plan *p, const vp_event *e) {
    return p->shards > 1 && e->category == VP_CAT_PARAMS && !is_quant_state(e);
}

/* A sharded parameter's whole tensor: its shard times the group (FSDP and
 * ZeRO-3 pad each to a multiple of the group). */
static uint64_t full_bytes(const plan *p, const vp_event *e) {
    return (uint64_t)e->raw_delta * (sharded(p, e) ? p->shards : 1);
}

/* A 4-bit weight: its quant_state's absmax follows it (layout.c); an
 * LLM.int8 weight: its SCB precedes it. */
static bool is_4bit(const plan *p, unsigned i) {
    return p->events[i].category == VP_CAT_PARAMS && i + 1 < p->n &&
           strcmp(p->events[i + 1].place.op, "quant_state.absmax") == 0;
}
static bool is_int8(const plan *p, unsigned i) {
    return p->events[i].category == VP_CAT_PARAMS && i > 0 && strcmp(p->events[i - 1].place.op, "SCB") == 0;
}

/* The tensor itself: its full size first when it is sharded later. */
static void place_tensor(builder *b, plan *p, unsigned i) {
    const vp_event *e = &p->events[i];
    if (sharded(p, e)) p->full[i] = make(b, full_bytes(p, e), e->place.op);
    else resident(b, e);
}

/* bitsandbytes quantizing a weight where it lands (bitsandbytes 0.45-0.46:
 * Params4bit._quantize copies the 16-bit weight to the GPU and calls
 * functional.quantize_4bit, which makes the fp32 absmax of every 64-element
 * block and the packed output; with double quantization the absmax is
 * quantized again (quantize_blockwise, blocks of 256) and the fp32 one
 * deleted; the 16-bit copy goes when _quantize returns. Int8Params.cuda
 * halves the weight on the GPU and int8_vectorwise_quant makes the int8
 * weight and its SCB.) The checkpoint's 16-bit weight: two bytes an
 * element. Returns the last event index it used. */
static unsigned quantize(builder *b, plan *p, unsigned i) {
    const vp_event *e = &p->events[i];
    uint64_t packed = full_bytes(p, e);
    if (is_int8(p, i)) {
        uint32_t w16 = make(b, 2 * packed, "bitsandbytes: 16-bit weight");
        place_tensor(b, p, i);
        drop(b, w16, 2 * packed, "bitsandbytes: 16-bit weight");
        return i;
    }
    uint64_t numel = 2 * packed; /* two 4-bit values a byte */
    uint32_t w16 = make(b, 2 * numel, "bitsandbytes: 16-bit weight");
    uint64_t absmax = (numel / 64 + (numel % 64 != 0)) * 4;
    bool double_quant = p->recipe->double_quant;
    uint32_t fp32_absmax = double_quant ? make(b, absmax, "bitsandbytes: fp32 absmax") : 0;
    place_tensor(b, p, i);
    unsigned j = i + 1;
    for (; j < p->n && is_quant_state(&p->events[j]) && strcmp(p->events[j].place.op, "SCB") != 0; j++)
        if (is_resident(&p->events[j])) resident(b, &p->events[j]);
    drop(b, fp32_absmax, absmax, "bitsandbytes: fp32 absmax");
    drop(b, w16, 2 * numel, "bitsandbytes: 16-bit weight");
    return j - 1;
}

/* GPT-OSS's experts tensors (op_moe.c's labels), which its checkpoints
 * hold as MXFP4 blocks and scales, dequantized where they land. */
static bool is_mxfp4_experts(const plan *p, const vp_event *e) {
    return p->dequantizes && e->category == VP_CAT_PARAMS &&
           (strcmp(e->place.op, "moe.experts.gate_up_proj") == 0 || strcmp(e->place.op, "moe.experts.down_proj") == 0);
}

/* The rows convert_moe_packed_tensors dequantizes at a time
 * (rows_per_chunk = 32768 * 1024; a row is 16 bytes of blocks, 32 values). */
#define MXFP4_CHUNK_ROWS (32768ull * 1024ull)

/* transformers' Mxfp4Config(dequantize=True) loading one experts tensor of
 * n values to the GPU (integrations/mxfp4.py, convert_moe_packed_tensors,
 * transformers 4.55 to 5.x): the blocks (n / 2 bytes) and scales (a byte per
 * 32 values) copied to the GPU, the scales cast to int32 minus 127 (the
 * cast a temporary), a bf16 output of n values, then per chunk of rows:
 * each nibble masked into a uint8 tensor and cast to int64 indices (8 bytes
 * a value, the uint8 freed), the bf16 table lookup of each half written into
 * the output's strided halves, and ldexp's pow(2.0, exponents) in fp32 (a
 * float per row); the indices freed; the blocks and scales deleted, and the
 * output transposed into the contiguous tensor that becomes the parameter,
 * the output freed on return. */
static void dequantize_mxfp4(builder *b, plan *p, unsigned i) {
    const vp_event *e = &p->events[i];
    uint64_t value_bytes = vp_bytes_of(p->params, 1);
    uint64_t n = full_bytes(p, e) / (value_bytes ? value_bytes : 1), rows = n / 32;
    const char *op = "mxfp4 dequantize";
    uint32_t blocks = make(b, n / 2, op), scales = make(b, rows, op);
    uint32_t scales32 = make(b, 4 * rows, op), exponents = make(b, 4 * rows, op);
    drop(b, scales32, 4 * rows, op);
    drop(b, scales, rows, op);
    uint32_t lut = make(b, 16 * 2, op);
    uint32_t out = make(b, 2 * n, op);
    for (uint64_t r0 = 0; r0 < rows; r0 += MXFP4_CHUNK_ROWS) {
        uint64_t c = rows - r0 < MXFP4_CHUNK_ROWS ? rows - r0 : MXFP4_CHUNK_ROWS, half = 16 * c;
        uint32_t nibbles = make(b, half, op), lo = make(b, 8 * half, op);
        drop(b, nibbles, half, op);
        nibbles = make(b, half, op);
        uint32_t hi = make(b, 8 * half, op);
        drop(b, nibbles, half, op);
        for (int k = 0; k < 2; k++) drop(b, make(b, 2 * half, op), 2 * half, op); /* lut[idx] */
        drop(b, make(b, 4 * c, op), 4 * c, op);                                     /* pow(2.0, exp) */
        drop(b, lo, 8 * half, op);
        drop(b, hi, 8 * half, op);
    }
    drop(b, blocks, n / 2, op);
    drop(b, exponents, 4 * rows, op);
    drop(b, lut, 16 * 2, op);
    place_tensor(b, p, i); /* out.transpose(1, 2).contiguous() */
    drop(b, out, 2 * n, op);
}

/* Every resident tensor straight to the GPU, in the order the model
 * registers them (from_pretrained with a device map: each checkpoint
 * tensor copied to its device, a bitsandbytes weight quantized there, an
 * MXFP4 one dequantized there). */
static void load_all(builder *b, plan *p, bool quantizing) {
    for (unsigned i = 0; i < p->n; i++) {
        const vp_event *e = &p->events[i];
        if (!is_resident(e)) continue;
        if (quantizing && (is_4bit(p, i) || is_int8(p, i))) i = quantize(b, p, i);
        else if (is_mxfp4_experts(p, e)) dequantize_mxfp4(b, p, i);
        else place_tensor(b, p, i);
    }
}

/* transformers' caching_allocator_warmup (modeling_utils.py, 4.51 and
 * later): one fp16 tensor of the parameters' bytes on the device
 * (get_total_byte_count: every parameter, a quantized one at its packed
 * size), freed at once: the caching allocator keeps the block, and the
 * weights are carved from it. */
static void warmup(builder *b, plan *p) {
    uint64_t total = 0;
    for (unsigned i = 0; i < p->n; i++)
        if (is_resident(&p->events[i]) && p->events[i].category == VP_CAT_PARAMS && !is_quant_state(&p->events[i]))
            total += full_bytes(p, &p->events[i]);
    drop(b, make(b, total, "caching_allocator_warmup"), total, "caching_allocator_warmup");
}

/* dist._broadcast_coalesced over `sizes` (bytes, in order): a bucket is
 * flattened into a new tensor once it holds 250 MiB or the tensors end;
 * the oldest of two in flight is finished (unflattened, freed) before a
 * third starts. */
static void broadcast(builder *b, const uint64_t *sizes, unsigned n) {
    uint32_t flying[BROADCAST_IN_FLIGHT] = {0};
    uint64_t flying_bytes[BROADCAST_IN_FLIGHT] = {0};
    unsigned count = 0;
    uint64_t bucket = 0;
    for (unsigned i = 0; i <= n; i++) {
        if (i < n) bucket += sizes[i];
        if (bucket == 0 || (i < n && bucket < BROADCAST_BUCKET)) continue;
        if (count == BROADCAST_IN_FLIGHT) {
            drop(b, flying[0], flying_bytes[0], "broadcast_coalesced bucket");
            flying[0] = flying[1], flying_bytes[0] = flying_bytes[1];
            count--;
        }
        flying[count] = make(b, bucket, "broadcast_coalesced bucket");
        flying_bytes[count++] = bucket;
        bucket = 0;
    }
    for (unsigned k = 0; k < count; k++) drop(b, flying[k], flying_bytes[k], "broadcast_coalesced bucket");
}

/* The module states a broadcast sends: parameters (whole) and buffers, not
 * bitsandbytes' quant_state (no parameter or buffer). */
static void broadcast_events(builder *b, const plan *p, const unsigned *idx, unsigned n) {
    uint64_t *sizes = malloc((size_t)(n ? n : 1) * sizeof *sizes);
    if (!sizes) {
        b->out->failed = true;
        return;
    }
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++)
        if (!is_quant_state(&p->events[idx[k]])) sizes[m++] = full_bytes(p, &p->events[idx[k]]);
    broadcast(b, sizes, m);
    free(sizes);
}

/* FSDP's units: the setup log makes a layer's parameters, then its
 * optimizer states; a unit ends where states follow parameters. The
 * first (the embeddings) and the last (the final norm and head) are the
 * root's, which FullyShardedDataParallel wraps last, after auto_wrap_policy
 * has wrapped every layer. Returns the unit of each resident event
 * (-1: none) and the count. */
static unsigned fsdp_units(const plan *p, int *unit) {
    unsigned units = 0;
    bool open = false;
    for (unsigned i = 0; i < p->n; i++) {
        const vp_event *e = &p->events[i];
        unit[i] = -1;
        if (is_state(e) && open) {
            open = false;
            units++;
        } else if (is_resident(e)) {
            open = true;
            unit[i] = (int)units;
        }
    }
    return units + open;
}

/* FSDP (1) wrapping one unit (torch/distributed/fsdp/_init_utils.py,
 * _init_param_handle_from_module, and _flat_param.py): the unit's
 * parameters moved to the GPU (device_id) unless they are there already,
 * their states broadcast (sync_module_states), then flattened into one
 * FlatParameter (torch.cat: a new tensor of the unit's bytes) and sharded
 * (FlatParamHandle.shard: the rank's chunk cloned, the flat storage
 * resized to 0); the original parameters go when the unit's
 * initialisation returns.
 * FSDP2's fully_shard on one module (per_parameter; torch/distributed/
 * fsdp/_fully_shard/_fsdp_init.py _move_states_to_device, then
 * _fsdp_param.py FSDPParam._init_sharded_param): its parameters moved to
 * the GPU whole (tensor.data = tensor.to(device)), then each one's dim-0
 * chunk copied into a new padded shard; the whole tensors go when
 * fully_shard returns. No broadcast, no flat parameter. */
static void fsdp_wrap_unit(builder *b, plan *p, const unsigned *idx, unsigned n, bool moved, bool per_parameter) {
    if (moved)
        for (unsigned k = 0; k < n; k++) place_tensor(b, p, idx[k]);
    if (!per_parameter) broadcast_events(b, p, idx, n);
    uint64_t flat = 0;
    for (unsigned k = 0; k < n; k++)
        if (!per_parameter && sharded(p, &p->events[idx[k]])) flat += full_bytes(p, &p->events[idx[k]]);
    uint32_t f = flat ? make(b, flat, "FlatParameter") : 0;
    for (unsigned k = 0; k < n; k++)
        if (sharded(p, &p->events[idx[k]])) resident(b, &p->events[idx[k]]);
    drop(b, f, flat, "FlatParameter");
    for (unsigned k = 0; k < n; k++) {
        unsigned i = idx[k];
        if (p->full[i]) drop(b, p->full[i], full_bytes(p, &p->events[i]), p->events[i].place.op);
        p->full[i] = 0;
    }
}

static void fsdp_wrap(builder *b, plan *p, bool moved, bool per_parameter) {
    int *unit = malloc((size_t)p->n * sizeof *unit);
    unsigned *idx = malloc((size_t)p->n * sizeof *idx);
    if (!unit || !idx) {
        b->out->failed = true;
        free(unit);
        free(idx);
        return;
    }
    unsigned units = fsdp_units(p, unit);
    /* the layers' units in order, then the root (the first and last) */
    for (unsigned pass = 0; pass <= units; pass++) {
        bool root = pass == units;
        unsigned u = pass, n = 0;
        if (!root && (units > 1 && (u == 0 || u == units - 1))) continue;
        for (unsigned i = 0; i < p->n; i++) {
            if (unit[i] < 0) continue;
            bool in = root ? units > 1 && (unit[i] == 0 || (unsigned)unit[i] == units - 1) : (unsigned)unit[i] == u;
            if (in) idx[n++] = i;
        }
        if (n) fsdp_wrap_unit(b, p, idx, n, moved, per_parameter);
    }
    free(unit);
    free(idx);
}

/* DeepSpeed ZeRO-3's zero.Init (deepspeed/runtime/zero/
 * partition_parameters.py: each parameter made whole on the GPU as its
 * module is built, then _partition_param copies the rank's partition into
 * a new tensor and frees the whole one); transformers builds the model
 * under it when ZeRO-3 is configured (is_deepspeed_zero3_enabled). */
static void zero3_init(builder *b, plan *p) {
    for (unsigned i = 0; i < p->n; i++) {
        const vp_event *e = &p->events[i];
        if (!is_resident(e)) continue;
        if (!sharded(p, e)) {
            resident(b, e);
            continue;
        }
        uint32_t whole = make(b, full_bytes(p, e), e->place.op);
        resident(b, e);
        drop(b, whole, full_bytes(p, e), e->place.op);
    }
}

/* deepspeed.initialize over a model built without zero.Init: the module,
 * cast to the 16-bit dtype where it is, moved to the GPU whole
 * (DeepSpeedEngine._configure_distributed_model: self.module.to(
 * self.device)), then ZeRO-3's _convert_to_zero_parameters partitions its
 * parameters in turn (Init(module=...): each one's partition copied into a
 * new tensor, the whole one freed). deepspeed/runtime/engine.py and
 * zero/parameter_offload.py, DeepSpeed edaa722. */
static void zero3_convert(builder *b, plan *p, bool quantizing) {
    load_all(b, p, quantizing);
    for (unsigned i = 0; i < p->n; i++) {
        if (!p->full[i]) continue;
        resident(b, &p->events[i]);
        drop(b, p->full[i], full_bytes(p, &p->events[i]), p->events[i].place.op);
        p->full[i] = 0;
    }
}

/* ZeRO-3's optimizer then flattens the partitions that stay on the GPU
 * (DeepSpeedZeroOptimizer_Stage3._create_fp16_partitions_with_
 * defragmentation, unless offload_param: defragment copies each partition
 * to the host and frees it, calls empty_cache(), and moves them back as
 * one flat buffer; deepspeed/runtime/zero/stage3.py, DeepSpeed 0.14-0.19).
 * The partitions go here and setup makes them again, one block each
 * rather than one flat buffer: the reservation the loading left cached is
 * given back before the first step. */
static void zero3_defragment(builder *b, plan *p) {
    for (unsigned i = 0; i < p->n; i++) {
        const vp_event *e = &p->events[i];
        if (sharded(p, e) && is_resident(e)) emit(b, (uint64_t)e->raw_delta, e->tensor, e->category, e->place.op, false);
    }
    empty_cache(b);
}

bool vp_run_prelude_build(const vp_recipe *recipe, const vp_event *events, unsigned n_events, vp_run_prelude *out) {
    memset(out, 0, sizeof *out);
    uint32_t largest = 0;
    for (unsigned i = 0; i < n_events; i++) {
        if (events[i].repeat > 1) return false; /* a folded log */
        if (events[i].tensor != VP_EVENT_MOVE && events[i].tensor != VP_EVENT_EMPTY_CACHE && events[i].tensor > largest)
            largest = events[i].tensor;
    }
    vp_shard_plan shard_plan;
    if (vp_shard_plan_make(recipe, vp_precision_get(recipe->precision), &shard_plan)) return false;
    plan p = {.recipe = recipe, .events = events, .n = n_events, .shards = shard_plan.shards.params,
              .params = shard_plan.params_dtype, .full = calloc(n_events ? n_events : 1, sizeof(uint32_t))};
    if (!p.full) return false;
    builder b = {out, largest + 1};
    vp_load load = vp_recipe_load(recipe);
    /* loaded on the CPU, the dequantization still runs on the GPU
     * (convert_moe_packed_tensors moves the blocks there), then
     * torch.cuda.empty_cache() releases it before the model moves: not
     * replayed (its own peak, about 12 bytes a value of one experts tensor,
     * is below a step's) */
    p.dequantizes = recipe->checkpoint_quant == VP_CHECKPOINT_MXFP4 && load != VP_LOAD_CPU;
    bool quantizing = load != VP_LOAD_CPU && vp_finetune_method_of(recipe)->quantizes_base;
    if (load == VP_LOAD_WARMUP) warmup(&b, &p);
    if (recipe->framework == VP_FRAMEWORK_DEEPSPEED && p.shards > 1) {
        if (recipe->zero_init) zero3_init(&b, &p);
        else zero3_convert(&b, &p, quantizing);
        if (!shard_plan.params_on_host) zero3_defragment(&b, &p);
    } else if (recipe->framework == VP_FRAMEWORK_FSDP && p.shards > 1) {
        if (load != VP_LOAD_CPU) load_all(&b, &p, quantizing); /* the whole model on the GPU first */
        fsdp_wrap(&b, &p, load == VP_LOAD_CPU, false);
    } else if (recipe->framework == VP_FRAMEWORK_FSDP2 && p.shards > 1 && !shard_plan.params_on_host) {
        if (vp_recipe_model_code(recipe) == VP_CODE_TORCHTITAN) {
            /* torchtitan builds the model on the meta device, shards it,
             * then to_empty and init_weights make the shards alone
             * (torchtitan/train.py) */
            for (unsigned i = 0; i < n_events; i++)
                if (is_resident(&events[i])) resident(&b, &events[i]);
        } else {
            /* accelerate's and axolotl's fsdp2_prepare_model: from_pretrained's
             * model (on the CPU, or on the GPU with a device map), then
             * fully_shard on each auto-wrapped layer and on the root */
            if (load != VP_LOAD_CPU) load_all(&b, &p, quantizing);
            fsdp_wrap(&b, &p, load == VP_LOAD_CPU, true);
        }
    } else {
        load_all(&b, &p, quantizing);
        /* DDP's __init__ (and FSDP NO_SHARD's sync_module_states) broadcast
         * every parameter and buffer from rank 0 */
        bool replicated = recipe->dp > 1 && (recipe->framework == VP_FRAMEWORK_TORCH ||
                                             recipe->framework == VP_FRAMEWORK_FSDP);
        unsigned *idx = replicated ? malloc((size_t)(n_events ? n_events : 1) * sizeof *idx) : NULL;
        if (replicated && !idx) out->failed = true;
        if (idx) {
            unsigned n = 0;
            for (unsigned i = 0; i < n_events; i++)
                if (is_resident(&events[i])) idx[n++] = i;
            broadcast_events(&b, &p, idx, n);
            free(idx);
        }
    }
    free(p.full);
    bool failed = out->failed;
    if (failed) vp_run_prelude_free(out);
    return !failed;
}

void vp_run_prelude_free(vp_run_prelude *prelude) {
    free(prelude->events);
    memset(prelude, 0, sizeof *prelude);
}
