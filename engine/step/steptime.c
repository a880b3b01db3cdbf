/* steptime.c — the step-time model: the forward, backward and recomputation
 * of every op of the slowest pipeline stage, the collectives of each
 * parallel dimension with what the framework hides behind compute, the
 * pipeline bubble, the optimizer step and offload traffic.
 *
 * Each op kind declares its cost class (vp_op_kind's `cost`); `costs`
 * below holds one function per class, reading the op's fields by name
 * through vp_field_index. */
#include "steptime.h"
#include "optimizer.h"

#include <math.h>
#include <string.h>

#include "block.h"
#include "finetune_method.h"
#include "framework.h"
#include "ops.h"
#include "sac_policy.h"

/* ---- coefficients, each with its source ---- */

/* The best fraction of the dense tensor-core peak a BF16/FP16 GEMM reaches
 * with the best shape: Bekman's "Maximum Achievable Matmul FLOPS" table
 * (stas00/ml-engineering, compute/accelerator/README.md): A100 SXM 267.9 of
 * 312 TFLOP/s (85.9 %), H100 SXM 792.1 of 989 (80.1 %), MI300X 781.9 of
 * 1300 (60.1 %). V100 is not in it: we take the A100's. */
static double matmul_cap(unsigned compute_major, bool amd) {
    if (amd) return 0.601;
    return compute_major >= 9 ? 0.801 : 0.859;
}
/* FP8 GEMMs (Transformer Engine on Hopper): no published MAMF figure;
 * the NeMo 24.07 FP8 rows (tests/reference/throughput.json) reach 1.3-1.5x
 * the BF16 rate of the same models, so we take 60 % of the FP8 peak (about
 * 1.5x the H100's BF16 MAMF). An assumption, marked as such in
 * docs/step-time.md. */
static const double fp8_cap = 0.60;
/* A fused attention kernel's share of the 16-bit dense peak, forward and
 * backward. Ampere: FlashAttention-2 reaches 50-73 % of the A100's peak
 * (Dao 2023, arXiv 2307.08691, abstract and section 4), its backward at
 * the low end: 0.65 and 0.55. Hopper: FlashAttention-2 reaches only 35 %
 * of the H100's (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608,
 * abstract); FlashAttention-3's 75 % came after the H100 rows we check. */
static void attention_efficiency(unsigned compute_major, double *forward, double *backward) {
    if (compute_major >= 9) {
        *forward = *backward = 0.35;
    } else {
        *forward = 0.65;
        *backward = 0.55;
    }
}
/* FlashAttention's backward recomputes the scores: 5 matmuls to the
 * forward's 2 (Dao et al. 2022, section 3.1; FlashAttention-2 counts the
 * backward as 2.5x the forward). */
static const double flash_backward_flops = 2.5;
/* NCCL's all-reduce bus bandwidth inside an 8-GPU NVLink node is about
 * 70 % of the per-direction link rate: ~200-208 GB/s of 300 GB/s on
 * A100 SXM (nccl-tests issues #149 and #178). */
static const double link_efficiency = 0.70;
/* Inter-node, GB/s per GPU one way when the GPU file gives no
 * network_gbps: one NIC per GPU on DGX-class nodes: DGX-2 V100 8x100 Gb/s
 * EDR for 16 GPUs, DGX A100 8x200 Gb/s HDR, DGX H100 8x400 Gb/s NDR
 * (NVIDIA DGX datasheets). */
static double default_network_gbps(unsigned compute_major) {
    if (compute_major >= 9) return 400.0 / 8;
    if (compute_major == 8) return 200.0 / 8;
    return 100.0 / 8 / 2;
}
/* nccl-tests over InfiniBand reach about 80 % of the line rate. */
static const double network_efficiency = 0.80;
/* PCIe x16 per direction: Gen3 15.75, Gen4 31.5, Gen5 63 GB/s (PCI-SIG);
 * pinned cudaMemcpy reaches about 80 % (CUDA bandwidthTest). V100 Gen3,
 * A100 Gen4, H100 Gen5. */
static double pcie_gbps(unsigned compute_major) {
    if (compute_major >= 9) return 63.0 * 0.8;
    if (compute_major == 8) return 31.5 * 0.8;
    return 15.75 * 0.8;
}
/* A dual-socket server's DDR4/DDR5 bandwidth seen by DeepSpeed's CPU Adam,
 * which streams four fp32 arrays (Ren et al. 2021, ZeRO-Offload, section
 * 5.1): we take 100 GB/s. NVMe: one Gen4 drive per GPU, ~6 GB/s
 * (Rajbhandari et al. 2021, ZeRO-Infinity, section 6). */
static const double host_gbps = 100.0, nvme_gbps = 6.0;
/* Memory-bound kernels reach about 80 % of the HBM datasheet bandwidth
 * (STREAM-like copy on A100/H100: ~1.6 of 2.0 TB/s, ~2.6-3.0 of 3.35 TB/s). */
static const double memory_efficiency = 0.80;

/* SMs that run a GEMM's tiles when the GPU file gives none: the data-centre
 * part of each generation, V100 80, A100 108, H100 SXM 132 (NVIDIA's Volta,
 * Ampere and Hopper architecture whitepapers); MI300X 304 compute units
 * (AMD CDNA 3 whitepaper). 0: no wave model. */
static unsigned streaming_multiprocessors(unsigned compute_major, bool amd) {
    if (amd) return 304;
    if (compute_major >= 9) return 132;
    if (compute_major == 8) return 108;
    if (compute_major == 7) return 80;
    return 0;
}

/* ---- primitives ---- */

double vp_time_allreduce(double bytes, unsigned n, double busbw) {
    if (n <= 1 || bytes <= 0 || busbw <= 0) return 0;
    return 2.0 * (n - 1) / n * bytes / busbw;
}

double vp_time_allgather(double bytes, unsigned n, double busbw) {
    if (n <= 1 || bytes <= 0 || busbw <= 0) return 0;
    return (double)(n - 1) / n * bytes / busbw;
}

double vp_time_alltoall(double bytes, unsigned n, double busbw) { return vp_time_allgather(bytes, n, busbw); }

/* Tile and wave quantization (NVIDIA, "Matrix Multiplication Background
 * User's Guide", Deep Learning Performance documentation): the output is
 * cut into tiles, the tiles run in waves of one per SM, and a partial tile
 * or a partial last wave costs as much as a full one. We take the better of
 * cuBLAS's 256x128 tile either way round (narrowed to an output smaller
 * than a tile); the published best-shape
 * efficiency (matmul_cap) is the one with no waste. */
double vp_time_wave_efficiency(double m, double n, double batch, unsigned sms) {
    if (!sms || m <= 0 || n <= 0 || batch <= 0) return 1;
    static const double tiles[2][2] = {{256, 128}, {128, 256}};
    double best = 0;
    for (unsigned i = 0; i < 2; i++) {
        /* an output narrower than a tile gets a narrower one (multiples of 16) */
        double tm = fmin(tiles[i][0], 16 * ceil(m / 16)), tn = fmin(tiles[i][1], 16 * ceil(n / 16));
        double count = ceil(m / tm) * ceil(n / tn) * batch;
        double waves = ceil(count / sms);
        double e = m * n * batch / (waves * sms * tm * tn);
        if (e > best) best = e;
    }
    return best;
}

double vp_time_matmul(double m, double n, double k, double batch, double elem, const vp_time_hw *hw, double peak) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double flops = 2.0 * m * n * k * batch;
    double bytes = elem * (m * k + k * n + m * n) * batch;
    double compute = flops / (peak * hw->matmul_cap * vp_time_wave_efficiency(m, n, batch, hw->sms));
    double memory = bytes / hw->memory_bw;
    return compute > memory ? compute : memory;
}

/* The zero-bubble schedules' bubbles as published, with a chunk's
 * forward, input-gradient and weight-gradient passes taking equal time
 * (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2's
 * T_F = T_B = T_W), so that a micro-batch through a stage is 3 of them and
 * a full backward B 2. The DualPipe README (deepseek-ai/DualPipe at
 * 89f5de1, the DeepSeek-V3 report's Table 2), with B the full backward and
 * F&B an overlapped forward and backward:
 *  - ZB1P (ScheduleInterleavedZeroBubble: "implementing the ZB1P schedule
 *    in the paper"): (PP - 1)(F + B - 2W) = (p - 1) F, a third of a
 *    micro-batch per stage; over v chunks each pass is 1/v of the stage's
 *    (Narayanan et al. 2021's interleaving, applied here): (p - 1) / 3v.
 *  - DualPipe: (PP/2 - 1)(F&B + B - 3W), F&B taken as F + B (no gain from
 *    the overlap: torch runs an OVERLAP_F_B's two actions one after the
 *    other); folded into a V over pp ranks PP = 2 pp stages of half a
 *    rank's layers each: (pp - 1)(3 + 2 - 3) / 6 = (p - 1) / 3.
 *  - ZB-V: none at equal times (ScheduleZBVZeroBubble's docstring: "would
 *    have the 'zero bubble' property only if time forward == time backward
 *    input == time backward weights"). */
