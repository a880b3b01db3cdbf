"""torchao's Float8Linear (torchao 0.19, torchao/float8/float8_linear.py,
matmul_with_hp_or_float8_args) under its recipes (float8/config.py
from_recipe_name: tensorwise, rowwise, rowwise_with_gw_hp), as it runs
eagerly on the GPU. PyTorch 1.13 has no float8 dtypes: torch.uint8 stands
in for float8_e4m3fn and float8_e5m2 (one byte each), and
torch._scaled_mm's output is made as the empty tensor it allocates; every
cast, copy and scale is allocated as torchao allocates it.
"""
import torch

import checkpoint2x

E4M3_MAX, E5M2_MAX = 448.0, 57344.0  # torch.finfo(float8_e4m3fn / float8_e5m2).max


def to_float8(hp, fp8_max, dim=None, pow2=False):
    """hp_tensor_to_float8_dynamic: tensor_to_amax (torch.max(torch.abs(x)),
    or torch.amax along `dim` with keepdim for axiswise scaling),
    amax_to_scale (in float64, back to float32; rounded down to a power of 2
    by the rowwise recipes), then _ToFloat8ConstrFunc: x.to(float32) *
    scale, to_fp8_saturated's clamp and cast."""
    if dim is None:
        amax = torch.max(torch.abs(hp))
    else:
        amax = torch.amax(torch.abs(hp), dim=dim, keepdim=True)
    scale = (fp8_max / torch.clamp(amax.to(torch.float64), min=1e-12)).to(torch.float32)
    del amax
    if pow2:  # _round_scale_down_to_power_of_2
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    scaled = hp.to(torch.float32) * scale
    clamped = scaled.clamp(min=-fp8_max, max=fp8_max)
    data = clamped.to(torch.uint8)  # float8 stand-in
    del clamped, scaled
    return data, scale


def is_row_major(t):
    stride = t.stride()
    return stride[0] > stride[1] and stride[1] == 1


def scaled_mm(a, b, out_dtype, fast_accum):
    """float8_mm -> preprocess_addmm -> addmm_float8_unwrapped: a made
    row-major, b column-major (copies), a tensorwise scale beside a rowwise
    one repeated, the scales' reciprocals, their outer product for rowwise
    scales without fast accumulation, then torch._scaled_mm's output, scaled
    in place."""
    (a_data, a_scale), (b_data, b_scale) = a, b
    if not is_row_major(a_data):
        a_data = a_data.contiguous()
    if is_row_major(b_data):
        b_data = b_data.t().contiguous().t()
    if a_scale.dim() == 0 and b_scale.dim() > 0:
        a_scale = a_scale.repeat(a_data.shape[0]).reshape(-1, 1)
    elif a_scale.dim() > 0 and b_scale.dim() == 0:
        b_scale = b_scale.repeat(b_data.shape[1]).reshape(1, -1)
    a_inverse, b_inverse = a_scale.reciprocal(), b_scale.reciprocal()
    post = None
    if a_scale.dim() > 0 and not fast_accum:
        post = a_inverse * b_inverse
        a_inverse = a_inverse.new_ones(())
        b_inverse = a_inverse.new_ones(())
    output = torch.empty(a_data.shape[0], b_data.shape[1], dtype=out_dtype)
    if post is not None:
        output *= post
    return output


def transposed(pair):
    data, scale = pair
    return data.t(), scale.t() if scale.dim() > 1 else scale


class MatmulFloat8(torch.autograd.Function):
    """matmul_with_hp_or_float8_args: saves the high-precision input and
    weight; backward casts grad_output twice and the weight and input again
    (rowwise_with_gw_hp: grad_weight in high precision)."""

    @staticmethod
    def forward(ctx, input_hp, weight_hp_t, recipe):
        ctx.save_for_backward(input_hp, weight_hp_t)
        ctx.recipe = recipe
        rowwise = recipe != "tensorwise"
        input_fp8 = to_float8(input_hp, E4M3_MAX, -1 if rowwise else None, rowwise)
        weight_fp8_t = to_float8(weight_hp_t, E4M3_MAX, 0 if rowwise else None, rowwise)
        shape = input_hp.shape
        scale = input_fp8[1].reshape(-1, 1) if rowwise else input_fp8[1]
        reshaped = input_fp8[0].reshape(-1, shape[-1]), scale
        # torch.mm on the float8 tensors: aten.mm to a selective checkpoint's policy
        res = checkpoint2x.subclass_op(torch.ops.aten.mm.default, scaled_mm, reshaped, weight_fp8_t,
                                       input_hp.dtype, True)
        return res.reshape(*shape[:-1], res.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        input_hp, weight_hp_t = ctx.saved_tensors
        recipe = ctx.recipe
        rowwise = recipe != "tensorwise"
        go_max = E4M3_MAX if rowwise else E5M2_MAX
        shape = grad_output.shape
        grad_output_reshaped = grad_output.reshape(-1, shape[-1])
        go_dim0 = to_float8(grad_output_reshaped, go_max, -1 if rowwise else None, rowwise)
        w_axis = -1 if recipe == "rowwise" else None
        w_dim0 = to_float8(weight_hp_t, E4M3_MAX, w_axis, rowwise)
        grad_input = scaled_mm(go_dim0, transposed(w_dim0), grad_output.dtype, False)
        grad_input = grad_input.reshape(*shape[:-1], grad_input.shape[-1])
        input_reshaped = input_hp.reshape(-1, input_hp.shape[-1])
        if recipe == "rowwise_with_gw_hp":
            grad_weight = torch.mm(grad_output_reshaped.t(), input_reshaped)
        else:
            go_dim1 = to_float8(grad_output_reshaped, go_max, 0 if rowwise else None, rowwise)
            x_dim1 = to_float8(input_reshaped, E4M3_MAX, 0 if rowwise else None, rowwise)
            grad_weight = scaled_mm(transposed(go_dim1), x_dim1, grad_output.dtype, False)
        return grad_input, grad_weight.t(), None


def float8_linear(x, weight, bias, recipe):
    """Float8Linear.forward (no autocast): the GEMM, then the bias added."""
    output = MatmulFloat8.apply(x, weight.t(), recipe)
    if bias is not None:
        output = output + bias.to(output.dtype)
    return output


def float8_weights(model):
    """convert_to_float8_training with torchtitan's filter: every nn.Linear
    but the output head (lm_head) whose in and out features are multiples
    of 16."""
    return {id(m.weight) for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and not name.endswith("lm_head")
            and m.in_features % 16 == 0 and m.out_features % 16 == 0}
