/* dora.c — DoRA (Liu et al. 2024, arXiv:2402.09353) as Hugging Face PEFT
 * 0.15-0.17 trains it: DoraLinearVariant.forward and
 * DoraLinearLayer.forward (peft/tuners/lora/variants.py, dora.py).
 *
 * Each forward of an adapted linear makes B @ A whole by running the
 * adapters over an identity matrix (torch.eye(in) in x's dtype), adds it,
 * scaled, to the weight (cast to x's dtype: a copy of a 16-bit weight when
 * the adapters are fp32) and takes the column norms of the sum, detached:
 * weight-sized temporaries that live until the layer returns. The
 * magnitude over those norms then scales both the base output and the
 * adapters' (mag_norm_scale), and autograd keeps both outputs for the
 * magnitude's gradient: two [tokens x out] tensors per adapted linear
 * beyond LoRA's. */
#include "lora.h"

#include "ops.h"
#include "step.h"

/* x_eye = torch.eye(in, dtype=x.dtype); lora_weight = lora_B(lora_A(x_eye)).T */
static vp_t whole_update(vp_step *step, const vp_lora_adapter *ad, uint64_t in, vp_dtype dtype, vp_t *eye) {
    vp_sim *sim = &step->sim;
    *eye = vp_new(sim, vp_numel(sim, in, in), dtype, "dora.eye");
    vp_t down = vp_project(step, *eye, ad->a, 0, step->recipe->lora_rank, "dora.eye_A");
    vp_t whole = vp_project(step, down, ad->b, 0, ad->out_features, "dora.lora_weight");
    vp_drop(sim, down);
    return whole;
}

/* get_weight_norm(weight, lora_weight.detach(), scaling): the row norms of
 * weight + scaling * lora_weight, in fp32 under autocast
 * (linalg_vector_norm is on its fp32 list), cast to the sum's dtype; the
 * caller detaches them. The sum and its parts go when it returns. */
static vp_t weight_norm(vp_step *step, vp_t weight, vp_t whole, uint64_t out) {
    vp_sim *sim = &step->sim;
    uint64_t n = vp_at(sim, weight)->numel;
    vp_t detached = vp_view(sim, whole, n, "dora.lora_weight");
    vp_t scaled = vp_scale(sim, detached, "dora.scaled_lora_weight");
    vp_drop(sim, detached);
    vp_t sum = vp_add(sim, weight, scaled, n, "dora.weight_sum");
    vp_drop(sim, scaled);
    vp_t up = vp_autocast_fp32(step, sum, "dora.norm_cast");
    vp_t norm = vp_reduce(sim, up, out, "dora.weight_norm");
    vp_drop(sim, up);
    vp_t cast = vp_to(sim, norm, (vp_dtype)vp_at(sim, sum)->dtype, "dora.weight_norm");
    vp_drop(sim, norm);
    vp_drop(sim, sum);
    vp_t detached_norm = vp_view(sim, cast, out, "dora.weight_norm"); /* weight_norm.detach() */
    vp_drop(sim, cast);
    return detached_norm;
}

/* weight = dequantize_module_weight(base_layer); weight = weight.to(x.dtype)
 * (peft/utils/integrations.py). A 16-bit weight is itself; a 4-bit one is
 * dequantized whole (bitsandbytes' dequantize_4bit, in the dtype it was
 * loaded in: QLoRA's scripts load in the compute dtype, which this takes;
 * its double-quantized block scales in fp32 first, as for the product);
 * an int8 one by int8_vectorwise_dequant, A * SCB.view(-1, 1) / 127: two
 * fp32 products, the first gone once the second is made. */
static vp_t dense_weight(vp_step *step, vp_t weight, vp_dtype x_dtype) {
    vp_sim *sim = &step->sim;
    if (!vp_at(sim, weight)->quantized) return vp_to(sim, weight, x_dtype, "dora.weight");
    uint64_t numel = vp_at(sim, weight)->numel;
    vp_t dense;
    if (step->recipe->quant == VP_QUANT_INT8) {
        vp_t scaled = vp_new(sim, numel, VP_FP32, "dora.dequantize");
        dense = vp_new(sim, numel, VP_FP32, "dora.dequantize");
        vp_drop(sim, scaled);
    } else {
        uint64_t absmax_numel = vp_dequant_absmax_numel(step->recipe, numel);
        vp_t absmax = absmax_numel ? vp_new(sim, absmax_numel, VP_FP32, "dora.dequantize.absmax") : 0;
        dense = vp_new(sim, numel, (vp_dtype)vp_at(sim, weight)->dtype, "dora.dequantize");
        vp_drop(sim, absmax);
    }
    vp_t cast = vp_to(sim, dense, x_dtype, "dora.weight");
    vp_drop(sim, dense);
    return cast;
}