double vp_time_bubble_microbatches(vp_pp_schedule schedule, unsigned pp, unsigned virtual_stages) {
    if (pp <= 1) return 0;
    unsigned v = (schedule == VP_PP_INTERLEAVED || schedule == VP_PP_TORCH_INTERLEAVED_ZB) && virtual_stages > 1
                     ? virtual_stages
                     : 1;
    switch (schedule) {
    case VP_PP_TORCH_ZBV: return 0;
    case VP_PP_TORCH_INTERLEAVED_ZB: return (double)(pp - 1) / (3.0 * v);
    case VP_PP_TORCH_DUALPIPEV: return (double)(pp - 1) / 3.0;
    default: return (double)(pp - 1) / v;
    }
}

bool vp_time_hw_from_gpu(const vp_gpu *gpu, const vp_recipe *r, vp_time_hw *hw) {
    memset(hw, 0, sizeof *hw);
    if (!gpu) return false;
    const vp_precision *precision = vp_precision_get(r->precision);
    double sixteen = precision->compute == VP_BF16 ? gpu->bf16_tflops : gpu->fp16_tflops;
    if (sixteen <= 0) sixteen = gpu->fp16_tflops > 0 ? gpu->fp16_tflops : gpu->bf16_tflops;
    double linear = sixteen;
    bool amd = gpu->compute_major == 0 && gpu->fp16_tflops > 0;
    hw->matmul_cap = matmul_cap(gpu->compute_major, amd);
    /* torch keeps fp32 matmuls in full fp32 unless allow_tf32 is set
     * (off for matmuls since PyTorch 1.12) */
    if (precision->compute == VP_FP32) linear = sixteen = gpu->fp32_tflops;
    if (precision->fp8_gemms && gpu->fp8_tflops > 0) {
        linear = gpu->fp8_tflops * fp8_cap / hw->matmul_cap;
    }
    if (linear <= 0 || gpu->memory_gbps <= 0) return false;
    hw->matmul_flops = linear * 1e12;
    hw->attention_flops = sixteen * 1e12;
    hw->memory_bw = gpu->memory_gbps * 1e9 * memory_efficiency;
    double link = gpu->interconnect_gbps > 0 ? gpu->interconnect_gbps : 2 * pcie_gbps(gpu->compute_major);
    hw->link_busbw = link / 2 * 1e9 * link_efficiency;
    double net = gpu->network_gbps > 0 ? gpu->network_gbps : default_network_gbps(gpu->compute_major);
    hw->network_bw = net * 1e9 * network_efficiency;
    hw->pcie_bw = pcie_gbps(gpu->compute_major) * 1e9;
    hw->host_bw = host_gbps * 1e9;
    hw->nvme_bw = nvme_gbps * 1e9;
    hw->gpus_per_node = r->gpus_per_node ? r->gpus_per_node : 8;
    hw->sms = gpu->sms ? gpu->sms : streaming_multiprocessors(gpu->compute_major, amd);
    attention_efficiency(gpu->compute_major, &hw->attention_forward, &hw->attention_backward);
    return true;
}

/* ---- the ops ---- */

/* What one pass over some ops costs on one rank, for one micro-batch. */
typedef struct {
    double matmul_s;          /* forward linears */
    double attention_s;       /* forward attention core (scores, softmax, context) */
    double attention_bwd_s;   /* its backward */
    double memory_s;          /* forward memory-bound ops */
    double backward_extra_s;  /* backward traffic with no forward counterpart (gradient accumulation) */
    double dequant_s;         /* a quantized base's weights made whole, once a pass (forward, backward, rerun) */
    double cast_s;            /* forward float8 casts (fp8-torchao): once a forward and a rerun */
    double cast_bwd_s;        /* their backward's casts and layout copies */
    /* checkpointing = op-selective: the forward seconds (and FLOPs) of the
     * ops the policy recomputes, and the aten.mm calls seen so far in the
     * block (every second one is recomputed) */
    double sac_recompute_s, sac_recompute_flops;
    unsigned sac_mms;
    double model_flops;       /* forward FLOPs, full s^2 attention, whole layer (no split) */
    double attention_flops;   /* of model_flops, the attention core's */
    double tp_bytes;          /* all-reduced over tp in the forward (as much again in backward) */
    double a2a_bytes;         /* all-to-all per rank in the forward (MoE dispatch and combine) */
    double cp_bytes;          /* keys and values passed around the context-parallel ring in the forward */
} op_cost;

typedef struct {
    const vp_recipe *recipe;
    const vp_time_hw *hw;
    double batch, seq, seq_kv;  /* this rank's sequences and queries; keys each query sees */
    double source_seq;          /* an encoder-decoder's encoder tokens: the keys cross-attention sees */
    double rows;                /* batch x seq: rows through the linears */
    double norm_rows;           /* rows of the residual stream: / tp under sequence parallelism */
    double tp, elem, ep, etp;
    bool flash;                 /* a fused kernel: no scores in memory, the masked half skipped */
    bool train_dropout;
    double main_grad_bytes;     /* per weight and micro-batch: Megatron's fp32 main_grad read and written (8) */
    double dequant_bytes;       /* per weight and pass: a quantized base read, its 16-bit copy written */
    double hidden;              /* the residual stream's width where the walk is (for kinds without one) */
    double vocab;               /* the section's vocabulary (the loss over the head's logits) */
    vp_sac_rules sac;           /* checkpointing = op-selective: torchtitan's save list (sac_policy.c) */
    bool op_selective;
    bool eager;                 /* the model's element-wise ops one kernel each (kernels: eager) */
    bool float8;                /* precision fp8-torchao: nn.Linear modules are torchao's Float8Linear */
    bool float8_weights;        /* ... whose weights FSDP2 gathers in float8 already (fp8_all_gather) */
    vp_float8_recipe fp8_recipe;
} cost_ctx;

static double field(const vp_op *op, const char *name) {
    int i = vp_field_index(op->kind, name);
    return i < 0 ? 0.0 : op->value[i];
}

/* An enum field's option name ("" when the kind has no such field). */
static const char *field_option(const vp_op *op, const char *name) {
    int i = vp_field_index(op->kind, name);
    if (i < 0 || !op->kind->fields[i].options) return "";
    return op->kind->fields[i].options[(int)op->value[i]];
}

/* A projection of `rows` rows from `in` to `out` features. Megatron's
 * gradient_accumulation_fusion adds its weight gradient into the fp32
 * main_grad inside the wgrad GEMM: the fp32 buffer is read and written once
 * per micro-batch (8 bytes a weight). */
static void project(const cost_ctx *c, double rows, double in, double out, op_cost *o) {
    o->matmul_s += vp_time_matmul(rows, out, in, 1, c->elem, c->hw, c->hw->matmul_flops);
    if (c->main_grad_bytes > 0) o->backward_extra_s += in * out * c->main_grad_bytes / c->hw->memory_bw;
}

/* A linear layer of the model's body: a projection whose weight QLoRA's
 * base dequantizes to the compute dtype for the forward and again for the
 * backward (Dettmers et al. 2023, QLoRA, section 3). */
static void linear(const cost_ctx *c, double rows, double in, double out, op_cost *o) {
    project(c, rows, in, out, o);
    if (c->dequant_bytes > 0) o->dequant_s += in * out * c->dequant_bytes / c->hw->memory_bw;
}

static void sac_op(const cost_ctx *c, vp_aten_op op, double seconds, double flops, op_cost *o);

/* every memory-bound op is off the save list: recomputed by op-selective */
static void memory_pass(const cost_ctx *c, double bytes, op_cost *o) {
    o->memory_s += bytes / c->hw->memory_bw;
    sac_op(c, VP_ATEN_OTHER, bytes / c->hw->memory_bw, 0, o);
}

/* ---- checkpointing = op-selective ---- */

/* torchtitan's policy over the block's ops, with the rules the memory
 * side applies (sac_policy.c, sim.c vp_sac_new): an op on the save list
 * is saved (its output cached for the rerun: no compute), of aten.mm only
 * the 1st, 3rd, ... of the block; every other op runs again in the rerun.
 * `seconds` and `flops` are the op's forward. */
static void sac_op(const cost_ctx *c, vp_aten_op op, double seconds, double flops, op_cost *o) {
    if (!c->op_selective) return;
    bool saved = c->sac.saved[op];
    if (saved && c->sac.alternate[op]) saved = ++o->sac_mms % 2 == 1;
    if (saved) return;
    o->sac_recompute_s += seconds;
    o->sac_recompute_flops += flops;
}

