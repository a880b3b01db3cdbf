/* lora.c — LoRA's adapters at work (Hugging Face PEFT, peft/tuners/lora/
 * layer.py): the adapters of each targeted weight, and the activations
 * lora.Linear.forward adds beside the frozen layer. */
#include "lora.h"

#include "ops.h"
#include "op_context.h"

/* lora_B(lora_A(dropout(x))) * scaling */
static vp_t adapters_output(vp_step *step, const vp_lora_adapter *adapter, vp_t x) {
    vp_sim *sim = &step->sim;
    vp_t dropped = vp_train_dropout(step, x, step->recipe->lora_dropout, "lora.dropout");
    vp_t down = vp_project(step, dropped, adapter->a, 0, step->recipe->lora_rank, "lora.A");
    vp_drop(sim, dropped);
    vp_t up = vp_project(step, down, adapter->b, 0, adapter->out_features, "lora.B");
    vp_drop(sim, down);
    vp_t scaled = vp_scale(sim, up, "lora.scaling");
    vp_drop(sim, up);
    return scaled;
}

/* peft/tuners/lora/bnb.py, Linear4bit and Linear8bitLt.forward after the
 * quantized base layer: a 4-bit result is cloned first (defensively, for
 * backprop through views); without autocast x is cast to the adapters'
 * dtype and their output back to the result's before the add, so the sum
 * keeps the result's dtype (under autocast the adapters run in it). DoRA
 * runs as over a 16-bit weight, on the clone and the cast x, with the
 * weight dequantized for its norm (dora.c). */
static vp_t bnb_forward(vp_step *step, const vp_lora_adapter *adapter, vp_t x, vp_t bias, vp_t result,
                        const char *label) {
    vp_sim *sim = &step->sim;
    if (step->recipe->quant != VP_QUANT_INT8) {
        vp_t clone = vp_copy(sim, result, "lora.clone");
        vp_drop(sim, result);
        result = clone;
    }
    bool convert = !step->autocast;
    vp_t input = convert ? vp_to(sim, x, (vp_dtype)vp_at(sim, adapter->a)->dtype, "lora.cast_input")
                         : (vp_hold(sim, x), x);
    vp_dtype expected = (vp_dtype)vp_at(sim, result)->dtype;
    vp_t sum;
    if (adapter->magnitude) { /* result = variant.forward(...), then result.to(expected_dtype) */
        vp_t dora = vp_dora_forward(step, adapter, input, bias, result);
        sum = convert ? vp_to(sim, dora, expected, "lora.cast_output") : (vp_hold(sim, dora), dora);
        vp_drop(sim, dora);
    } else {
        vp_t output = adapters_output(step, adapter, input);
        if (convert) {
            vp_t cast = vp_to(sim, output, expected, "lora.cast_output");
            vp_drop(sim, output);
            output = cast;
        }
        sum = vp_add(sim, result, output, vp_at(sim, result)->numel, label);
        vp_drop(sim, result);
        vp_drop(sim, output); /* a local until the forward returns, as is x */
    }
    vp_drop(sim, input);
    return sum;
}

vp_t vp_lora_forward(vp_step *step, vp_t x, vp_t weight, vp_t bias, vp_t result, const char *label) {
    const vp_lora_adapter *adapter = vp_step_adapter(step, weight);
    if (!adapter) return result;
    vp_sim *sim = &step->sim;
    if (vp_at(sim, weight)->quantized) return bnb_forward(step, adapter, x, bias, result, label);
    vp_dtype result_dtype = (vp_dtype)vp_at(sim, result)->dtype;
    /* x = self._cast_input_dtype(x, lora_A.weight.dtype) */
    vp_t cast = vp_to(sim, x, (vp_dtype)vp_at(sim, adapter->a)->dtype, "lora.cast_input");
    if (adapter->magnitude) {
        vp_t sum = vp_dora_forward(step, adapter, cast, bias, result);
        vp_t out = vp_to(sim, sum, result_dtype, "lora.cast_output");
        vp_drop(sim, sum);
        vp_drop(sim, cast); /* the forward's x, until it returns */
        return out;
    }
    vp_t scaled = adapters_output(step, adapter, cast);
    vp_t sum = vp_add(sim, result, scaled, vp_at(sim, result)->numel, label);
    vp_drop(sim, scaled);
    vp_drop(sim, result);
    vp_drop(sim, cast);
    /* result = result.to(torch_result_dtype) */
    vp_t out = vp_to(sim, sum, result_dtype, "lora.cast_output");
    vp_drop(sim, sum);
    return out;
}