/* The base output without its bias (base_result - bias, in the promoted
 * dtype), or F.linear(x, weight) on the dropped-out input; `conv1d`: the
 * base layer is transformers' Conv1D (the weight a cast of it says not). */
static vp_t base_output(vp_step *step, vp_t base_result, vp_t bias, vp_t x, vp_t weight, uint64_t out, bool conv1d) {
    vp_sim *sim = &step->sim;
    if (base_result) {
        if (!bias) {
            vp_hold(sim, base_result);
            return base_result;
        }
        vp_dtype dt = vp_dtype_promote((vp_dtype)vp_at(sim, base_result)->dtype, (vp_dtype)vp_at(sim, bias)->dtype);
        return vp_shift(sim, base_result, dt, vp_at(sim, base_result)->numel, "dora.base_minus_bias");
    }
    uint64_t in = vp_at(sim, weight)->numel / out;
    vp_t xa = vp_autocast_low(step, x, "dora.base");
    vp_t wa = vp_autocast_low(step, weight, "dora.base");
    /* PEFT's F.linear(x, transpose(weight, fan_in_fan_out)): a Conv1D's
     * weight transposed twice, so taken as it is */
    vp_t y = vp_linear(sim, xa, wa, 0, vp_at(sim, x)->numel / in, out, conv1d, "dora.base");
    vp_drop(sim, xa);
    vp_drop(sim, wa);
    return y;
}

vp_t vp_dora_forward(vp_step *step, const vp_lora_adapter *ad, vp_t x, vp_t bias, vp_t result) {
    vp_sim *sim = &step->sim;
    const vp_recipe *r = step->recipe;
    uint64_t out = ad->out_features, in = vp_at(sim, ad->weight)->numel / out;
    vp_dtype x_dtype = (vp_dtype)vp_at(sim, x)->dtype;
    /* DoraLinearVariant.forward: the base output is reused unless dropout
     * makes the adapters' input another tensor */
    bool dropout = r->training && r->lora_dropout > 0;
    vp_t input = dropout ? vp_train_dropout(step, x, r->lora_dropout, "lora.dropout") : (vp_hold(sim, x), x);
    vp_t base_result = dropout ? 0 : result;

    uint32_t graph = sim->n_nodes;
    vp_t eye;
    vp_t whole = whole_update(step, ad, in, x_dtype, &eye);
    uint32_t graph_end = sim->n_nodes;
    vp_t weight = dense_weight(step, ad->weight, x_dtype);
    vp_t norm = weight_norm(step, weight, whole, out);
    /* mag_norm_scale = (magnitude / weight_norm).view(1, -1) */
    vp_t mag_norm_scale = vp_mul(sim, ad->magnitude, norm, out, "dora.mag_norm_scale");
    /* lora_result = lora_B(lora_A(x)) */
    vp_t down = vp_project(step, input, ad->a, 0, r->lora_rank, "lora.A");
    vp_t lora_result = vp_project(step, down, ad->b, 0, out, "lora.B");
    vp_drop(sim, down);
    vp_t base = base_output(step, base_result, bias, input, weight, out, vp_at(sim, ad->weight)->conv1d);
    /* (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scaling */
    uint64_t n = vp_at(sim, base)->numel;
    vp_t shifted = vp_shift(sim, mag_norm_scale, (vp_dtype)vp_at(sim, mag_norm_scale)->dtype, out, "dora.mag_minus_one");
    vp_t scaled_base = vp_mul(sim, shifted, base, n, "dora.scaled_base");
    vp_drop(sim, shifted);
    vp_t scaled_lora = vp_mul(sim, mag_norm_scale, lora_result, n, "dora.scaled_lora");
    vp_t times = vp_scale(sim, scaled_lora, "dora.scaling");
    vp_drop(sim, scaled_lora);
    vp_t dora = vp_add(sim, scaled_base, times, n, "dora.result");
    vp_drop(sim, scaled_base);
    vp_drop(sim, times);
    /* DoraLinearLayer.forward returns: its locals go, and with lora_weight
     * the graph that made it (nothing differentiates through it) */
    vp_t locals[] = {eye, whole, weight, norm, mag_norm_scale, lora_result, base};
    for (unsigned i = 0; i < sizeof locals / sizeof *locals; i++) vp_drop(sim, locals[i]);
    vp_drop_dead_nodes(sim, graph, graph_end);
    /* result = result + ...: the variant's x and base_result go when it returns */
    vp_t sum = vp_add(sim, result, dora, vp_at(sim, result)->numel, "dora.add");
    vp_drop(sim, dora);
    vp_drop(sim, result);
    vp_drop(sim, input);
    return sum;
}