/* One nn.Linear of `rows` rows, in -> out features, as the policy sees
 * it: F.linear without a bias is aten.mm, with one (and Conv1D's
 * torch.addmm) aten.addmm, which is not on the list. */
static void sac_linear(const cost_ctx *c, double rows, double in, double out, bool bias, op_cost *o) {
    if (!c->op_selective) return;
    double t = vp_time_matmul(rows, out, in, 1, c->elem, c->hw, c->hw->matmul_flops);
    sac_op(c, bias ? VP_ATEN_ADDMM : VP_ATEN_MM, t, 2 * rows * in * out, o);
}

/* How tensor parallelism splits a module's linear (for torchao's float8
 * TP styles); TP_PLAIN where no style applies. */
typedef enum { TP_PLAIN, TP_COLUMN, TP_ROW } tp_style;

/* torchtitan's plan with Float8 tensorwise (apply_tp's
 * enable_float8_tensorwise_tp; rowwise recipes keep the plain styles):
 * torchao's Float8ColwiseParallel, Float8RowwiseParallel and
 * PrepareFloat8ModuleInput on the swapped linears (op_basic.c float8_tp). */
static bool float8_styles(const cost_ctx *c) {
    return c->float8 && c->fp8_recipe == VP_FLOAT8_TENSORWISE && c->tp > 1 && vp_framework_of(c->recipe)->dtensor_tp;
}

static void float8_linear(const cost_ctx *c, double rows, double in, double out, bool conv1d, tp_style style,
                          op_cost *o);

/* Only nn.Linear modules whose dims are multiples of 16 are swapped
 * (torchtitan's filter; layout.c's make_leaf), not Conv1D. */
static bool swapped_float8(const cost_ctx *c, double in, double out, bool conv1d) {
    return c->float8 && !conv1d && fmod(in, 16) == 0 && fmod(out, 16) == 0;
}

/* One module of the block (its projections are costed together above,
 * linear()): what the module itself adds, as the checkpointing policy
 * counts it and as torchao swaps it (one Float8Linear each: a fused
 * q/k/v one, separate q, k, v three, each casting its input). */
static void module_linear(const cost_ctx *c, double rows, double in, double out, bool bias, bool conv1d,
                          tp_style style, op_cost *o) {
    /* Float8Linear's GEMM is torch.mm on float8 tensors (aten.mm to the
     * policy), its bias added after it */
    sac_linear(c, rows, in, out, (bias && !swapped_float8(c, in, out, conv1d)) || conv1d, o);
    float8_linear(c, rows, in, out, conv1d, style, o);
}

/* Bytes an element of a module's tensor-parallel traffic takes. torchtitan's
 * plan with Float8 tensorwise under sequence parallelism (apply_tp,
 * enable_float8_tensorwise_tp; torchao float8_tensor_parallel.py:
 * PrepareFloat8ModuleInput, Float8ColwiseParallel, Float8RowwiseParallel;
 * op_basic.c float8_tp) gathers the module's input in float8 (1 byte) and
 * its output's gradient in float8 in backward, while the reduce-scatters
 * (the output in forward, the input's gradient in backward) stay 16-bit:
 * of tp_bytes' all-reduce-equivalent (a gather and a scatter of the rows)
 * half moves at 1 byte. Rowwise recipes keep the plain styles; without
 * sequence parallelism the all-reduces are 16-bit either way. */
static double tp_elem(const cost_ctx *c, double hidden) {
    bool gathered = float8_styles(c) && c->recipe->sequence_parallel && fmod(hidden, 16) == 0;
    return gathered ? (1 + c->elem) / 2 : c->elem;
}

/* ---- torchao's float8 casts (precision fp8-torchao) ---- */

/* hp_tensor_to_float8_dynamic, eager (torchao 0.19; prims.c cast_float8
 * lists the kernels): |x| (read, write), its amax (read), an fp32 upcast
 * of a 16-bit x (read, write 4), x * scale (read, write 4), the clamp
 * (read 4, write 4), the cast to float8 (read 4, write 1); the scales'
 * bytes are left out. Bytes moved for n elements of e bytes. */
static double eager_float8_cast_bytes(double n, double e) {
    double upcast = e < 4 ? n * (e + 4) : 0, scaled_in = e < 4 ? 4 * n : n * e;
    return 2 * n * e + n * e + upcast + (scaled_in + 4 * n) + 8 * n + 5 * n;
}

/* Under torch.compile (compile = true: the blocks compiled, torchtitan's
 * apply_compile) Inductor fuses the cast's pointwise chain: abs and amax
 * into one reduction kernel reading x, the upcast, scale, clamp and cast
 * into one pointwise kernel reading x and writing one byte an element
 * (Inductor's scheduler fuses pointwise producers into their consumer;
 * torchao's README asks for torch.compile for this reason). */
static double float8_cast_bytes(const cost_ctx *c, double n, double e) {
    return c->recipe->compile ? 2 * n * e + n : eager_float8_cast_bytes(n, e);
}

/* preprocess_addmm's one-byte layout copies (read, write) and, with
 * rowwise scales and no fast accumulation, the fp32 outer product of the
 * scales' reciprocals written, then read as the output is scaled in place
 * (prims.c scaled_mm): bytes for an [m, n] output */
static double float8_mm_bytes(double copies, bool post_scale, double m, double n, double e) {
    return 2 * copies + (post_scale ? (8 + 2 * e) * m * n : 0);
}

/* torchao's Float8Linear (prims.c vp_linear_float8, backward_float8) as
 * memory-bound traffic beside its GEMMs: forward, the input and the weight
 * cast (the weight not when FSDP2 gathered it in float8); backward,
 * grad_output and the weight cast for grad_input with the weight's
 * column-major copy, grad_output and the input cast again for grad_weight
 * with both operands' copies (16-bit grad_weight under rowwise_with_gw_hp:
 * no casts for it). */
static void float8_linear(const cost_ctx *c, double rows, double in, double out, bool conv1d, tp_style style,
                          op_cost *o) {
    if (!swapped_float8(c, in, out, conv1d)) return;
    double e = c->elem, bw = c->hw->memory_bw, x = rows * in, w = in * out, g = rows * out;
    bool rowwise = c->fp8_recipe != VP_FLOAT8_TENSORWISE;
    /* torchao's float8 TP styles (float8_styles): a column-parallel
     * linear's input arrives in float8 (PrepareFloat8ModuleInput, cast once
     * per module: float8_module_input), a row-parallel one's is cast before
     * it and saved in float8; each one's output gradient is cast once
     * (NoopFwToFloat8BwDynamic) and serves both backward GEMMs; neither
     * input is cast again for grad_weight */
    bool styled = style != TP_PLAIN && float8_styles(c);
    double x_cast = styled && style == TP_COLUMN ? 0 : float8_cast_bytes(c, x, e);
    double x_recast = styled ? 0 : float8_cast_bytes(c, x, e), g_cast = styled ? 0 : float8_cast_bytes(c, g, e);
    o->cast_s += (x_cast + (c->float8_weights ? 0 : float8_cast_bytes(c, w, e))) / bw;
    double bwd =
        g_cast + (c->float8_weights ? 0 : float8_cast_bytes(c, w, e)) + float8_mm_bytes(w, rowwise, rows, in, e);
    if (c->fp8_recipe != VP_FLOAT8_ROWWISE_GW_HP)
        bwd += g_cast + x_recast + float8_mm_bytes(g + x, rowwise, out, in, e);
    /* the styles' one cast of the output gradient: a column-parallel
     * linear's whole [rows, out / tp], a row-parallel one's on its
     * reduce-scattered shard (the norm's rows) before the float8 gather */
    if (styled) bwd += float8_cast_bytes(c, style == TP_COLUMN ? g : c->norm_rows * out, e);
    o->cast_bwd_s += bwd / bw;
}

/* PrepareFloat8ModuleInput: the module's input cast to float8 once, on
 * the shard before the all-gather under sequence parallelism (the norm's
 * rows), for all its column-parallel linears. */
static void float8_module_input(const cost_ctx *c, double hidden, op_cost *o) {
    if (!float8_styles(c) || fmod(hidden, 16) != 0) return;
    o->cast_s += float8_cast_bytes(c, c->norm_rows * hidden, c->elem) / c->hw->memory_bw;
}

/* The attention core of `heads` query heads of width d (dv for values)
 * over the ctx's keys; a causal one lets fused kernels skip the masked half. */
