"""The linear layers every mirror calls: nn.functional.linear under
autocast, PEFT's LoRA and DoRA after the base layer, and bitsandbytes
0.45-0.46's 4-bit and 8-bit layers as they allocate on the GPU (there is no
bitsandbytes on this CPU): the values are not NF4's, the tensors are.
"""
import torch
import torch.nn as nn

from .common import add, dropout, mul, sub
from .float8 import float8_linear


def adapter_key(w):
    """The key of a weight's adapters in ac.lora: the weight's identity, or
    the key the harness gave it where FSDP2's twin swaps the weight's tensor
    (tests/torch/fsdp2.py copies it to the shard and the unsharded one)."""
    return getattr(w, "vp_key", id(w))


def lora(ac, x, w, result, b=None, fan_in_fan_out=False):
    """peft.tuners.lora.layer.Linear.forward after its base layer."""
    adapter = ac.lora.get(adapter_key(w))
    if adapter is None:
        return result
    lora_A, lora_B, scaling, p, magnitude = adapter
    if isinstance(lora_A, nn.Module):  # registered on the module (FSDP2's twin): its parameters as they are now
        lora_A, lora_B = lora_A.lora_A, lora_A.lora_B
    torch_result_dtype = result.dtype
    if x.dtype != lora_A.dtype:  # self._cast_input_dtype(x, lora_A.weight.dtype)
        x = x.to(lora_A.dtype)
    if magnitude is None:
        result = add(result, linear(ac, linear(ac, dropout(x, p, True), lora_A), lora_B) * scaling)
    else:  # this frame's x stays until it returns
        result = dora_variant(ac, x, w, b, lora_A, lora_B, scaling, p, magnitude, result, fan_in_fan_out)
    result = result.to(torch_result_dtype)
    return result


def dora_variant(ac, x, w, b, lora_A, lora_B, scaling, p, magnitude, result, fan_in_fan_out):
    """peft.tuners.lora.variants.DoraLinearVariant.forward (PEFT 0.15-0.17)."""
    if p == 0.0:
        base_result = result
    else:
        x = dropout(x, p, True)
        base_result = None
    return add(result, dora(ac, x, w, b, lora_A, lora_B, scaling, magnitude, base_result, fan_in_fan_out))


def eye(n, dtype):
    """torch.eye(n, dtype=dtype); CPU PyTorch 1.13 has no bf16 eye: the
    same single tensor, its diagonal filled in place."""
    if dtype == torch.bfloat16:
        return torch.zeros(n, n, dtype=dtype).fill_diagonal_(1)
    return torch.eye(n, dtype=dtype)


def dora(ac, x, weight, bias, lora_A, lora_B, scaling, magnitude, base_result, fan_in_fan_out):
    """peft.tuners.lora.dora.DoraLinearLayer.forward (PEFT 0.15-0.17) under
    CUDA's autocast: the whole B @ A made by running the adapters over an
    identity matrix, the column norm of W + scaling * B @ A (detached), and
    the magnitude over it scaling both the base output and the adapters'."""
    x_eye = eye(lora_A.shape[1], x.dtype)
    lora_weight = linear(ac, linear(ac, x_eye, lora_A), lora_B).T
    weight = dequantize_module_weight(ac, weight)
    weight = weight.to(x.dtype)
    # get_weight_norm: linalg_vector_norm is on autocast's fp32 list
    oriented = weight.T if fan_in_fan_out else weight
    summed = add(oriented, scaling * lora_weight.detach())
    weight_norm = torch.linalg.norm(ac.up(summed), dim=1).to(summed.dtype)
    del oriented, summed
    weight_norm = weight_norm.detach()
    mag_norm_scale = (magnitude / weight_norm).view(1, -1)
    lora_result = linear(ac, linear(ac, x, lora_A), lora_B)
    if base_result is not None:
        if bias is not None:
            base_result = sub(base_result, bias)
    else:
        w = weight.T if fan_in_fan_out else weight
        base_result = nn.functional.linear(ac.down(x), ac.down(w))
    result_dora = add(mul(mag_norm_scale - 1, base_result), mul(mag_norm_scale, lora_result) * scaling)
    return result_dora


def linear(ac, x, w, b=None):
    if id(w) in ac.float8:
        return float8_linear(x, w, b, ac.float8_recipe)
    state = ac.quant.get(id(w))
    if state is not None:  # the base output passed on, no frame between keeping it
        adapter = ac.lora.get(id(w))
        base = linear_8bit if isinstance(state, Int8State) else linear_4bit
        if adapter is None:
            return base(x, w, b, state)
        return lora_bnb(ac, x, w, base(x, w, b, state), b, adapter, clone=base is linear_4bit)
    return lora(ac, x, w, nn.functional.linear(ac.down(x), ac.down(w), ac.down(b)), b)