static void attention_core(const cost_ctx *c, double heads, double d, double dv, double dropout, bool upcast,
                           bool causal, op_cost *o) {
    double b = c->batch, s = c->seq, kv = c->seq_kv, h = heads / c->tp;
    double full = 2 * b * s * kv * heads * (d + dv);
    o->model_flops += full;
    o->attention_flops += full;
    double run = 2 * b * s * kv * h * (d + dv);
    const vp_time_hw *hw = c->hw;
    /* SDPA's kernels are on the save list; the flash_attn library's op
     * and eager attention's bmm and softmax are not */
    vp_aten_op aten = c->recipe->attention == VP_ATTN_SDPA ? VP_ATEN_SDPA_FLASH : VP_ATEN_BMM;
    if (c->flash) {
        if (causal) run *= 0.5; /* the blocks above the diagonal are skipped */
        sac_op(c, aten, run / (hw->attention_flops * hw->attention_forward), full, o);
        o->attention_s += run / (hw->attention_flops * hw->attention_forward);
        o->attention_bwd_s += flash_backward_flops * run / (hw->attention_flops * hw->attention_backward);
        return;
    }
    double t = vp_time_matmul(s, kv, d, b * h, c->elem, hw, hw->attention_flops) +
               vp_time_matmul(s, dv, kv, b * h, c->elem, hw, hw->attention_flops);
    /* scale, mask and softmax (Megatron fuses them: one read, one write;
     * an fp32 upcast adds a 4-byte copy each way), then dropout with its
     * one-byte mask */
    double scores = b * h * s * kv;
    double bytes = scores * 2 * c->elem + (upcast ? scores * 8 : 0);
    if (dropout > 0 && c->train_dropout) bytes += scores * (2 * c->elem + 1);
    double mem = bytes / hw->memory_bw;
    sac_op(c, aten, t + mem, full, o);
    o->attention_s += t + mem;
    o->attention_bwd_s += 2 * t + 2 * mem;
}

static void cost_attention(const vp_op *op, const cost_ctx *c, op_cost *o) {
    double hidden = field(op, "hidden"), heads = field(op, "heads"), kv = field(op, "kv_heads");
    double d = field(op, "head_dim");
    if (kv <= 0) kv = heads;
    if (d <= 0) d = hidden / heads;
    double rows = c->rows, tp = c->tp, dv = d;
    bool mla = field(op, "kv_lora_rank") > 0;
    if (mla) { /* multi-head latent attention (DeepSeek-V2/V3) */
        double ql = field(op, "q_lora_rank"), kvl = field(op, "kv_lora_rank");
        double nope = field(op, "qk_nope_head_dim"), rope = field(op, "qk_rope_head_dim");
        d = nope + rope;
        dv = field(op, "v_head_dim");
        double q_in = ql > 0 ? ql : hidden;
        if (ql > 0) linear(c, rows, hidden, ql, o);
        linear(c, rows, q_in, heads * d / tp, o);
        linear(c, rows, hidden, kvl + rope, o);
        linear(c, rows, kvl, heads * (nope + dv) / tp, o);
        linear(c, rows, heads * dv / tp, hidden, o);
        o->model_flops += 2 * rows * tp * ((ql > 0 ? hidden * ql : 0) + q_in * heads * d + hidden * (kvl + rope) +
                                           kvl * heads * (nope + dv) + heads * dv * hidden);
        /* modeling_deepseek's order for the policy's count: the query's
         * projections, then the latent's; o_proj after the core */
        if (ql > 0) module_linear(c, rows, hidden, ql, false, false, TP_PLAIN, o);
        module_linear(c, rows, q_in, heads * d / tp, false, false, TP_PLAIN, o);
        module_linear(c, rows, hidden, kvl + rope, false, false, TP_PLAIN, o);
        module_linear(c, rows, kvl, heads * (nope + dv) / tp, false, false, TP_PLAIN, o);
    } else {
        linear(c, rows, hidden, (heads + 2 * kv) * d / tp, o);
        linear(c, rows, heads * d / tp, hidden, o);
        o->model_flops += 2 * rows * hidden * (2 * heads + 2 * kv) * d;
        /* the projections one by one for the policy's count, in the
         * module's order: q, k, v (or one fused); o_proj after the core */
        bool bias = field(op, "qkv_bias") != 0, conv1d = field(op, "conv1d") != 0;
        float8_module_input(c, hidden, o);
        if (field(op, "fused_qkv") != 0 || conv1d) {
            module_linear(c, rows, hidden, (heads + 2 * kv) * d / tp, bias, conv1d, TP_COLUMN, o);
        } else {
            module_linear(c, rows, hidden, heads * d / tp, bias, conv1d, TP_COLUMN, o);
            module_linear(c, rows, hidden, kv * d / tp, bias, conv1d, TP_COLUMN, o);
            module_linear(c, rows, hidden, kv * d / tp, bias, conv1d, TP_COLUMN, o);
        }
        /* rotary positions on q and k: read and write them, fused; eager
         * (transformers' apply_rotary_pos_emb) q * cos (read, write),
         * rotate_half's neg of half and cat (half read and written, then
         * the whole), * sin, and the sum (two read, one written): 10 x */
        if (field(op, "rotary") != 0)
            memory_pass(c, (c->eager ? 10 : 2) * rows * (heads + kv) * d / tp * c->elem, o);
    }
    cost_ctx local = *c;
    if (field(op, "cross") != 0) local.seq_kv = c->source_seq;
    double window = field(op, "sliding_window");
    if (window > 0 && window < local.seq_kv) local.seq_kv = window;
    /* a padding mask or none (BERT, T5's encoder) and cross-attention see every key */
    const char *mask = field_option(op, "mask");
    bool causal = strcmp(mask, "padding") && strcmp(mask, "none") && field(op, "cross") == 0;
    attention_core(&local, heads, d, dv, field(op, "dropout"), field(op, "upcast_softmax") != 0, causal, o);
    module_linear(c, rows, heads * dv / tp, hidden, field(op, "out_bias") != 0, field(op, "conv1d") != 0,
                  mla ? TP_PLAIN : TP_ROW, o);
    double resid = field(op, "resid_dropout");
    if (resid > 0 && c->train_dropout) memory_pass(c, c->norm_rows * hidden * (2 * c->elem + 1), o);
    o->tp_bytes += rows * hidden * tp_elem(c, hidden);
    /* ring attention: each rank's keys and values visit the cp - 1 others */
    unsigned cp = c->recipe->cp ? c->recipe->cp : 1;
    if (cp > 1) o->cp_bytes += (cp - 1) * 2 * rows * kv * d / tp * c->elem;
}

static void cost_mlp(const vp_op *op, const cost_ctx *c, op_cost *o) {
    double hidden = field(op, "hidden"), inner = field(op, "intermediate"), tp = c->tp, rows = c->rows;
    bool gated = field(op, "gated") != 0;
    linear(c, rows, hidden, (gated ? 2 : 1) * inner / tp, o);
    linear(c, rows, inner / tp, hidden, o);
    o->model_flops += 2 * rows * hidden * inner * (gated ? 3 : 2);
    /* gate_proj, up_proj (or c_fc), then down_proj (or c_proj) */
    bool bias = field(op, "bias") != 0, conv1d = field(op, "conv1d") != 0;
    float8_module_input(c, hidden, o);
    for (unsigned k = 0; k < (gated ? 2u : 1u); k++)
        module_linear(c, rows, hidden, inner / tp, bias, conv1d, TP_COLUMN, o);
    /* the activation (and the gate's product): read and write the inner rows */
    memory_pass(c, rows * inner / tp * c->elem * (gated ? 5 : 2), o);
    module_linear(c, rows, inner / tp, hidden, bias, conv1d, TP_ROW, o);
    if (field(op, "resid_dropout") > 0 && c->train_dropout)
        memory_pass(c, c->norm_rows * hidden * (2 * c->elem + 1), o);
    o->tp_bytes += rows * hidden * tp_elem(c, hidden);
}

static void cost_moe(const vp_op *op, const cost_ctx *c, op_cost *o) {
    double hidden = field(op, "hidden"), inner = field(op, "intermediate"), experts = field(op, "experts");
    double k = field(op, "top_k"), shared = field(op, "shared_intermediate"), rows = c->rows;
    /* the router */
    linear(c, rows, hidden, experts, o);
    /* routed rows: every token k times; over ep ranks each takes its
     * experts' share of the tp x ep group's tokens */
    double routed = rows * k, etp = c->etp;
    linear(c, routed, hidden, 2 * inner / etp, o);
    linear(c, routed, inner / etp, hidden, o);
    memory_pass(c, routed * inner / etp * c->elem * 5, o);
    o->model_flops += 2 * rows * (hidden * experts + k * 3 * hidden * inner);
    if (shared > 0) {
        linear(c, rows, hidden, 2 * shared / c->tp, o);
        linear(c, rows, shared / c->tp, hidden, o);
        o->model_flops += 2 * rows * 3 * hidden * shared;
    }
    if (c->ep > 1) o->a2a_bytes += 2 * routed * hidden * c->elem;
    o->tp_bytes += rows * hidden * c->elem;
}

/* Bytes an element of an RMSNorm written in Python moves, eager
 * (transformers' LlamaRMSNorm and its kin; torchtitan's RMSNorm: the same
 * ops), one kernel per op: the fp32 upcast (read e, write 4), pow (4, 4),
 * mean (read 4), x * rsqrt (4, 4), the downcast (4, e), the weight (e, e);
 * the per-row statistics are tiny. */
static double eager_rmsnorm_bytes(double e) {
    double casts = e < 4 ? (e + 4) + (4 + e) : 0;
    return casts + 8 + 4 + 8 + 2 * e;
}

static void cost_norm(const vp_op *op, const cost_ctx *c, op_cost *o) {
    /* fused (and nn.LayerNorm's one native_layer_norm kernel): read the
     * rows, write the normalized rows (fp32 statistics are tiny) */
    double per_element = 2 * c->elem;
    if (c->eager && !strcmp(op->kind->name, "rmsnorm")) per_element = eager_rmsnorm_bytes(c->elem);
    memory_pass(c, per_element * c->norm_rows * field(op, "hidden"), o);
}

/* A Lua block (block.h): its forward's projections as linears, every
 * other primitive one pass reading and writing its output's size. */
static void cost_block(const vp_op *op, const cost_ctx *c, op_cost *o) {
    const vp_block_program *p = op->data;
    if (!p) return;
    bool megatron = p->megatron_start && c->recipe->framework == VP_FRAMEWORK_MEGATRON;
    unsigned first = megatron ? p->megatron_start : 0, end = p->megatron_start && !megatron ? p->megatron_start : p->n_code;
    /* under DTensor's sequence parallelism a block its plan does not
     * gather runs on the rank's share of the rows, as a SequenceParallel
     * norm does (block_plan.c) */
    bool share = vp_framework_of(c->recipe)->dtensor_tp && c->tp > 1 && !p->dtensor_gathers;
    double elementwise_rows = share ? c->norm_rows : c->rows;
    /* each value's element size: the stream's, an explicit cast's
     * (x.float(), .to(dtype)), fp32 for softmax(dtype=torch.float32), else
     * its first operand's */
    double size[VP_BLOCK_VALUES];
    for (unsigned v = 0; v < VP_BLOCK_VALUES; v++) size[v] = c->elem;
    for (unsigned i = first; i < end; i++) {
        const vp_block_instr *in = &p->code[i];
        double in_size = in->arg[0] >= 0 ? size[in->arg[0]] : c->elem, out_size = in_size;
        if (in->prim == VP_BP_TO)
            out_size = in->mode == VP_BLOCK_LIKE ? (in->arg[1] >= 0 ? size[in->arg[1]] : c->elem)
                                                 : (double)vp_bytes_of((vp_dtype)in->mode, 1);
        if (in->prim == VP_BP_SOFTMAX_FP32) out_size = 4;
        unsigned outputs = in->prim == VP_BP_DROP || in->prim == VP_BP_RETURN ? 0
                           : in->prim == VP_BP_SPLIT                         ? in->mode
                           : in->prim == VP_BP_TOPK || in->prim == VP_BP_CACHE ? 2
                                                                               : 1;
        for (unsigned k = 0; k < outputs && in->out + k < VP_BLOCK_VALUES; k++) size[in->out + k] = out_size;
        if (in->prim == VP_BP_DROP || in->prim == VP_BP_RETURN || in->prim == VP_BP_SPLIT || in->prim == VP_BP_CACHE ||
            in->prim == VP_BP_SELECT)
            continue; /* views, and the cache's references */
        if (in->prim == VP_BP_SDPA) { /* as the attention op's core (cost_attention) */
            attention_core(c, in->heads, (double)in->width, (double)in->width, in->number, in->mode & VP_SDPA_UPCAST,
                           true, o);
            unsigned cp = c->recipe->cp ? c->recipe->cp : 1;
            if (cp > 1) o->cp_bytes += (cp - 1) * 2 * c->rows * in->kv_heads * (double)in->width / c->tp * c->elem;
            continue;
        }
        if (in->prim == VP_BP_MATMUL) { /* eager attention written out: one bmm of the two */
            double b = c->batch, s = c->seq, kv = c->seq_kv, h = in->heads / c->tp, d = (double)in->width;
            double flops = 2 * b * s * kv * in->heads * d;
            o->model_flops += flops;
            o->attention_flops += flops;
            double t = in->mode & VP_MATMUL_B_TRANSPOSED
                           ? vp_time_matmul(s, kv, d, b * h, c->elem, c->hw, c->hw->attention_flops)
                           : vp_time_matmul(s, d, kv, b * h, c->elem, c->hw, c->hw->attention_flops);
            o->attention_s += t;
            o->attention_bwd_s += 2 * t;
            continue;
        }
        if (!in->out_width && in->heads) { /* scores-shaped: heads x keys per token */
            memory_pass(c, 2 * c->batch * c->seq * c->seq_kv * in->heads / c->tp * c->elem, o);
            continue;
        }
        if ((in->prim == VP_BP_ALL_GATHER || in->prim == VP_BP_REDUCE_SCATTER) && c->tp > 1 &&
            c->recipe->sequence_parallel) /* the sequence's rows over the tensor-parallel group */
            o->tp_bytes += c->rows * (double)in->out_width * c->elem;
        if (in->prim == VP_BP_LINEAR) {
            const vp_block_param *w = &p->param[in->arg[1] - 1];
            double out = (double)w->rows, inputs = (double)w->columns;
            linear(c, c->rows, w->split == VP_BLOCK_SPLIT_COLUMNS ? inputs / c->tp : inputs,
                   w->split == VP_BLOCK_SPLIT_ROWS ? out / c->tp : out, o);
            /* (a Lua block's float8 casts are counted as plain Float8Linear's) */
            module_linear(c, c->rows, w->split == VP_BLOCK_SPLIT_COLUMNS ? inputs / c->tp : inputs,
                          w->split == VP_BLOCK_SPLIT_ROWS ? out / c->tp : out, in->arg[2] >= 0, false, TP_PLAIN, o);
            o->model_flops += 2 * c->rows * out * inputs;
            if (w->split == VP_BLOCK_SPLIT_COLUMNS) o->tp_bytes += c->rows * out * c->elem;
            continue;
        }
        double width = (double)in->out_width / (in->out_split ? c->tp : 1);
        /* F.rotary: transformers' apply_rotary_pos_emb, eager 10 passes
         * (cost_attention); any other primitive one kernel */
        /* read in its operand's size, written in its own */
        double bytes = in->prim == VP_BP_ROTARY && c->eager ? 10 * c->elem : in_size + out_size;
        memory_pass(c, bytes * elementwise_rows * width, o);
    }
}

/* read, write, and a one-byte mask */
static void cost_dropout(const vp_op *op, const cost_ctx *c, op_cost *o) {
    if (field(op, "p") > 0 && c->train_dropout) memory_pass(c, c->norm_rows * c->hidden * (2 * c->elem + 1), o);
}

static void cost_token_embedding(const vp_op *op, const cost_ctx *c, op_cost *o) {
    double hidden = field(op, "hidden");
    memory_pass(c, c->rows * hidden * c->elem, o);
    /* Megatron's vocabulary-parallel embedding all-reduces its rows */
    if (c->tp > 1) o->tp_bytes += c->rows * hidden * c->elem;
}

static void cost_position_embedding(const vp_op *op, const cost_ctx *c, op_cost *o) {
    memory_pass(c, 3 * c->norm_rows * field(op, "hidden") * c->elem, o);
}

static void cost_lm_head(const vp_op *op, const cost_ctx *c, op_cost *o) {
    double vocab = field(op, "vocab"), hidden = field(op, "hidden");
    unsigned tp = (unsigned)c->tp;
    double local = (double)vp_padded_vocab((uint64_t)vocab, tp) / tp;
    project(c, c->rows, hidden, local, o);
    o->model_flops += 2 * c->rows * hidden * vocab;
}

/* The loss over this rank's share of the logits, as Megatron's
 * vocabulary-parallel cross-entropy runs it (core/tensor_parallel/
 * cross_entropy.py): forward an fp32 copy, the max, the shift, exp, sum and
 * division, the softmax kept for backward (~38 bytes an element); backward
 * softmax minus one-hot, times the incoming gradient, cast back (~22).
 * memory_pass counts forward bytes and backward twice as many: 20 a logit
 * stands for the ~60 in all. */
static void cost_cross_entropy(const vp_op *op, const cost_ctx *c, op_cost *o) {
    (void)op;
    memory_pass(c, c->rows * c->vocab / c->tp * 20, o);
}