class QuantState:
    """Params4bit.quant_state after quantize_4bit with blocks of 64: the
    absmax of every block (fp32; double-quantized: uint8, with state2's fp32
    absmax per 256 blocks and an fp32 offset) and a 16-value fp32 code table
    of the weight's own (get_4bit_type). `dtype` is the weight's before
    quantization, `compute_dtype` Linear4bit's."""

    def __init__(self, shape, dtype, compute_dtype, double_quant):
        self.shape, self.dtype, self.compute_dtype, self.nested = shape, dtype, compute_dtype, double_quant
        self.blocks = -(-shape[0] * shape[1] // 64)
        self.code = torch.zeros(16, dtype=torch.float32)
        if double_quant:
            self.absmax = torch.zeros(self.blocks, dtype=torch.uint8)
            self.offset = torch.zeros((), dtype=torch.float32)
            self.state2_absmax = torch.zeros(-(-self.blocks // 256), dtype=torch.float32)
        else:
            self.absmax = torch.zeros(self.blocks, dtype=torch.float32)

    def tensors(self):
        extra = [self.offset, self.state2_absmax] if self.nested else []
        return [self.absmax, self.code] + extra


def dequantize_4bit(A, state):
    """bitsandbytes.functional.dequantize_4bit: with double quantization the
    block absmax first, dequantize_blockwise's fp32 tensor (the offset added
    in place), then the weight in the dtype it had; a transposed packed
    weight ([1, n/2]) gets the transposed view back."""
    absmax = state.absmax
    if state.nested:
        absmax = torch.empty(state.blocks, dtype=torch.float32)
        absmax += state.offset
    out = torch.empty(state.shape, dtype=state.dtype).fill_(0.01)
    del absmax
    return out.t() if A.shape[0] == 1 else out


def dequantize_module_weight(ac, weight):
    """peft.utils.integrations.dequantize_module_weight: a 4-bit or 8-bit
    weight dequantized whole (dequantize_bnb_weight), any other as it is."""
    state = ac.quant.get(id(weight))
    if state is None:
        return weight
    if isinstance(state, Int8State):  # int8_vectorwise_dequant: A * SCB.view(-1, 1) * (1 / 127), in fp32
        scaled = torch.empty(weight.shape, dtype=torch.float32)
        out = torch.empty(weight.shape, dtype=torch.float32).fill_(0.01)
        del scaled
        return out
    return dequantize_4bit(weight, state)


class MatMul4Bit(torch.autograd.Function):
    """bitsandbytes.autograd._functions.MatMul4Bit: F.linear on the weight
    dequantized to A's dtype, the bias fused; ctx keeps the packed weight
    (a parameter) and the state, nothing of A. Backward dequantizes again."""

    @staticmethod
    def forward(ctx, A, B, bias, state):
        ctx.state, ctx.B = state, B
        ctx.dtype_bias = None if bias is None else bias.dtype
        return nn.functional.linear(A, dequantize_4bit(B, state).to(A.dtype).t(), bias)

    @staticmethod
    def backward(ctx, grad_output):
        req_grad_a, _, req_grad_bias, _ = ctx.needs_input_grad
        grad_a = grad_bias = None
        if req_grad_bias:
            grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias)
        if req_grad_a:
            grad_a = torch.matmul(grad_output, dequantize_4bit(ctx.B, ctx.state).to(grad_output.dtype).t())
        return grad_a, None, grad_bias, None


def linear_4bit(x, weight, bias, state):
    """bitsandbytes.nn.Linear4bit.forward: a bias of another dtype than x's
    replaced by a copy in x's for good, x and the bias cast to the compute
    dtype, matmul_4bit, the output cast back to x's dtype."""
    if bias is not None and bias.dtype != x.dtype:
        bias.data = bias.data.to(x.dtype)
    inp_dtype = x.dtype
    x = x.to(state.compute_dtype)
    bias = None if bias is None else bias.to(state.compute_dtype)
    out = MatMul4Bit.apply(x, weight.t(), bias, state)
    out = out.to(inp_dtype)
    return out


def lora_bnb(ac, x, w, result, b, adapter, clone):
    """peft.tuners.lora.bnb's Linear4bit.forward (and Linear8bitLt's, which
    does not clone) after the base layer: the 4-bit result cloned; without
    autocast x cast to the adapters' dtype and their output (or DoRA's
    result) cast back to the result's."""
    if clone:
        result = result.clone()
    lora_A, lora_B, scaling, p, magnitude = adapter
    requires_conversion = ac.low is None  # not torch.is_autocast_enabled()
    if requires_conversion:
        expected_dtype = result.dtype
        if x.dtype != lora_A.dtype:  # self._cast_input_dtype(x, lora_A.weight.dtype)
            x = x.to(lora_A.dtype)
    if magnitude is None:
        output = linear(ac, linear(ac, dropout(x, p, True), lora_A), lora_B) * scaling
        if requires_conversion:
            output = output.to(expected_dtype)
        result = add(result, output)
    else:
        result = dora_variant(ac, x, w, b, lora_A, lora_B, scaling, p, magnitude, result, False)
        if requires_conversion:
            result = result.to(expected_dtype)
    return result


class Int8State:
    """Linear8bitLt's MatmulLtState once its Int8Params are on the GPU
    (has_fp16_weights=False): the weight's data is CB, int8 [out, in]; SCB
    holds an fp32 absmax per output row; threshold is transformers'
    llm_int8_threshold (6.0)."""

    def __init__(self, out_features, threshold=6.0):
        self.SCB = torch.zeros(out_features, dtype=torch.float32)
        self.threshold = threshold

    def tensors(self):
        return [self.SCB]


def int8_vectorwise_quant(A, threshold):
    """bitsandbytes' int8_vectorwise_quant (CUDA kernel of 0.46): the row
    scales and the int8 rows; with a threshold, |A| >= threshold marks the
    outliers (an fp16 and a bool tensor of A's size). No outlier here: the
    engine assumes none, and the harness refuses to go on with one."""
    row_stats = torch.empty(A.shape[0], dtype=torch.float32)
    out_row = torch.zeros(A.shape, dtype=torch.int8)
    outlier_cols = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        if outliers.any():
            raise RuntimeError("an LLM.int8 outlier column: not mirrored")
        outlier_cols = torch.empty(0, dtype=torch.int64)
        del outliers
    return out_row, row_stats, outlier_cols


def int8_scaled_mm(CA, CB, SCA, SCB, bias, dtype):
    """bitsandbytes' int8_scaled_mm: int8_linear_matmul's int32 product, then
    int8_mm_dequant's fp16 output (an fp16 bias fused, another added in
    place), cast to the input's dtype."""
    out_i32 = torch.empty(CA.shape[0], CB.shape[0], dtype=torch.int32)
    out = torch.empty(CA.shape[0], CB.shape[0], dtype=torch.float16).fill_(0.01)
    if bias is not None and bias.dtype != torch.float16:
        out.add_(bias.to(torch.float16))  # CUDA adds in place; the CPU would first copy out into fp32
    result = out.to(dtype)
    del out, out_i32
    return result


class MatMul8bitLt(torch.autograd.Function):
    """bitsandbytes.autograd._functions.MatMul8bitLt (0.46) against a frozen
    int8 weight: A cast to fp16 and quantized row-wise, int8_mixed_scaled_mm
    (no outlier columns: an empty subA and int8_scaled_mm); ctx.tensors
    keeps A (the 2-D view of the input) and the empty subA. Backward:
    CB = state.CB.to(dtype_A, copy=True).mul_(SCB.unsqueeze(1).mul(1 / 127)),
    grad_A = grad_output.to(dtype_A) @ CB."""

    @staticmethod
    def forward(ctx, A, B, bias, state):
        input_shape = A.shape
        A = A.reshape(-1, input_shape[-1])
        CA, SCA, outlier_cols = int8_vectorwise_quant(A.to(torch.float16), state.threshold)
        subA = torch.empty(0, dtype=A.dtype) if state.threshold > 0.0 else None
        output = int8_scaled_mm(CA, B, SCA, state.SCB, bias, A.dtype)
        ctx.state, ctx.B, ctx.grad_shape, ctx.dtype_A = state, B, input_shape, A.dtype
        ctx.tensors = (None, subA, A)
        return output.reshape(*input_shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad_output):
        grad_a = None
        if ctx.needs_input_grad[0]:
            if grad_output.dim() == 3:
                grad_output = grad_output.reshape(-1, grad_output.shape[-1]).contiguous()
            CB = ctx.B.to(ctx.dtype_A, copy=True)
            scale = ctx.state.SCB.unsqueeze(1).mul(1.0 / 127.0)
            CB.mul_(scale.to(CB.dtype))  # CUDA multiplies in place; the CPU would first copy CB into fp32
            del scale
            grad_a = torch.matmul(grad_output.to(ctx.dtype_A), CB).view(ctx.grad_shape)
        return grad_a, None, None, None


def linear_8bit(x, weight, bias, state):
    """bitsandbytes.nn.Linear8bitLt.forward (0.46): a bias of another dtype
    than x's replaced by a copy in x's for good, then bnb.matmul on x as it
    comes."""
    if bias is not None and bias.dtype != x.dtype:
        bias.data = bias.data.to(x.dtype)
    return MatMul8bitLt.apply(x, weight, bias, state)