/* containers: the residual add (or a parallel block's sum): two reads, a write */
static void cost_residual(const vp_op *op, const cost_ctx *c, op_cost *o) {
    (void)op;
    memory_pass(c, 3 * c->norm_rows * c->hidden * c->elem, o);
}

static void cost_classifier(const vp_op *op, const cost_ctx *c, op_cost *o) {
    project(c, c->batch, field(op, "hidden"), field(op, "labels"), o);
}

typedef void (*cost_fn)(const vp_op *op, const cost_ctx *c, op_cost *o);

/* One function per cost class, the class a kind declares (vp_op_kind's
 * `cost`); VP_COST_NONE costs nothing here. */
static const cost_fn costs[VP_COST_COUNT] = {
    [VP_COST_ATTENTION] = cost_attention,
    [VP_COST_MLP] = cost_mlp,
    [VP_COST_MOE] = cost_moe,
    [VP_COST_NORM] = cost_norm,
    [VP_COST_DROPOUT] = cost_dropout,
    [VP_COST_TOKEN_EMBEDDING] = cost_token_embedding,
    [VP_COST_POSITION_EMBEDDING] = cost_position_embedding,
    [VP_COST_LM_HEAD] = cost_lm_head,
    [VP_COST_CROSS_ENTROPY] = cost_cross_entropy,
    [VP_COST_CLASSIFIER] = cost_classifier,
    [VP_COST_RESIDUAL] = cost_residual,
    [VP_COST_BLOCK] = cost_block,
};

/* Walks ops, a container's children before its own cost; c->hidden
 * follows the residual stream's width for the kinds that do not carry it
 * (dropout, residual adds). */
static void cost_ops(const vp_op *ops, unsigned n, cost_ctx *c, op_cost *o) {
    for (unsigned i = 0; i < n; i++) {
        const vp_op *op = &ops[i];
        double h = field(op, "hidden");
        if (h > 0) c->hidden = h;
        if (op->kind->container) cost_ops(op->children, op->n_children, c, o);
        cost_fn cost = costs[op->kind->cost];
        if (cost) cost(op, c, o);
    }
}

static double section_vocab(const vp_section *s) {
    for (unsigned i = 0; i < s->n_ops; i++)
        if (s->ops[i].kind->cost == VP_COST_LM_HEAD || s->ops[i].kind->cost == VP_COST_TOKEN_EMBEDDING)
            return field(&s->ops[i], "vocab");
    return 0;
}

static op_cost cost_section(const vp_model *m, vp_section_id id, const cost_ctx *c) {
    op_cost o = {0};
    const vp_section *s = &m->section[id];
    cost_ctx local = *c;
    local.vocab = section_vocab(s);
    cost_ops(s->ops, s->n_ops, &local, &o);
    return o;
}

static void add_cost(op_cost *a, const op_cost *b, double times) {
    a->matmul_s += times * b->matmul_s;
    a->attention_s += times * b->attention_s;
    a->attention_bwd_s += times * b->attention_bwd_s;
    a->memory_s += times * b->memory_s;
    a->backward_extra_s += times * b->backward_extra_s;
    a->dequant_s += times * b->dequant_s;
    a->cast_s += times * b->cast_s;
    a->cast_bwd_s += times * b->cast_bwd_s;
    a->sac_recompute_s += times * b->sac_recompute_s;
    a->sac_recompute_flops += times * b->sac_recompute_flops;
    a->model_flops += times * b->model_flops;
    a->attention_flops += times * b->attention_flops;
    a->tp_bytes += times * b->tp_bytes;
    a->a2a_bytes += times * b->a2a_bytes;
    a->cp_bytes += times * b->cp_bytes;
}

static double elem_bytes(const vp_recipe *r) { return vp_precision_get(r->precision)->compute == VP_FP32 ? 4.0 : 2.0; }

/* Megatron's gradient_accumulation_fusion into fp32 main_grad buffers */
static bool fp32_main_grads(const vp_recipe *r) {
    return vp_framework_of(r)->main_grad_buffers && vp_precision_is_mixed(r->precision) && r->grads_in_fp32;
}

static cost_ctx make_ctx(const vp_recipe *r, const vp_time_hw *hw, bool split) {
    unsigned tp = split && r->tp ? r->tp : 1, cp = split && r->cp ? r->cp : 1;
    cost_ctx c = {.recipe = r, .hw = hw};
    c.tp = tp;
    c.batch = (double)r->micro_batch;
    c.seq = (double)r->seq_len / cp;
    c.seq_kv = (double)r->seq_len; /* ring attention: every key, a share per step */
    c.source_seq = (double)r->seq_len;
    c.rows = c.batch * c.seq;
    c.norm_rows = r->sequence_parallel && split ? c.rows / tp : c.rows;
    c.elem = elem_bytes(r);
    c.ep = split && r->ep ? r->ep : 1;
    c.etp = split ? (r->etp ? r->etp : tp) : 1;
    c.flash = r->attention != VP_ATTN_EAGER;
    c.train_dropout = r->training;
    /* bitsandbytes: 4-bit codes (half a byte) or int8 read, 16 bits written */
    if (vp_finetune_method_of(r)->quantizes_base) c.dequant_bytes = (r->quant == VP_QUANT_INT8 ? 1.0 : 0.5) + 2.0;
    c.main_grad_bytes = fp32_main_grads(r) ? 8.0 : 0.0;
    c.op_selective = r->checkpoint_ops;
    if (c.op_selective) vp_sac_torchtitan(&c.sac);
    c.eager = r->kernels == VP_KERNELS_EAGER ||
              (r->kernels == VP_KERNELS_AUTO && r->framework != VP_FRAMEWORK_MEGATRON && !r->compile);
    c.float8 = vp_precision_get(r->precision)->fp8_dynamic;
    c.float8_weights = c.float8 && r->fp8_all_gather;
    c.fp8_recipe = r->fp8_recipe;
    return c;
}

/* ---- the step ---- */

/* The residual stream's width: the first op of a layer that names one. */
static double model_hidden(const vp_model *m) {
    const vp_section *s = &m->section[VP_SECTION_LAYER];
    for (unsigned i = 0; i < s->n_ops; i++) {
        const vp_op *op = &s->ops[i];
        double h = field(op, "hidden");
        for (unsigned k = 0; h <= 0 && k < op->n_children; k++) h = field(&op->children[k], "hidden");
        if (h > 0) return h;
    }
    return 0;
}

/* The bus bandwidth of a group of n ranks whose neighbours are `stride`
 * ranks apart (Megatron's order: tp, cp, dp, pp): inside a node NVLink;
 * across nodes every member's NIC in the node carries its share. */
static double group_busbw(const vp_time_hw *hw, unsigned n, unsigned stride) {
    unsigned node = hw->gpus_per_node ? hw->gpus_per_node : 8;
    if ((double)n * stride <= node) return hw->link_busbw;
    double per_node = stride >= node ? 1 : (double)node / stride;
    double bw = per_node * hw->network_bw;
    return bw < hw->link_busbw ? bw : hw->link_busbw;
}

typedef struct {
    op_cost fwd;              /* one micro-batch's forward through the stage */
    double recompute_s;       /* the forward again under checkpointing */
    double recompute_tp_bytes;
} stage_cost;

static bool frozen_base(const vp_recipe *r) { return vp_finetune_method_of(r)->frozen_base; }

/* An encoder-decoder's decoder runs on the labels' target_len tokens (T5):
 * its layers, the bridge (its embeddings), the head and the loss. */
static cost_ctx decoder_ctx(const vp_model *m, const cost_ctx *c) {
    cost_ctx d = *c;
    const vp_recipe *r = c->recipe;
    if (!vp_model_encoder_decoder(m) || !r->target_len) return d;
    double cp = r->cp ? r->cp : 1;
    d.seq = (double)r->target_len / cp;
    d.seq_kv = (double)r->target_len;
    d.rows = d.batch * d.seq;
    d.norm_rows = c->norm_rows * d.rows / c->rows;
    return d;
}

static stage_cost cost_stage(const vp_model *m, const vp_recipe *r, const vp_rank_estimate *e, bool first, bool last,
                             const cost_ctx *c) {
    stage_cost s = {0};
    op_cost layers = {0};
    unsigned end = e->first_layer + e->layers;
    unsigned firsts = 0;
    for (unsigned l = e->first_layer; l < end; l++)
        if (l < m->first_layers) firsts++;
    cost_ctx dec = decoder_ctx(m, c);
    op_cost regular = cost_section(m, VP_SECTION_LAYER, &dec);
    add_cost(&layers, &regular, e->layers - firsts);
    if (firsts) {
        op_cost f = cost_section(m, VP_SECTION_FIRST_LAYER, c);
        add_cost(&layers, &f, firsts);
    }
    s.fwd = layers;
    if (first) {
        op_cost o = cost_section(m, VP_SECTION_EMBED, c);
        add_cost(&s.fwd, &o, 1);
    }
    if (vp_model_encoder_decoder(m) && m->first_layers >= e->first_layer && m->first_layers < end) {
        op_cost o = cost_section(m, VP_SECTION_BRIDGE, &dec);
        add_cost(&s.fwd, &o, 1);
    }
    if (last) {
        op_cost o = cost_section(m, VP_SECTION_FINAL, &dec);
        add_cost(&s.fwd, &o, 1);
    }
    /* recomputation: full and every-K rerun the layers' forward (Megatron's
     * full recompute, torch.utils.checkpoint); selective reruns the
     * attention core (Korthikanti et al. 2022, section 5) */
    if (r->checkpoint_ops) {
        /* op-selective reruns what torchtitan's policy does not save
         * (sac_op); of the tensor-parallel collectives the reduce-scatter
         * is on its list, sequence parallelism's all-gather and a plain
         * all-reduce are not */
        /* fp8-torchao's casts are not on it (their amax is, no traffic) */
        s.recompute_s = layers.sac_recompute_s + layers.cast_s;
        s.recompute_tp_bytes = (r->sequence_parallel ? 0.5 : 1.0) * layers.tp_bytes;
    } else if (r->checkpoint_every > 0) {
        /* layers-K reruns one layer in K */
        double share = r->checkpoint_layers ? 1.0 / r->checkpoint_layers : 1.0;
        s.recompute_s = share * (layers.matmul_s + layers.attention_s + layers.memory_s + layers.dequant_s +
                                 layers.cast_s);
        s.recompute_tp_bytes = share * layers.tp_bytes;
    } else if (r->selective) {
        s.recompute_s = layers.attention_s;
    }
    return s;
}

/* Seconds of one micro-batch's forward, backward and recomputation on a
 * stage, compute only. */
static double stage_compute(const stage_cost *s, const vp_recipe *r) {
    double weight_grads = frozen_base(r) ? 1.0 : 2.0; /* input grads, plus weight grads when trained */
    const op_cost *f = &s->fwd;
    double extra = frozen_base(r) ? 0 : f->backward_extra_s;
    return f->matmul_s * (1 + weight_grads) + f->attention_s + f->attention_bwd_s + 3 * f->memory_s + extra +
           2 * f->dequant_s + s->recompute_s + f->cast_s + f->cast_bwd_s;
}

/* The slowest stage's micro-batch: its compute, its forward and backward
 * alone (the windows that hide data-parallel traffic) and the
 * communication it cannot hide. */
typedef struct {
    double compute, forward, backward, comm;
} pace;

/* Communication of one micro-batch through a stage that compute does not
 * hide. */
static double stage_comm(const vp_model *model, const vp_recipe *r, const vp_time_hw *hw, const cost_ctx *c,
                         const stage_cost *s) {
    unsigned tp = (unsigned)c->tp, cp = r->cp ? r->cp : 1, dp = r->dp ? r->dp : 1, pp = r->pp ? r->pp : 1;
    /* tensor-parallel collectives: an all-reduce per block in forward and
     * one in backward (Megatron; reduce-scatter + all-gather under sequence
     * parallelism, the same bytes), again in a recomputed forward. The
     * forward's are on the critical path (Narayanan et al. 2021, section
     * 3.3); the backward's overlap the weight-gradient GEMM (Korthikanti et
     * al. 2022, section 6.2); Transformer Engine's --tp-comm-overlap hides
     * the forward's behind the GEMMs too (overlap_comm), and so does
     * torchtitan's async TP (Inductor's micro-pipeline TP: each all-gather
     * and reduce-scatter runs shard by shard beside the matmul it feeds or
     * drains, torch/distributed/_symmetric_memory's
     * _pipelined_all_gather_and_consume and _pipelined_produce_and_all2all). */
    double tp_busbw = group_busbw(hw, tp, 1);
    double tp_fwd = vp_time_allreduce(s->fwd.tp_bytes + s->recompute_tp_bytes, tp, tp_busbw);
    double tp_bwd = vp_time_allreduce(s->fwd.tp_bytes, tp, tp_busbw);
    double weight_grads = frozen_base(r) ? 0 : s->fwd.matmul_s;
    tp_bwd = tp_bwd > weight_grads ? tp_bwd - weight_grads : 0;
    if (r->overlap_comm > 0 || r->async_tp) {
        double hidden_by = s->fwd.matmul_s * (s->recompute_tp_bytes > 0 ? 2 : 1);
        tp_fwd = tp_fwd > hidden_by ? tp_fwd - hidden_by : 0;
    }
    /* MoE: dispatch and combine, forward and backward, over the ep group */
    unsigned ep = (unsigned)c->ep;
    double a2a = 2 * vp_time_alltoall(s->fwd.a2a_bytes, ep, group_busbw(hw, ep, tp));
    /* ring attention: each step passes a key-value chunk on (twice as much
     * in backward: the chunks and their gradients), beside the core */
    double ring = 3 * s->fwd.cp_bytes / group_busbw(hw, cp, tp);
    double core = s->fwd.attention_s + s->fwd.attention_bwd_s;
    ring = ring > core ? ring - core : 0;
    /* pipeline sends: the boundary activations forward, their gradient
     * back, split over tp (Narayanan et al. 2021, section 4.1) */
    double p2p = 0;
    if (pp > 1) {
        double bytes = c->rows * model_hidden(model) * c->elem / tp;
        double bw = (double)tp * cp * dp >= hw->gpus_per_node ? hw->network_bw : hw->link_busbw;
        p2p = 2 * bytes / bw;
    }
    return tp_fwd + tp_bwd + a2a + ring + p2p;
}

/* The slowest stage sets the pace (1F1B and GPipe alike). */
static pace slowest_stage(const vp_model *model, const vp_recipe *r, const vp_time_hw *hw, const vp_estimate *est,
                          const cost_ctx *c) {
    pace slowest = {0};
    for (unsigned i = 0; i < est->n_ranks; i++) {
        stage_cost s = cost_stage(model, r, &est->ranks[i], i == 0, i == vp_pp_head_rank(r), c);
        pace p = {.compute = stage_compute(&s, r), .comm = stage_comm(model, r, hw, c, &s)};
        p.forward = s.fwd.matmul_s + s.fwd.attention_s + s.fwd.memory_s + s.fwd.dequant_s + s.fwd.cast_s;
        p.backward = p.compute - p.forward;
        if (p.compute + p.comm > slowest.compute + slowest.comm) slowest = p;
    }
    return slowest;
}

/* Trainable parameters on one rank before data-parallel sharding. */
static double rank_trainable(const vp_recipe *r, const vp_rank_estimate *w) {
    unsigned tp = r->tp ? r->tp : 1, pp = r->pp ? r->pp : 1;
    return (double)w->step.trainable_params / ((double)tp * pp);
}

/* The optimizer step on the GPU: it and gradient clipping stream the rank's
 * states through HBM: gradients read twice (norm, update), master weights
 * and states read and written, the trained parameters written from the
 * master copy, or read and written where they are what the update steps
 * (no master: fp32 or pure 16-bit weights, FSDP's fp32 shards); a frozen
 * base, LoRA's or QLoRA's, is never touched (its share of the rank's
 * parameter bytes by count). Without an optimizer (optimizer = none) there
 * is no step. */
static double gradient_bytes(const vp_recipe *r);

static double optimizer_time(const vp_recipe *r, const vp_time_hw *hw, const vp_rank_estimate *w) {
    if (r->offload_optimizer != VP_OFFLOAD_NONE || !vp_optimizer_at(r->optimizer)->steps) return 0;
    const vp_step_result *s = &w->step;
    /* stepped in backward (optimizer_in_backward), every gradient is read
     * once by its own update and none is kept: no clipping norm */
    double grads = r->optimizer_in_backward ? rank_trainable(r, w) * gradient_bytes(r) : 2.0 * s->grads_bytes;
    double written = s->params_bytes;
    if (s->params && s->trainable_params < s->params) written *= (double)s->trainable_params / (double)s->params;
    if (!s->master_bytes) written *= 2.0; /* read too: the update's own operand */
    double bytes = grads + written + 2.0 * (s->master_bytes + s->optimizer_bytes);
    return bytes / hw->memory_bw;
}

/* Host and NVMe traffic: ZeRO-Offload's gradients down and parameters up
 * over PCIe and its CPU Adam, which streams gradients, master weights and
 * two states (16 bytes read, 12 written a parameter); ZeRO-Infinity's
 * states through NVMe; offloaded parameters fetched for every micro-batch's
 * forward and backward; activations saved on the host and brought back. */
static double offload_time(const vp_recipe *r, const vp_time_hw *hw, const vp_rank_estimate *w, unsigned m,
                           double elem) {
    unsigned dp = r->dp ? r->dp : 1;
    double n = rank_trainable(r, w), s = 0;
    if (r->offload_optimizer != VP_OFFLOAD_NONE) {
        double shard = n / (r->zero >= 1 ? dp : 1);
        s += shard * (2 + 2) / hw->pcie_bw + shard * 28 / hw->host_bw;
        if (r->offload_optimizer == VP_OFFLOAD_NVME) s += shard * 12 * 2 / hw->nvme_bw;
    }
    if (r->offload_params != VP_OFFLOAD_NONE) s += m * 2 * n * elem / dp / hw->pcie_bw;
    if (r->offload_activations) s += m * 2.0 * w->step.activations_bytes / hw->pcie_bw;
    return s;
}

/* Bytes a gradient is reduced in: Megatron's fp32 main_grad, an fp32
 * model's (or autocast's fp32 weights'), else 16 bits. */
static double gradient_bytes(const vp_recipe *r) {
    if (fp32_main_grads(r)) return 4;
    return vp_precision_get(r->precision)->grads == VP_FP32 ? 4 : 2;
}

/* Data-parallel traffic not hidden behind compute. What hides it: DDP and
 * FSDP overlap it with backward by design (bucketed hooks); DeepSpeed with
 * overlap_comm (on for ZeRO-3); Megatron with --overlap-grad-reduce and
 * --overlap-param-gather (overlap_comm here; off by default). The
 * gradients' reduction hides behind the last micro-batch's backward, a
 * sharded optimizer's parameter all-gather behind the first forward. */
static double data_parallel_time(const vp_model *model, const vp_recipe *r, const vp_time_hw *hw,
                                 const vp_rank_estimate *w, const pace *p, unsigned m, double elem) {
    unsigned tp = r->tp ? r->tp : 1, cp = r->cp ? r->cp : 1, dp = r->dp ? r->dp : 1, pp = r->pp ? r->pp : 1;
    double n = rank_trainable(r, w), grads = n * gradient_bytes(r), params = n * elem;
    vp_dp_traffic traffic;
    vp_framework_of(r)->dp_traffic(r, &traffic);
    bool gather_params = traffic.gathers_params, sharded_states = traffic.shards_states, overlaps = traffic.overlaps;
    double exposed = 0;
    if (gather_params) {
        unsigned shard = vp_framework_shard_group(r);
        /* ZeRO-3 / FSDP: every micro-batch gathers the weights for its
         * forward, again for a recomputed forward and for its backward, and
         * reduce-scatters its gradients (DeepSpeed reduces every
         * micro-batch), prefetched behind compute. Across nodes these
         * gathers reach one NIC's bandwidth per GPU, not the node's
         * aggregate: Narayanan et al. 2021, Table 2, measure ZeRO-3 steps of
         * 66.75 s on both 768 and 1536 GPUs at one micro-batch each (GPT-3
         * 175B), as an exchange bound by each GPU's own link (every rank
         * moves the whole model) predicts and a node-aggregated ring does
         * not. */
        double bw = (double)shard * tp * cp <= hw->gpus_per_node ? hw->link_busbw : hw->network_bw;
        double gathers = 2 + (r->checkpoint_every > 0 ? 1 : 0);
        double per_mb = gathers * vp_time_allgather(params, shard, bw) + vp_time_allgather(grads, shard, bw);
        if (shard < dp) per_mb += vp_time_allreduce(grads / shard, dp / shard, hw->network_bw);
        exposed = m * (overlaps ? (per_mb > p->compute ? per_mb - p->compute : 0) : per_mb);
    } else {
        double busbw = group_busbw(hw, dp, tp * cp);
        double reduce = sharded_states ? vp_time_allgather(grads, dp, busbw) : vp_time_allreduce(grads, dp, busbw);
        double gather = sharded_states ? vp_time_allgather(params, dp, busbw) : 0;
        if (overlaps) {
            reduce = reduce > p->backward ? reduce - p->backward : 0;
            gather = gather > p->forward ? gather - p->forward : 0;
        }
        exposed = reduce + gather;
    }
    /* a head tied to the embeddings across pipeline stages: their gradients
     * are all-reduced between the first and the last stage */
    const vp_op *tied = model->facts.tied_head;
    if (pp > 1 && tied) {
        double bytes = field(tied, "vocab") * field(tied, "hidden") / tp * gradient_bytes(r);
        exposed += vp_time_allreduce(bytes, 2, hw->network_bw);
    }
    return exposed;
}

/* Model and hardware FLOPs of one step over every rank (see steptime.h). */
static void step_flops(const vp_model *model, const vp_recipe *r, const vp_time_hw *hw, unsigned m,
                       vp_step_time *t) {
    cost_ctx whole = make_ctx(r, hw, false), dec = decoder_ctx(model, &whole);
    op_cost all = {0};
    for (unsigned id = 0; id < VP_SECTION_COUNT; id++) {
        if (id == VP_SECTION_LAYER || id == VP_SECTION_FIRST_LAYER) continue;
        op_cost o = cost_section(model, (vp_section_id)id, id == VP_SECTION_EMBED ? &whole : &dec);
        add_cost(&all, &o, 1);
    }
    double regular = model->layers - model->first_layers, firsts = model->first_layers;
    op_cost layer = cost_section(model, VP_SECTION_LAYER, &dec);
    op_cost first = cost_section(model, VP_SECTION_FIRST_LAYER, &whole);
    add_cost(&all, &layer, regular);
    add_cost(&all, &first, firsts);
    double sequences = (double)m * (r->dp ? r->dp : 1); /* micro-batches of every data-parallel rank */
    /* a frozen base computes no weight gradients: its model FLOPs are the
     * forward and the input gradients (NeMo's LoRA rows count them so) */
    double passes = frozen_base(r) ? 2.0 : 3.0;
    double recompute = 0;
    if (r->checkpoint_ops) recompute = layer.sac_recompute_flops * regular + first.sac_recompute_flops * firsts;
    else if (r->checkpoint_every > 0) {
        double share = r->checkpoint_layers ? 1.0 / r->checkpoint_layers : 1.0; /* layers-K: one layer in K */
        recompute = share * (layer.model_flops * regular + first.model_flops * firsts);
    }
    else if (r->selective) recompute = layer.attention_flops * regular + first.attention_flops * firsts;
    t->model_flops_per_step = passes * all.model_flops * sequences;
    t->hardware_flops_per_step = (passes * all.model_flops + recompute) * sequences;
}

vp_step_time vp_step_time_run(const vp_model *model, const vp_recipe *r, const vp_gpu *gpu, const vp_estimate *est) {
    vp_step_time t = {0};
    vp_time_hw hw;
    if (!est || !est->n_ranks || !vp_time_hw_from_gpu(gpu, r, &hw)) return t;
    unsigned tp = r->tp ? r->tp : 1, cp = r->cp ? r->cp : 1, dp = r->dp ? r->dp : 1, pp = r->pp ? r->pp : 1;
    unsigned m = vp_recipe_microbatches(r);
    if (!m) m = 1;
    cost_ctx c = make_ctx(r, &hw, true);
    pace p = slowest_stage(model, r, &hw, est, &c);
    const vp_rank_estimate *w = &est->ranks[est->worst];

    t.compute_s = m * p.compute + optimizer_time(r, &hw, w);
    t.exposed_comm_s = m * p.comm + data_parallel_time(model, r, &hw, w, &p, m, c.elem);
    t.bubble_s = vp_time_bubble_microbatches(vp_pp_kind(r), pp, vp_pp_chunks(r)) * (p.compute + p.comm);
    t.offload_s = offload_time(r, &hw, w, m, c.elem);
    t.step_s = t.compute_s + t.exposed_comm_s + t.bubble_s + t.offload_s;

    step_flops(model, r, &hw, m, &t);
    t.gpus = dp * tp * pp * cp;
    t.tokens_per_step = (double)r->micro_batch * r->seq_len * m * dp;
    t.tokens_per_s = t.tokens_per_step / t.step_s;
    t.tokens_per_s_per_gpu = t.tokens_per_s / t.gpus;
    /* utilization against the dense 16-bit peak (FP8 recipes too, as NVIDIA
     * and Megatron count it), the fp32 peak for fp32 recipes */
    double peak = (vp_precision_get(r->precision)->fp8_gemms ? hw.attention_flops : hw.matmul_flops) * t.gpus * t.step_s;
    t.mfu = t.model_flops_per_step / peak;
    t.hfu = t.hardware_flops_per_step / peak;
    t.valid = true;
    return t;
}
