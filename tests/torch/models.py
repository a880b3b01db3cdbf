"""GPT-2 and LLaMA as Hugging Face transformers (4.46-4.52) computes them in
training, written out in plain PyTorch so that the CPU run keeps what a CUDA
run of PyTorch 2.x keeps. Each forward mirrors the HF module line by line:
the order of operations and of Python locals decides which tensors are alive
together, so it is kept exactly.

Where Debian's PyTorch 1.13 on CPU would keep something else than 2.x on CUDA,
the code here keeps what 2.x on CUDA keeps, and says so:

* torch.autocast: CPU autocast has other op lists than CUDA's, so autocast is
  emulated by hand with CUDA's lists (matmul/linear/addmm/bmm in the low
  dtype, casts of leaves cached per forward; softmax without dtype, pow,
  layer_norm, nll_loss in fp32; everything else in its input's dtype).
* dropout: CUDA's fused kernel keeps a one-byte mask and its backward
  allocates only the gradient; F.dropout on CPU keeps a mask in the input's
  dtype, and native_dropout's CPU kernels make input-sized temporaries in
  both directions, so dropout is a custom function that allocates what the
  CUDA kernels allocate.
* mean: 1.13's MeanBackward keeps its whole input; 2.x keeps only sizes.
  Mean2x below keeps nothing and expands in backward, as 2.x does.
* mixed-dtype adds: CPU's TensorIterator copies the lower-precision operand
  into the promoted dtype before adding (CPU kernels do not cast on the
  fly); CUDA's cast as they read. LoRA's `result + lora_B(...) * scaling`
  (a 16-bit base output and an fp32 adapter term) is MixedAdd below, which
  allocates only the output, as CUDA does; so are Gemma 2's residual adds
  (16-bit post-norm rows onto the fp32 stream under autocast).
"""
import math

import torch
import torch.nn as nn


class Autocast:
    """torch.autocast(device_type='cuda', dtype=low) done by hand; it also
    carries the run's LoRA adapters (id(weight) -> (A, B, scaling, dropout,
    magnitude)) and QLoRA's 4-bit weights (id(packed weight) -> QuantState)."""

    def __init__(self, low):
        self.low = low  # None: autocast off
        self.cache = {}
        self.lora = {}
        self.quant = {}

    def down(self, t):
        """Lower-precision list: fp32 inputs are cast; leaves that require
        grad are cached for the rest of the autocast region."""
        if self.low is None or t is None or t.dtype != torch.float32:
            return t
        if t.is_leaf and t.requires_grad:
            key = id(t)
            if key not in self.cache:
                self.cache[key] = t.to(self.low)
            return self.cache[key]
        return t.to(self.low)

    def up(self, t):
        """fp32 list: 16-bit inputs are cast up."""
        if self.low is None or t.dtype == torch.float32:
            return t
        return t.float()

    def clear(self):
        self.cache = {}


class CudaDropout(torch.autograd.Function):
    """torch.native_dropout as CUDA runs it: the output and a one-byte mask,
    and a fused backward that allocates the gradient alone (the CPU kernels
    make input-sized temporaries in both directions)."""

    @staticmethod
    def forward(ctx, x, p):
        # the CPU kernels draw the mask through an input-sized float tensor;
        # drawing it 64 elements at a time leaves the output and the mask,
        # which is all CUDA's fused kernel allocates
        mask = torch.empty(x.shape, dtype=torch.bool)
        for part in mask.view(-1).split(64):
            part.bernoulli_(1.0 - p)
        ctx.scale = 1.0 / (1.0 - p)
        out = torch.where(mask, x, torch.zeros((), dtype=x.dtype)).mul_(ctx.scale)
        ctx.save_for_backward(mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        # grad * mask on the CPU casts the mask to grad's dtype first (a
        # temporary): torch.where allocates the result alone, as CUDA does
        return torch.where(mask, grad, torch.zeros((), dtype=grad.dtype)).mul_(ctx.scale), None


def dropout(x, p, training):
    if not training or p == 0.0:
        return x
    return CudaDropout.apply(x, p)


class Mean2x(torch.autograd.Function):
    """x.mean(dim, keepdim) keeping what PyTorch 2.x keeps: the sizes
    (mean_backward: sum_backward's expanded view divided by the count)."""

    @staticmethod
    def forward(ctx, x, dim=-1, keepdim=True):
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        return x.mean(dim, keepdim=keepdim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.keepdim:
            grad = grad.unsqueeze(ctx.dim)
        return grad.expand(ctx.shape) / ctx.shape[ctx.dim], None, None


def empty_like_result(a, b, op):
    """An empty tensor laid out as TensorIterator lays out op(a, b)'s result
    (the operands' own order of dimensions, which need not be contiguous),
    found by running op on meta tensors."""
    like = op(a.to("meta"), b.to("meta"))
    return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype)


class MixedAdd(torch.autograd.Function):
    """a + alpha * b (sub: alpha -1) for operands of two dtypes, as CUDA
    computes it: one output in the promoted dtype. CPU's TensorIterator first
    copies the lower-precision operand into the promoted dtype (CPU kernels
    do not cast on the fly), a temporary a GPU run does not have. Backward as
    AddBackward0 and SubBackward0: the gradient of each input that needs
    one, in its dtype (a cast copy for the lower one)."""

    @staticmethod
    def forward(ctx, a, b, alpha=1.0):
        ctx.dtypes, ctx.alpha = (a.dtype, b.dtype), alpha
        out = empty_like_result(a, b, torch.add)
        # the lower-precision operand first: copy_ converts element by element
        if a.dtype != out.dtype:
            return out.copy_(a).add_(b, alpha=alpha)
        return out.copy_(b).mul_(alpha).add_(a)

    @staticmethod
    def backward(ctx, grad):
        needs_a, needs_b = ctx.needs_input_grad[:2]
        grad_b = None
        if needs_b:
            grad_b = (grad if ctx.alpha == 1.0 else grad * ctx.alpha).to(ctx.dtypes[1])
        return grad.to(ctx.dtypes[0]) if needs_a else None, grad_b, None


def add(a, b):
    return MixedAdd.apply(a, b) if a.dtype != b.dtype else a + b


def sub(a, b):
    return MixedAdd.apply(a, b, -1.0) if a.dtype != b.dtype else a - b


class MixedMul(torch.autograd.Function):
    """a * b for operands of two dtypes, as CUDA computes it: one output in
    the promoted dtype, without the CPU's fp32 copy of the lower-precision
    operand (see MixedAdd). Backward as MulBackward0 (derivatives.yaml's
    mul_tensor_backward: self's grad * other, then other's grad * self, both
    in the promoted dtype; the engine's validate_outputs then casts each to
    its input's dtype); each operand kept only if the other needs its
    gradient."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b if a.requires_grad else None, a if b.requires_grad else None)
        return MixedMul.product(a, b)

    @staticmethod
    def product(a, b):
        out = empty_like_result(a, b, torch.mul)
        low, high = (a, b) if a.dtype != out.dtype else (b, a)
        out.copy_(low)  # copy_ converts element by element
        return out.mul_(high)

    @staticmethod
    def backward(ctx, grad):
        b, a = ctx.saved_tensors
        grad_a = MixedMul.product(grad, b) if b is not None else None
        grad_b = MixedMul.product(grad, a) if a is not None else None
        return grad_a, grad_b


def mul(a, b):
    return MixedMul.apply(a, b) if a.dtype != b.dtype else a * b


def lora(ac, x, w, result, b=None, fan_in_fan_out=False):
    """peft.tuners.lora.layer.Linear.forward after its base layer."""
    adapter = ac.lora.get(id(w))
    if adapter is None:
        return result
    lora_A, lora_B, scaling, p, magnitude = adapter
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
    state = ac.quant.get(id(w))
    if state is not None:  # the base output passed on, no frame between keeping it
        adapter = ac.lora.get(id(w))
        base = linear_8bit if isinstance(state, Int8State) else linear_4bit
        if adapter is None:
            return base(x, w, b, state)
        return lora_bnb(ac, x, w, base(x, w, b, state), b, adapter, clone=base is linear_4bit)
    return lora(ac, x, w, nn.functional.linear(ac.down(x), ac.down(w), ac.down(b)), b)


# ---------------------------------------------------------------- QLoRA
# bitsandbytes 0.45-0.46's 4-bit layers as they allocate on the GPU (there is
# no bitsandbytes on this CPU): the values are not NF4's, the tensors are.


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


def quantized_linears(model):
    """The nn.Linear modules transformers' bitsandbytes integration replaces:
    every one but the head (get_keys_to_not_convert: the last child, a
    language model's head or a classifier); the model's
    _keep_in_fp32_modules (T5's wo) are cast to fp32 and left out."""
    keep_fp32 = {"wo"} if isinstance(model, T5ForConditionalGeneration) else set()
    for name, module in list(model.named_modules()):
        short = name.rsplit(".", 1)[-1]
        if not isinstance(module, (nn.Linear, Conv1D)) or short in ("lm_head", "classifier"):
            continue
        if short in keep_fp32:
            module.to(torch.float32)
            continue
        yield module


def linear_shape(module):
    """[out, in] of an nn.Linear, or of the Linear a Conv1D ([in, out]) becomes."""
    shape = tuple(module.weight.shape)
    return shape[::-1] if isinstance(module, Conv1D) else shape


def quantize_8bit(model, ac, threshold):
    """from_pretrained(quantization_config=BitsAndBytesConfig(load_in_8bit,
    llm_int8_threshold)): each quantized linear becomes a Linear8bitLt holding
    CB int8 and SCB."""
    model.quant_tensors = []
    for module in quantized_linears(model):
        shape = linear_shape(module)
        state = Int8State(shape[0], threshold)
        module.weight = nn.Parameter(torch.zeros(shape, dtype=torch.int8), requires_grad=False)
        ac.quant[id(module.weight)] = state
        model.quant_tensors += state.tensors()


def quantize_4bit(model, ac, double_quant, dtype, compute_dtype):
    """from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit,
    bnb_4bit_use_double_quant, bnb_4bit_compute_dtype)): each quantized
    linear becomes a Linear4bit whose weight (loaded in `dtype`) is packed
    two to a byte, [(n + 1) // 2, 1] uint8. model.quant_tensors lists the
    states' tensors and, with double quantization, the 256-value fp32 map
    quantize_blockwise caches once per process."""
    model.quant_tensors = [torch.zeros(256, dtype=torch.float32)] if double_quant else []
    for module in quantized_linears(model):
        shape = linear_shape(module)
        state = QuantState(shape, dtype, compute_dtype, double_quant)
        module.weight = nn.Parameter(torch.zeros((shape[0] * shape[1] + 1) // 2, 1, dtype=torch.uint8),
                                     requires_grad=False)
        ac.quant[id(module.weight)] = state
        model.quant_tensors += state.tensors()


def chunks(layers, checkpoint):
    """The layers a checkpointed call runs: one (HF), or K under vramplan's
    every-K checkpointing; one at a time without checkpointing."""
    every = getattr(checkpoint, "every", 1) if checkpoint else 1
    return [layers[i:i + every] for i in range(0, len(layers), every)]


def in_turn(chunk, x, call):
    """x through the chunk's layers, each output replacing the last."""
    for layer in chunk:
        x = call(layer, x)
    return x


# ---------------------------------------------------------------- GPT-2


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: addmm with an (in, out) weight."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, ac, x):
        if id(self.weight) in ac.quant:  # a bitsandbytes Linear4bit or Linear8bitLt now
            return linear(ac, x, self.weight, self.bias)
        size_out = x.size()[:-1] + (self.nf,)
        out = torch.addmm(ac.down(self.bias), ac.down(x).view(-1, x.size(-1)), ac.down(self.weight))
        out = out.view(size_out)
        return lora(ac, x, self.weight, out, self.bias, fan_in_fan_out=True)


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, n = cfg["n_embd"], cfg["n_positions"]
        self.num_heads = cfg["n_head"]
        self.head_dim = h // self.num_heads
        self.split_size = h
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.c_attn = Conv1D(3 * h, h)
        self.c_proj = Conv1D(h, h)
        self.attn_pdrop = cfg.get("attn_pdrop", 0.1)
        self.resid_pdrop = cfg.get("resid_pdrop", 0.1)

    def eager(self, ac, query, key, value):
        # modeling_gpt2.eager_attention_forward
        attn_weights = torch.matmul(ac.down(query), ac.down(key).transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = nn.functional.softmax(ac.up(attn_weights), dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = dropout(attn_weights, self.attn_pdrop, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value))
        attn_output = attn_output.transpose(1, 2)
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, presents=None):
        query_states, key_states, value_states = self.c_attn(ac, hidden_states).split(self.split_size, dim=2)
        shape_q = (*query_states.shape[:-1], -1, self.head_dim)
        shape_kv = (*key_states.shape[:-1], -1, self.head_dim)
        query_states = query_states.view(shape_q).transpose(1, 2)
        key_states = key_states.view(shape_kv).transpose(1, 2)
        value_states = value_states.view(shape_kv).transpose(1, 2)
        if presents is not None:  # use_cache: present = (key_states, value_states), views of c_attn's output
            presents.append((key_states, value_states))
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states)
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        attn_output = self.c_proj(ac, attn_output)
        attn_output = dropout(attn_output, self.resid_pdrop, self.training)
        return attn_output, attn_weights


def gelu_new(ac, input):
    # NewGELUActivation; pow is on autocast's fp32 list
    # (CUDA's mixed-dtype add and mul where the fp32 cube meets a 16-bit
    # input; Python's order: 0.5 * input first)
    half = 0.5 * input
    return mul(half, 1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * add(input, 0.044715 * torch.pow(ac.up(input), 3.0))))


def gelu_fast(ac, input):
    # FastGELUActivation: no pow, so nothing on autocast's lists; left to
    # right as Python evaluates it
    return 0.5 * input * (1.0 + torch.tanh(input * 0.7978845608 * (1.0 + 0.044715 * input * input)))


def quick_gelu(ac, input):
    # QuickGELUActivation (CLIP's)
    return input * torch.sigmoid(1.702 * input)


def relu2(ac, input):
    # ReLUSquaredActivation: square is pow(x, 2), on autocast's fp32 list
    return torch.square(ac.up(nn.functional.relu(input)))


def activation(ac, name, x):
    if name == "gelu_new":
        return gelu_new(ac, x)
    if name == "gelu_fast":
        return gelu_fast(ac, x)
    if name == "quick_gelu":
        return quick_gelu(ac, x)
    if name == "relu2":
        return relu2(ac, x)
    if name in ("gelu_pytorch_tanh",):
        return nn.functional.gelu(x, approximate="tanh")
    if name == "gelu":
        return nn.functional.gelu(x)
    if name == "relu":
        return nn.functional.relu(x)
    if name == "silu":
        return nn.functional.silu(x)
    raise ValueError(name)


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        inner = cfg.get("n_inner") or 4 * h
        self.c_fc = Conv1D(inner, h)
        self.c_proj = Conv1D(h, inner)
        self.act = cfg.get("activation_function", "gelu_new")
        self.resid_pdrop = cfg.get("resid_pdrop", 0.1)

    def forward(self, ac, hidden_states):
        hidden_states = self.c_fc(ac, hidden_states)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = self.c_proj(ac, hidden_states)
        hidden_states = dropout(hidden_states, self.resid_pdrop, self.training)
        return hidden_states


def layer_norm(ac, ln, x):
    # layer_norm is on autocast's fp32 list
    return nn.functional.layer_norm(ac.up(x), ln.normalized_shape, ln.weight, ln.bias, ln.eps)


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.ln_1 = nn.LayerNorm(h, eps=eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(h, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, ac, hidden_states, presents=None):
        residual = hidden_states
        hidden_states = layer_norm(ac, self.ln_1, hidden_states)
        attn_output, _ = self.attn(ac, hidden_states, presents)
        hidden_states = add(attn_output, residual)  # under autocast: CUDA's add of a 16-bit output to fp32
        residual = hidden_states
        hidden_states = layer_norm(ac, self.ln_2, hidden_states)
        feed_forward_hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, feed_forward_hidden_states)
        return hidden_states


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], h)
        self.wpe = nn.Embedding(cfg["n_positions"], h)
        self.embd_pdrop = cfg.get("embd_pdrop", 0.1)
        self.h = nn.ModuleList([GPT2Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(h, eps=cfg.get("layer_norm_epsilon", 1e-5))
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def embed(self, input_ids):
        return self.wte(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        """past_key_values: a list that collects the presents (use_cache)."""
        if past_key_values is not None and not isinstance(past_key_values, list):
            raise NotImplementedError("prefix tuning is mirrored on LLaMA only")
        length = input_ids.shape[1] if inputs_embeds is None else inputs_embeds.shape[1]
        cache_position = torch.arange(0, length)
        position_ids = cache_position.unsqueeze(0)
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        hidden_states = dropout(hidden_states, self.embd_pdrop, self.training)
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:
                hidden_states = checkpoint(lambda x, c=chunk: in_turn(c, x, lambda b, y: b(ac, y)), hidden_states)
            else:
                hidden_states = chunk[0](ac, hidden_states, past_key_values)
        hidden_states = layer_norm(ac, self.ln_f, hidden_states)
        return hidden_states

    def head_weight(self):
        return self.wte.weight if self.tied else self.lm_head.weight


# ---------------------------------------------------------------- LLaMA


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = Mean2x.apply(hidden_states.pow(2))
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class ScaledEmbedding(nn.Embedding):
    """Gemma3TextScaledWordEmbedding: the module scales its own rows, so its
    output (what a forward hook sees: PEFT's enable_input_require_grads) is
    the scaled one, and the unscaled lookup a temporary."""

    def __init__(self, num_embeddings, dim):
        super().__init__(num_embeddings, dim)
        self.register_buffer("embed_scale", torch.tensor(dim ** 0.5), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(Mean2x.apply(x.pow(2)) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class Olmo2RMSNorm(LlamaRMSNorm):
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = Mean2x.apply(hidden_states.pow(2))
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


def rms_norm(cfg, dim):
    eps = cfg.get("rms_norm_eps", 1e-6)
    kind = {"gemma": GemmaRMSNorm, "gemma2": GemmaRMSNorm, "gemma3_text": GemmaRMSNorm,
            "olmo2": Olmo2RMSNorm}.get(cfg["model_type"], LlamaRMSNorm)
    return kind(dim, eps)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim = cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        dim = int(dim * cfg.get("partial_rotary_factor", 1.0))  # Phi3RotaryEmbedding
        base = cfg.get("rope_theta", 10000.0)
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    # under autocast 16-bit q and k times the fp32 tables: CUDA's multiply (MixedMul)
    q_embed = mul(q, cos) + mul(rotate_half(q), sin)
    k_embed = mul(k, cos) + mul(rotate_half(k), sin)
    return q_embed, k_embed


def apply_rotary_pos_emb_phi3(q, k, cos, sin, unsqueeze_dim=1):
    # Phi-3's (transformers 4.49+): the rotated part joined to the rest
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([mul(q_rot, cos) + mul(rotate_half(q_rot), sin), q_pass], dim=-1)
    k_embed = torch.cat([mul(k_rot, cos) + mul(rotate_half(k_rot), sin), k_pass], dim=-1)
    return q_embed, k_embed


def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):
    # the rotary halves interleaved in the weights: regrouped first (copies)
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class DynamicCache:
    """transformers 4.45-4.55's DynamicCache: it keeps the tensors it is
    first given and torch.cat's later ones after them."""

    def __init__(self):
        self.key_cache, self.value_cache = [], []

    def update(self, key_states, value_states, layer_idx):
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
            self.value_cache.append(value_states)
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]

    @classmethod
    def from_legacy_cache(cls, past_key_values):
        cache = cls()
        for layer_idx in range(len(past_key_values)):
            key_states, value_states = past_key_values[layer_idx]
            cache.update(key_states, value_states, layer_idx)
        return cache

    def get_seq_length(self):
        return self.key_cache[0].shape[-2] if self.key_cache else 0


class LlamaAttention(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        self.layer_idx = layer_idx
        h = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.num_kv = cfg.get("num_key_value_heads") or self.num_heads
        self.head_dim = cfg.get("head_dim") or h // self.num_heads
        self.num_key_value_groups = self.num_heads // self.num_kv
        self.scaling = self.head_dim ** -0.5
        self.softcap = None
        if cfg["model_type"] == "gemma2":  # Gemma2Attention
            self.scaling = cfg.get("query_pre_attn_scalar", self.head_dim) ** -0.5
            self.softcap = cfg.get("attn_logit_softcapping", 50.0)
        if cfg["model_type"] == "gemma3_text":  # Gemma3Attention: no soft cap by default
            self.scaling = cfg.get("query_pre_attn_scalar", self.head_dim) ** -0.5
            self.softcap = cfg.get("attn_logit_softcapping")
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.attn_impl = cfg.get("_attn_implementation", "eager")
        bias = cfg.get("attention_bias", False)
        qkv_bias = bias or cfg["model_type"] == "qwen2_moe"  # Qwen2Attention: biases on q, k, v only
        self.fused = cfg["model_type"] == "phi3"  # Phi3Attention: one qkv_proj
        if self.fused:
            op_size = (self.num_heads + 2 * self.num_kv) * self.head_dim
            self.qkv_proj = nn.Linear(h, op_size, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=qkv_bias)
            self.k_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=qkv_bias)
            self.v_proj = nn.Linear(h, self.num_kv * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=bias)
        # the norms registered after the projections, as transformers does (the
        # parameters' order, which a for-loop optimizer's temporaries follow)
        qk_norm = cfg["model_type"] in ("qwen3", "qwen3_moe")  # Qwen3Attention: q_norm, k_norm over head_dim
        self.q_norm = LlamaRMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6)) if qk_norm else None
        self.k_norm = LlamaRMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6)) if qk_norm else None
        # Gemma3Attention: Gemma3RMSNorm over each head, after the transpose
        self.gemma3 = cfg["model_type"] == "gemma3_text"
        if self.gemma3:
            self.q_norm = GemmaRMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6))
            self.k_norm = GemmaRMSNorm(self.head_dim, cfg.get("rms_norm_eps", 1e-6))
        # Olmo2Attention: q_norm and k_norm over the whole projections, before the view
        self.olmo2 = cfg["model_type"] == "olmo2"
        if self.olmo2:
            self.q_norm = Olmo2RMSNorm(self.num_heads * self.head_dim, cfg.get("rms_norm_eps", 1e-6))
            self.k_norm = Olmo2RMSNorm(self.num_kv * self.head_dim, cfg.get("rms_norm_eps", 1e-6))

    def eager(self, ac, query, key, value, attention_mask):
        # modeling_llama.eager_attention_forward
        key_states = repeat_kv(key, self.num_key_value_groups)
        value_states = repeat_kv(value, self.num_key_value_groups)
        attn_weights = torch.matmul(ac.down(query), ac.down(key_states).transpose(2, 3)) * self.scaling
        if self.softcap is not None:  # modeling_gemma2.eager_attention_forward
            attn_weights = attn_weights / self.softcap
            attn_weights = torch.tanh(attn_weights)
            attn_weights = attn_weights * self.softcap
        if attention_mask is not None:
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
            attn_weights = add(attn_weights, causal_mask)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = dropout(attn_weights, self.attention_dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    def sdpa(self, query, key, value, attention_mask):
        # integrations/sdpa_attention.py sdpa_attention_forward (4.49-4.52);
        # only the GPU check runs it (real autocast, CUDA's kernels)
        key = repeat_kv(key, self.num_key_value_groups)
        value = repeat_kv(value, self.num_key_value_groups)
        causal_mask = attention_mask
        if attention_mask is not None:
            causal_mask = causal_mask[:, :, :, : key.shape[-2]]
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        is_causal = query.shape[2] > 1 and causal_mask is None
        attn_output = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_mask, dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling, is_causal=is_causal)
        return attn_output.transpose(1, 2).contiguous(), None

    def attend(self, ac, query, key, value, attention_mask):
        if self.attn_impl == "sdpa":
            return self.sdpa(query, key, value, attention_mask)
        return self.eager(ac, query, key, value, attention_mask)

    def forward_phi3(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        # Phi3Attention.forward (transformers 4.49-4.52)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        qkv = linear(ac, hidden_states, self.qkv_proj.weight)
        query_pos = self.num_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: query_pos + self.num_kv * self.head_dim]
        value_states = qkv[..., query_pos + self.num_kv * self.head_dim:]
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_phi3(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        if self.fused:
            return self.forward_phi3(ac, hidden_states, position_embeddings, attention_mask, past_key_value)
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.olmo2:
            query_states = self.q_norm(linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias)).view(hidden_shape)
            key_states = self.k_norm(linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias)).view(hidden_shape)
        elif self.q_norm is not None and not self.gemma3:  # Qwen3Attention: each norm right after its projection
            query_states = self.q_norm(linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape))
            key_states = self.k_norm(linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape))
        else:
            query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape)
            key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape)
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        if self.gemma3:  # Gemma3Attention: the norms after all three projections
            query_states = self.q_norm(query_states)
            key_states = self.k_norm(key_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class DeepseekV3Attention(nn.Module):
    """Multi-head latent attention, DeepseekV3Attention of transformers
    4.51-4.52 with eager attention."""

    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.num_heads = cfg["num_attention_heads"]
        self.num_key_value_groups = 1
        self.q_lora_rank = cfg.get("q_lora_rank")
        self.kv_lora_rank = cfg["kv_lora_rank"]
        self.qk_nope, self.qk_rope, self.v_head_dim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.qk_head_dim = self.qk_nope + self.qk_rope
        self.interleave = cfg.get("rope_interleave", True)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("attention_bias", False)
        eps = cfg.get("rms_norm_eps", 1e-6)
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(h, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, self.q_lora_rank, bias=bias)
            self.q_a_layernorm = LlamaRMSNorm(self.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(self.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.kv_lora_rank + self.qk_rope, bias=bias)
        self.kv_a_layernorm = LlamaRMSNorm(self.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.num_heads * (self.qk_nope + self.v_head_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, h, bias=bias)
        self.scaling = self.qk_head_dim ** -0.5
        self.softcap = None

    eager = LlamaAttention.eager

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        batch_size, seq_length = hidden_states.shape[:-1]
        if self.q_lora_rank is None:
            q_states = linear(ac, hidden_states, self.q_proj.weight)
        else:
            q_down = linear(ac, hidden_states, self.q_a_proj.weight, self.q_a_proj.bias)
            q_states = linear(ac, self.q_a_layernorm(q_down), self.q_b_proj.weight)
            del q_down
        q_states = q_states.view(batch_size, seq_length, -1, self.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope, self.qk_rope], dim=-1)
        compressed_kv = linear(ac, hidden_states, self.kv_a_proj_with_mqa.weight, self.kv_a_proj_with_mqa.bias)
        k_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope], dim=-1)
        k_pass = linear(ac, self.kv_a_layernorm(k_pass), self.kv_b_proj.weight)
        k_pass = k_pass.view(batch_size, seq_length, -1, self.qk_nope + self.v_head_dim).transpose(1, 2)
        k_pass, value_states = torch.split(k_pass, [self.qk_nope, self.v_head_dim], dim=-1)
        k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope)
        cos, sin = position_embeddings
        rotary = apply_rotary_pos_emb_interleave if self.interleave else apply_rotary_pos_emb
        q_rot, k_rot = rotary(q_rot, k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states = torch.cat((k_pass, k_rot), dim=-1)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        return attn_output, attn_weights


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        bias = cfg.get("mlp_bias", False)
        self.fused = cfg["model_type"] == "phi3"  # Phi3MLP: one gate_up_proj
        if self.fused:
            self.gate_up_proj = nn.Linear(h, 2 * f, bias=False)
        else:
            self.gate_proj = nn.Linear(h, f, bias=bias)
            self.up_proj = nn.Linear(h, f, bias=bias)
        self.down_proj = nn.Linear(f, h, bias=bias)
        self.act = cfg.get("hidden_act", "silu")

    def forward(self, ac, x):
        if self.fused:
            # Phi3MLP.forward
            up_states = linear(ac, x, self.gate_up_proj.weight)
            gate, up_states = up_states.chunk(2, dim=-1)
            up_states = up_states * activation(ac, self.act, gate)
            return linear(ac, up_states, self.down_proj.weight, self.down_proj.bias)
        # down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return linear(ac, activation(ac, self.act, linear(ac, x, self.gate_proj.weight, self.gate_proj.bias))
                      * linear(ac, x, self.up_proj.weight, self.up_proj.bias),
                      self.down_proj.weight, self.down_proj.bias)


class RoundRobinTopk(torch.autograd.Function):
    """torch.topk(probs, k, dim=-1) with the routing pinned: token t's j-th
    choice is expert (t*k + j) % E, so every expert gets its even share, the
    count vramplan assumes. Memory as topk: a values and an int64 indices
    output, the indices saved, a zero-filled input-sized gradient."""

    @staticmethod
    def forward(ctx, probs, k):
        n, experts = probs.shape
        indices = torch.arange(n * k)
        indices.remainder_(experts)
        indices = indices.view(n, k)
        values = probs.gather(1, indices)
        ctx.save_for_backward(indices)
        ctx.mark_non_differentiable(indices)
        ctx.shape = probs.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad, _):
        (indices,) = ctx.saved_tensors
        return torch.zeros(ctx.shape, dtype=grad.dtype).scatter_(1, indices, grad), None


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock, with a shared expert Qwen2MoeSparseMoeBlock,
    without one Qwen3MoeSparseMoeBlock."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        qwen = cfg["model_type"] in ("qwen2_moe", "qwen3_moe")
        self.num_experts = cfg["num_experts"] if qwen else cfg["num_local_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg.get("norm_topk_prob", False) if qwen else True
        f = cfg["moe_intermediate_size"] if qwen else cfg["intermediate_size"]
        self.gate = nn.Linear(h, self.num_experts, bias=False)
        self.experts = nn.ModuleList([LlamaMLP(dict(cfg, intermediate_size=f, mlp_bias=False))
                                      for _ in range(self.num_experts)])
        shared = cfg.get("shared_expert_intermediate_size", 0) if qwen else 0
        self.shared_expert = LlamaMLP(dict(cfg, intermediate_size=shared, mlp_bias=False)) if shared else None
        self.shared_expert_gate = nn.Linear(h, 1, bias=False) if shared else None

    def forward(self, ac, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = linear(ac, hidden_states, self.gate.weight)
        routing_weights = nn.functional.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = RoundRobinTopk.apply(routing_weights, self.top_k)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            # under autocast a 16-bit expert output times fp32 weights: CUDA's mixed mul
            current_hidden_states = mul(expert_layer(ac, current_state), routing_weights[top_x, idx, None])
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        if self.shared_expert is not None:
            shared_expert_output = self.shared_expert(ac, hidden_states)
            shared_expert_output = (nn.functional.sigmoid(linear(ac, hidden_states, self.shared_expert_gate.weight))
                                    * shared_expert_output)
            final_hidden_states = add(final_hidden_states, shared_expert_output)
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class AddAuxiliaryLoss(torch.autograd.Function):
    """DeepSeek's: returns x; in backward the loss gets ones(1)."""

    @staticmethod
    def forward(ctx, x, loss):
        ctx.dtype = loss.dtype
        ctx.required_aux_loss = loss.requires_grad
        return x

    @staticmethod
    def backward(ctx, grad_output):
        grad_loss = torch.ones(1, dtype=ctx.dtype) if ctx.required_aux_loss else None
        return grad_output, grad_loss


class DeepseekMoE(nn.Module):
    """MoEGate and DeepseekMoE of deepseek-ai/deepseek-moe-16b-base's
    modeling_deepseek.py, in training."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.n_routed_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg.get("norm_topk_prob", False)
        self.alpha = cfg.get("aux_loss_alpha", 0.001)
        f = cfg["moe_intermediate_size"]
        self.experts = nn.ModuleList([LlamaMLP(dict(cfg, intermediate_size=f, mlp_bias=False))
                                      for _ in range(self.n_routed_experts)])
        self.gate_weight = nn.Parameter(torch.empty(self.n_routed_experts, h).normal_(std=0.02))
        shared = cfg.get("n_shared_experts")
        self.shared_experts = LlamaMLP(dict(cfg, intermediate_size=f * shared, mlp_bias=False)) if shared else None

    def gate(self, ac, hidden_states):
        bsz, seq_len, h = hidden_states.shape
        hidden_states = hidden_states.view(-1, h)
        logits = linear(ac, hidden_states, self.gate_weight)
        scores = ac.up(logits).softmax(dim=-1)  # softmax is on autocast's fp32 list
        topk_weight, topk_idx = RoundRobinTopk.apply(scores, self.top_k)
        if self.top_k > 1 and self.norm_topk_prob:
            denominator = topk_weight.sum(dim=-1, keepdim=True) + 1e-20
            topk_weight = topk_weight / denominator
        aux_loss = None
        if self.training and self.alpha > 0.0:
            topk_idx_for_aux_loss = topk_idx.view(bsz, -1)
            scores_for_seq_aux = scores.view(bsz, seq_len, -1)
            ce = torch.zeros(bsz, self.n_routed_experts)
            ce.scatter_add_(1, topk_idx_for_aux_loss, torch.ones(bsz, seq_len * self.top_k)).div_(
                seq_len * self.top_k / self.n_routed_experts)
            aux_loss = (ce * Mean2x.apply(scores_for_seq_aux, 1, False)).sum(dim=1).mean() * self.alpha
        return topk_idx, topk_weight, aux_loss

    def forward(self, ac, hidden_states):
        identity = hidden_states
        orig_shape = hidden_states.shape
        topk_idx, topk_weight, aux_loss = self.gate(ac, hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        flat_topk_idx = topk_idx.view(-1)
        hidden_states = hidden_states.repeat_interleave(self.top_k, dim=0)
        y = torch.empty_like(hidden_states)
        for i, expert in enumerate(self.experts):
            y[flat_topk_idx == i] = expert(ac, hidden_states[flat_topk_idx == i])
        y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1)
        y = y.view(*orig_shape)
        if aux_loss is not None:
            y = AddAuxiliaryLoss.apply(y, aux_loss)
        if self.shared_experts is not None:
            y = y + self.shared_experts(ac, identity)
        return y


class DeepseekV3MoE(nn.Module):
    """DeepseekV3TopkRouter and DeepseekV3MoE of transformers 4.51-4.52:
    an fp32 router with sigmoid scores, group-limited top-k chosen without
    grad (the choice pinned to even shares, as RoundRobinTopk does), the
    expert loop into an fp32 accumulator, the shared experts on the input."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.hidden = h
        self.n_routed_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.n_group, self.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        self.norm_topk_prob = cfg.get("norm_topk_prob", True)
        self.routed_scaling_factor = cfg.get("routed_scaling_factor", 2.5)
        f = cfg["moe_intermediate_size"]
        self.experts = nn.ModuleList([LlamaMLP(dict(cfg, intermediate_size=f, mlp_bias=False))
                                      for _ in range(self.n_routed_experts)])
        self.gate_weight = nn.Parameter(torch.empty(self.n_routed_experts, h).normal_(std=0.02))
        self.register_buffer("e_score_correction_bias", torch.zeros(self.n_routed_experts))
        self.shared_experts = LlamaMLP(dict(cfg, intermediate_size=f * cfg.get("n_shared_experts", 1), mlp_bias=False))

    @torch.no_grad()
    def get_topk_indices(self, scores):
        e = self.n_routed_experts
        scores_for_choice = scores.view(-1, e) + self.e_score_correction_bias.unsqueeze(0)
        group_scores = scores_for_choice.view(-1, self.n_group, e // self.n_group).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, self.n_group, e // self.n_group).reshape(-1, e)
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        # the same tensor, the choice pinned: token t's j-th expert is (t*k + j) % E
        topk_indices.copy_(torch.arange(topk_indices.numel()).remainder_(e).view_as(topk_indices))
        return topk_indices

    def gate(self, ac, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden)
        router_logits = linear(ac, hidden_states.type(torch.float32), self.gate_weight.type(torch.float32))
        scores = router_logits.sigmoid()
        topk_indices = self.get_topk_indices(scores)
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights

    def moe(self, ac, hidden_states, topk_indices, topk_weights):
        final_hidden_states = torch.zeros_like(hidden_states, dtype=topk_weights.dtype)
        expert_mask = torch.nn.functional.one_hot(topk_indices, num_classes=len(self.experts))
        expert_mask = expert_mask.permute(2, 0, 1)
        for expert_idx in range(len(self.experts)):
            expert = self.experts[expert_idx]
            mask = expert_mask[expert_idx]
            token_indices, weight_indices = torch.where(mask)
            if token_indices.numel() > 0:
                expert_weights = topk_weights[token_indices, weight_indices]
                expert_input = hidden_states[token_indices]
                expert_output = expert(ac, expert_input)
                weighted_output = mul(expert_output, expert_weights.unsqueeze(-1))
                final_hidden_states.index_add_(0, token_indices, weighted_output)
        return final_hidden_states.type(hidden_states.dtype)

    def forward(self, ac, hidden_states):
        residuals = hidden_states
        orig_shape = hidden_states.shape
        topk_indices, topk_weights = self.gate(ac, hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.moe(ac, hidden_states, topk_indices, topk_weights).view(*orig_shape)
        # the fp32 routed sum and the shared experts' 16-bit output under autocast: CUDA's add
        hidden_states = add(hidden_states, self.shared_experts(ac, residuals))
        return hidden_states


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx=0):
        super().__init__()
        h = cfg["hidden_size"]
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = DeepseekV3Attention(cfg, layer_idx) if cfg.get("kv_lora_rank") else LlamaAttention(cfg, layer_idx)
        self.sparse = cfg["model_type"] in ("mixtral", "qwen2_moe", "qwen3_moe")
        routed = layer_idx >= cfg.get("first_k_dense_replace", 0)
        if self.sparse:
            self.mlp = SparseMoeBlock(cfg)
        elif cfg["model_type"] == "deepseek" and routed:
            self.mlp = DeepseekMoE(cfg)
        elif cfg["model_type"] == "deepseek_v3" and routed:
            self.mlp = DeepseekV3MoE(cfg)
        else:
            self.mlp = LlamaMLP(cfg)
        self.residual_multiplier = cfg.get("residual_multiplier") if cfg["model_type"] == "granite" else None
        self.output_router_logits = cfg.get("output_router_logits", False)
        self.olmo2 = cfg["model_type"] == "olmo2"
        self.gemma2 = cfg["model_type"] in ("gemma2", "gemma3_text")
        if self.gemma2:  # Gemma2DecoderLayer: four norms, every other layer sliding; Gemma 3's: one in six global
            pattern = cfg.get("sliding_window_pattern", 6) if cfg["model_type"] == "gemma3_text" else 2
            self.is_sliding = bool((layer_idx + 1) % pattern)
            self.sliding_window = cfg.get("sliding_window", 4096)
            self.input_layernorm = rms_norm(cfg, h)
            self.post_attention_layernorm = rms_norm(cfg, h)
            self.pre_feedforward_layernorm = rms_norm(cfg, h)
            self.post_feedforward_layernorm = rms_norm(cfg, h)
        elif self.olmo2:
            self.post_attention_layernorm = rms_norm(cfg, h)
            self.post_feedforward_layernorm = rms_norm(cfg, h)
        else:
            self.input_layernorm = rms_norm(cfg, h)
            self.post_attention_layernorm = rms_norm(cfg, h)

    def forward_gemma2(self, ac, hidden_states, attention_mask, cos, sin, cache_position):
        # Gemma2DecoderLayer.forward (transformers 4.50-4.52) with eager
        # attention; Gemma3DecoderLayer's is the same with the sliding
        # layers' own rotary tables (its caller passes the ones to use)
        if self.is_sliding and attention_mask is not None:
            effective_seq_len = max(cache_position.shape[0], self.sliding_window)
            min_dtype = torch.finfo(attention_mask.dtype).min
            sliding_window_mask = torch.tril(
                torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-self.sliding_window)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            offset = cache_position[-1] - effective_seq_len + 1
            offset = torch.clamp(offset, min=0)
            mask_indexes = torch.arange(min(effective_seq_len, attention_mask.shape[-1]))
            mask_indexes += offset
            attention_mask = attention_mask[:, :, :, mask_indexes]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(ac, hidden_states, (cos, sin), attention_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        # under autocast the post norms return 16-bit rows and the residual
        # stream is fp32: CUDA's add, as MixedAdd, without CPU's fp32 copy
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(ac, hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states

    def forward(self, ac, hidden_states, attention_mask, position_ids, cos, sin, past_key_value=None,
                cache_position=None):
        if self.gemma2:
            return self.forward_gemma2(ac, hidden_states, attention_mask, cos, sin, cache_position)
        if self.olmo2:  # Olmo2DecoderLayer: each block's output normalized
            residual = hidden_states
            hidden_states, _ = self.self_attn(ac, hidden_states, (cos, sin), attention_mask, past_key_value)
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = add(residual, hidden_states)
            residual = hidden_states
            hidden_states = self.mlp(ac, hidden_states)
            hidden_states = self.post_feedforward_layernorm(hidden_states)
            return add(residual, hidden_states)
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(ac, hidden_states, (cos, sin), attention_mask, past_key_value)
        if self.residual_multiplier is not None:  # GraniteDecoderLayer
            hidden_states = add(residual, hidden_states * self.residual_multiplier)
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = self.mlp(ac, hidden_states)
            return add(residual, hidden_states * self.residual_multiplier)
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        if self.sparse:
            hidden_states, router_logits = self.mlp(ac, hidden_states)
        else:
            hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        if self.sparse and self.output_router_logits:  # outputs += (router_logits,)
            return hidden_states, router_logits
        return hidden_states


def run_layers(ac, layers, x, mask, position_ids, cache_position, tables, past_key_values=None):
    """Decoder layers in a row: one per HF checkpoint call, or a chunk of
    them under vramplan's every-K checkpointing. Each output replaces the
    last; the mixtures' router logits come back beside the hidden states."""
    router = ()
    for layer in layers:
        # Gemma 3's sliding layers take the second pair
        pe = tables[2:] if len(tables) == 4 and layer.is_sliding else tables[:2]
        x = layer(ac, x, mask, position_ids, pe[0], pe[1], past_key_values, cache_position=cache_position)
        if isinstance(x, tuple):
            x, logits = x
            router += (logits,)
            del logits
    return (x,) + router if router else x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        gemma3 = cfg["model_type"] == "gemma3_text"
        self.embed_tokens = ScaledEmbedding(cfg["vocab_size"], h) if gemma3 else nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = rms_norm(cfg, h)
        self.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.rotary_emb_local = None
        if gemma3:  # Gemma3TextModel: the sliding layers' tables
            self.rotary_emb_local = LlamaRotaryEmbedding(dict(cfg, rope_theta=cfg.get("rope_local_base_freq", 10000.0)))
        self.tied = cfg.get("tie_word_embeddings", cfg["model_type"] in ("gemma", "gemma2", "gemma3_text"))
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def causal_mask(self, input_tensor, cache_position, past_seen_tokens=0):
        # LlamaModel._update_causal_mask without an attention mask: target_length
        # is past_seen_tokens + sequence_length + 1; then
        # _prepare_4d_causal_attention_mask_with_cache_position, no padding mask
        dtype = input_tensor.dtype
        sequence_length = input_tensor.shape[1]
        target_length = past_seen_tokens + sequence_length + 1
        if self.cfg["model_type"] in ("gemma2", "gemma3_text"):  # Gemma2Model._update_causal_mask: the input's length
            target_length = sequence_length
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        if self.cfg["model_type"] in ("phi3", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "starcoder2"):
            # MistralModel's (and its descendants'): no triu; the window or-ed in
            diagonal_attend_mask = torch.arange(target_length) > cache_position.reshape(-1, 1)
            window = self.cfg.get("sliding_window")
            if window is not None:
                sliding_attend_mask = torch.arange(target_length) <= (cache_position.reshape(-1, 1) - window)
                diagonal_attend_mask.bitwise_or_(sliding_attend_mask)
            causal_mask *= diagonal_attend_mask
            return causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        return causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        if self.cfg["model_type"] == "granite":  # GraniteModel rebinds inputs_embeds
            inputs_embeds = inputs_embeds * self.cfg["embedding_multiplier"]
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        # _update_causal_mask: SDPA drops the mask while the keys are the
        # queries and fewer than the sliding window (_ignore_causal_mask_sdpa)
        window = self.cfg.get("sliding_window")
        keys = past_seen_tokens + inputs_embeds.shape[1]
        sdpa_ignores = (self.cfg.get("_attn_implementation") == "sdpa" and past_seen_tokens == 0
                        and (window is None or keys < window) and self.cfg["model_type"] not in ("gemma2", "gemma3_text"))
        causal_mask = None if sdpa_ignores else self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        tables = (cos, sin)
        if self.rotary_emb_local is not None:  # both pairs go to every layer
            tables = (cos, sin) + self.rotary_emb_local(hidden_states, position_ids)
        if self.cfg["model_type"] in ("gemma", "gemma2"):  # GemmaModel's normalizer (Gemma 3's is in its embedding)
            normalizer = torch.tensor(self.cfg["hidden_size"] ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        self.all_router_logits = ()
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # LlamaModel's call: the rotary tables go as a tuple, not as tensors
                outputs = checkpoint(lambda x, m, p, cp, t, c=chunk: run_layers(ac, c, x, m, p, cp, t),
                                     hidden_states, causal_mask, position_ids, cache_position, tables)
            else:
                outputs = run_layers(ac, chunk, hidden_states, causal_mask, position_ids, cache_position, tables,
                                     past_key_values)
            if isinstance(outputs, tuple):  # MixtralModel: all_router_logits += (layer_outputs[-1],)
                hidden_states, router_logits = outputs[0], outputs[1:]
                self.all_router_logits += router_logits
                del router_logits
            else:
                hidden_states = outputs
            del outputs
        hidden_states = self.norm(hidden_states)
        return hidden_states

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight


# ---------------------------------------------------------------- GPT-NeoX and Phi
# GPTNeoXForCausalLM and PhiForCausalLM as transformers 4.50-4.52 compute
# them with eager attention: LLaMA's mask, rotary tables and eager core.


class PartialRotaryAttention(nn.Module):
    """The attention core both share with LLaMA (no GQA in GPT-NeoX)."""

    eager = LlamaAttention.eager

    def setup(self, cfg, layer_idx, heads, kv_heads, head_dim):
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv, self.head_dim = heads, kv_heads, head_dim
        self.num_key_value_groups = heads // kv_heads
        self.scaling = head_dim ** -0.5
        self.softcap = None
        self.attention_dropout = cfg.get("attention_dropout", 0.0)


class GPTNeoXAttention(PartialRotaryAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.setup(cfg, layer_idx, heads, heads, h // heads)
        bias = cfg.get("attention_bias", True)
        self.query_key_value = nn.Linear(h, 3 * h, bias=bias)
        self.dense = nn.Linear(h, h, bias=bias)

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, layer_past=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, 3 * self.head_dim)
        qkv = linear(ac, hidden_states, self.query_key_value.weight, self.query_key_value.bias)
        qkv = qkv.view(hidden_shape).transpose(1, 2)
        query_states, key_states, value_states = qkv.chunk(3, dim=-1)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb_phi3(query_states, key_states, cos, sin)
        if layer_past is not None:
            key_states, value_states = layer_past.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.dense.weight, self.dense.bias)
        return attn_output, attn_weights


class PhiAttention(PartialRotaryAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        self.setup(cfg, layer_idx, heads, kv, h // heads)
        self.rotary_ndims = int(self.head_dim * cfg.get("partial_rotary_factor", 0.5))
        self.q_proj = nn.Linear(h, heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, kv * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, kv * self.head_dim, bias=True)
        self.dense = nn.Linear(heads * self.head_dim, h, bias=True)

    def forward(self, ac, hidden_states, attention_mask, position_embeddings, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape).transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        # the parts are this frame's locals until it returns
        query_rot, query_pass = query_states[..., : self.rotary_ndims], query_states[..., self.rotary_ndims:]
        key_rot, key_pass = key_states[..., : self.rotary_ndims], key_states[..., self.rotary_ndims:]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.dense.weight, self.dense.bias)
        return attn_output, attn_weights


class TwoLinearMLP(nn.Module):
    """GPTNeoXMLP (dense_h_to_4h, dense_4h_to_h) and PhiMLP (fc1, fc2)."""

    def __init__(self, h, inner, act, names):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(h, inner))
        setattr(self, names[1], nn.Linear(inner, h))
        self.act = act

    def forward(self, ac, x):
        up, down = getattr(self, self.names[0]), getattr(self, self.names[1])
        x = linear(ac, x, up.weight, up.bias)
        x = activation(ac, self.act, x)
        return linear(ac, x, down.weight, down.bias)


class GPTNeoXLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-5)
        self.use_parallel_residual = cfg.get("use_parallel_residual", True)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.attention = GPTNeoXAttention(cfg, layer_idx)
        self.mlp = TwoLinearMLP(h, cfg.get("intermediate_size") or 4 * h, cfg.get("hidden_act", "gelu"),
                                ("dense_h_to_4h", "dense_4h_to_h"))

    def forward(self, ac, hidden_states, attention_mask, cos, sin, layer_past=None):
        # under autocast the branches return 16-bit rows onto the fp32
        # stream: CUDA's add, as MixedAdd, without CPU's fp32 copy
        attn_output, attn_weights = self.attention(ac, layer_norm(ac, self.input_layernorm, hidden_states),
                                                   attention_mask, (cos, sin), layer_past)
        attn_output = dropout(attn_output, self.hidden_dropout, self.training)
        if self.use_parallel_residual:
            mlp_output = self.mlp(ac, layer_norm(ac, self.post_attention_layernorm, hidden_states))
            mlp_output = dropout(mlp_output, self.hidden_dropout, self.training)
            return add(add(mlp_output, attn_output), hidden_states)
        attn_output = add(attn_output, hidden_states)
        mlp_output = self.mlp(ac, layer_norm(ac, self.post_attention_layernorm, attn_output))
        mlp_output = dropout(mlp_output, self.hidden_dropout, self.training)
        return add(mlp_output, attn_output)


class PhiDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        # registered as PhiDecoderLayer registers them: the norm after the
        # attention and the MLP (a for-loop optimizer's order)
        self.self_attn = PhiAttention(cfg, layer_idx)
        self.mlp = TwoLinearMLP(h, cfg["intermediate_size"], cfg.get("hidden_act", "gelu_new"), ("fc1", "fc2"))
        self.input_layernorm = nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-5))
        self.resid_pdrop = cfg.get("resid_pdrop", 0.0)

    def forward(self, ac, hidden_states, attention_mask, cos, sin, past_key_value=None):
        residual = hidden_states
        hidden_states = layer_norm(ac, self.input_layernorm, hidden_states)
        attn_outputs, self_attn_weights = self.self_attn(ac, hidden_states, attention_mask, (cos, sin), past_key_value)
        attn_outputs = dropout(attn_outputs, self.resid_pdrop, self.training)
        feed_forward_hidden_states = dropout(self.mlp(ac, hidden_states), self.resid_pdrop, self.training)
        return add(add(attn_outputs, feed_forward_hidden_states), residual)


class ParallelDecoder(nn.Module):
    """GPTNeoXModel (embed_in, emb_dropout, final_layer_norm, embed_out) and
    PhiModel (embed_tokens, embed_dropout, final_layernorm, lm_head with a
    bias): LLaMA's mask and partial rotary tables."""

    def __init__(self, cfg):
        super().__init__()
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.cfg = cfg
        neox = cfg["model_type"] == "gpt_neox"
        layer = GPTNeoXLayer if neox else PhiDecoderLayer
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([layer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.final_norm = nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-5))
        factor = cfg.get("rotary_pct", 0.25) if neox else cfg.get("partial_rotary_factor", 0.5)
        theta = cfg.get("rotary_emb_base", 10000.0) if neox else cfg.get("rope_theta", 10000.0)
        self.rotary_emb = LlamaRotaryEmbedding(dict(cfg, head_dim=h // heads, partial_rotary_factor=factor,
                                                    rope_theta=theta))
        self.embed_dropout = cfg.get("hidden_dropout", 0.0) if neox else cfg.get("embd_pdrop", 0.0)
        self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=not neox)

    causal_mask = Llama.causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = dropout(inputs_embeds, self.embed_dropout, self.training)
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # the call passes the mask, position_ids, cache_position and the tables' tuple
                hidden_states = checkpoint(
                    lambda x, m, p, cp, pe, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m, pe[0], pe[1])),
                    hidden_states, causal_mask, position_ids, cache_position, (cos, sin))
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, cos, sin, past_key_values)
        return layer_norm(ac, self.final_norm, hidden_states)

    def head_weight(self):
        return self.lm_head.weight

    def head_bias(self):
        return self.lm_head.bias


# ---------------------------------------------------------------- StarCoder2
# Starcoder2ForCausalLM as transformers 4.50-4.52 computes it with eager
# attention: MistralModel's mask, rotary tables and eager core; LayerNorms
# with biases; residual_dropout inside the attention and the MLP.


class Starcoder2Attention(LlamaAttention):
    def __init__(self, cfg, layer_idx):
        # q/k/v/o with biases when use_bias (LlamaAttention's attention_bias)
        super().__init__(dict(cfg, attention_bias=cfg.get("use_bias", True)), layer_idx)
        self.residual_dropout = cfg.get("residual_dropout", 0.0)

    def forward(self, ac, hidden_states, position_embeddings, attention_mask, past_key_value=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias).view(hidden_shape).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias).view(hidden_shape).transpose(1, 2)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.attend(ac, query_states, key_states, value_states, attention_mask)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = linear(ac, attn_output, self.o_proj.weight, self.o_proj.bias)
        attn_output = dropout(attn_output, self.residual_dropout, self.training)
        return attn_output, attn_weights


class Starcoder2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, bias = cfg["hidden_size"], cfg.get("use_bias", True)
        self.c_fc = nn.Linear(h, cfg["intermediate_size"], bias=bias)
        self.c_proj = nn.Linear(cfg["intermediate_size"], h, bias=bias)
        self.act = cfg.get("hidden_act", "gelu_pytorch_tanh")
        self.residual_dropout = cfg.get("residual_dropout", 0.0)

    def forward(self, ac, hidden_states):
        hidden_states = linear(ac, hidden_states, self.c_fc.weight, self.c_fc.bias)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = linear(ac, hidden_states, self.c_proj.weight, self.c_proj.bias)
        return dropout(hidden_states, self.residual_dropout, self.training)


class Starcoder2DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("norm_epsilon", 1e-5)
        # MistralDecoderLayer's order: self_attn, mlp, then the norms
        self.self_attn = Starcoder2Attention(cfg, layer_idx)
        self.mlp = Starcoder2MLP(cfg)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.is_sliding = False

    def forward(self, ac, hidden_states, attention_mask, position_ids, cos, sin, past_key_value=None,
                cache_position=None):
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = layer_norm(ac, self.input_layernorm, hidden_states)
        hidden_states, self_attn_weights = self.self_attn(ac, hidden_states, (cos, sin), attention_mask,
                                                          past_key_value)
        hidden_states = add(residual, hidden_states)
        residual = hidden_states
        hidden_states = layer_norm(ac, self.post_attention_layernorm, hidden_states)
        hidden_states = self.mlp(ac, hidden_states)
        hidden_states = add(residual, hidden_states)
        return hidden_states


class Starcoder2(nn.Module):
    """Starcoder2Model: embed_tokens, layers, norm, rotary_emb (MistralModel's
    order); embedding_dropout after the embeddings, before the tables."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.layers = nn.ModuleList([Starcoder2DecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = nn.LayerNorm(h, eps=cfg.get("norm_epsilon", 1e-5))
        self.rotary_emb = LlamaRotaryEmbedding(cfg)
        self.embedding_dropout = cfg.get("embedding_dropout", 0.0)
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    causal_mask = Llama.causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self.causal_mask(inputs_embeds, cache_position, past_seen_tokens)
        hidden_states = inputs_embeds
        hidden_states = dropout(hidden_states, self.embedding_dropout, self.training)
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        tables = (cos, sin)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # MistralModel's call: the rotary tables go as a tuple
                hidden_states = checkpoint(lambda x, m, p, cp, t, c=chunk: run_layers(ac, c, x, m, p, cp, t),
                                           hidden_states, causal_mask, position_ids, cache_position, tables)
            else:
                hidden_states = run_layers(ac, chunk, hidden_states, causal_mask, position_ids, cache_position, tables,
                                           past_key_values)
        return layer_norm(ac, self.norm, hidden_states)

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight


# ---------------------------------------------------------------- OPT
# OPTForCausalLM as transformers 4.50-4.52 computes it with eager attention
# (do_layer_norm_before, word_embed_proj_dim = hidden_size): the decoder
# makes its own all-ones attention mask, a [b, 1, s, s] causal mask merged
# with it, and positions counted from it, offset by 2.


class OPTAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h = cfg["hidden_size"]
        self.layer_idx = layer_idx
        self.num_heads = cfg["num_attention_heads"]
        self.head_dim = h // self.num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = cfg.get("attention_dropout", 0.0)
        bias = cfg.get("enable_bias", True)
        # registered as OPTAttention registers them
        self.k_proj = nn.Linear(h, h, bias=bias)
        self.v_proj = nn.Linear(h, h, bias=bias)
        self.q_proj = nn.Linear(h, h, bias=bias)
        self.out_proj = nn.Linear(h, h, bias=bias)

    def eager(self, ac, query, key, value, attention_mask, scaling):
        # eager_attention_forward (siglip's), called with scaling=1.0
        attn_weights = torch.matmul(ac.down(query), ac.down(key).transpose(-1, -2)) * scaling
        if attention_mask is not None:
            # 16-bit scores under autocast plus the fp32 mask: CUDA's add (MixedAdd)
            attn_weights = add(attn_weights, attention_mask)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = dropout(attn_weights, self.dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value))
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    def forward(self, ac, hidden_states, attention_mask, past_key_value=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = linear(ac, hidden_states, self.q_proj.weight, self.q_proj.bias) * self.scaling
        query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = linear(ac, hidden_states, self.k_proj.weight, self.k_proj.bias)
        value_states = linear(ac, hidden_states, self.v_proj.weight, self.v_proj.bias)
        key_states = key_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        if past_key_value is not None:
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx)
        attn_output, attn_weights = self.eager(ac, query_states, key_states, value_states, attention_mask, 1.0)
        attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
        attn_output = linear(ac, attn_output, self.out_proj.weight, self.out_proj.bias)
        attn_weights = None  # not output_attentions
        return attn_output, attn_weights


class OPTDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        h, bias = cfg["hidden_size"], cfg.get("enable_bias", True)
        self.self_attn = OPTAttention(cfg, layer_idx)
        self.dropout = cfg.get("dropout", 0.1)
        self.act = cfg.get("activation_function", "relu")
        self.self_attn_layer_norm = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, cfg["ffn_dim"], bias=bias)
        self.fc2 = nn.Linear(cfg["ffn_dim"], h, bias=bias)
        self.final_layer_norm = nn.LayerNorm(h)

    def forward(self, ac, hidden_states, attention_mask, past_key_value=None):
        # under autocast the branches' 16-bit outputs join the fp32 stream: CUDA's mixed add
        residual = hidden_states
        hidden_states = layer_norm(ac, self.self_attn_layer_norm, hidden_states)
        hidden_states, self_attn_weights = self.self_attn(ac, hidden_states, attention_mask, past_key_value)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = add(residual, hidden_states)
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        hidden_states = layer_norm(ac, self.final_layer_norm, hidden_states)
        hidden_states = linear(ac, hidden_states, self.fc1.weight, self.fc1.bias)
        hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = linear(ac, hidden_states, self.fc2.weight, self.fc2.bias)
        hidden_states = dropout(hidden_states, self.dropout, self.training)
        hidden_states = add(residual, hidden_states).view(hidden_states_shape)
        return hidden_states


class OPT(nn.Module):
    """OPTDecoder: embed_tokens, embed_positions (max_position_embeddings + 2
    rows), final_layer_norm, then the layers; the head tied to embed_tokens."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], h)
        self.offset = 2
        self.embed_positions = nn.Embedding(cfg["max_position_embeddings"] + self.offset, h)
        self.final_layer_norm = nn.LayerNorm(h)
        self.layers = nn.ModuleList([OPTDecoderLayer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.tied = cfg.get("tie_word_embeddings", True)
        if not self.tied:
            self.lm_head = nn.Linear(h, cfg["vocab_size"], bias=False)

    def update_causal_mask(self, attention_mask, input_tensor, cache_position):
        # _update_causal_mask for eager attention, then
        # _prepare_4d_causal_attention_mask_with_cache_position with the 2-D mask
        dtype = input_tensor.dtype
        sequence_length = input_tensor.shape[1]
        target_length = attention_mask.shape[-1]
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
        causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
        mask_length = attention_mask.shape[-1]
        # a 16-bit mask plus the fp32 ones: CUDA's add (MixedAdd), without CPU's fp32 copy
        padding_mask = add(causal_mask[:, :, :, :mask_length], attention_mask[:, None, None, :])
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
        return causal_mask

    def embed(self, input_ids):
        return self.embed_tokens(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        seq_length = past_seen_tokens + inputs_embeds.shape[1]
        attention_mask = torch.ones(inputs_embeds.shape[0], seq_length)
        causal_mask = self.update_causal_mask(attention_mask, inputs_embeds, cache_position)
        position_ids = torch.cumsum(attention_mask, dim=1)
        position_ids = (position_ids * attention_mask - 1).long()
        position_ids = position_ids[:, past_seen_tokens:]
        # OPTLearnedPositionalEmbedding.forward: super().forward(position_ids + self.offset)
        pos_embeds = self.embed_positions(position_ids + self.offset)
        hidden_states = inputs_embeds + pos_embeds
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:  # the call passes the mask, position_ids and cache_position
                hidden_states = checkpoint(lambda x, m, p, cp, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m)),
                                           hidden_states, causal_mask, position_ids, cache_position)
            else:
                hidden_states = chunk[0](ac, hidden_states, causal_mask, past_key_values)
        return layer_norm(ac, self.final_layer_norm, hidden_states)

    def head_weight(self):
        return self.embed_tokens.weight if self.tied else self.lm_head.weight


# ---------------------------------------------------------------- BLOOM
# BloomForCausalLM as transformers 4.26-4.27 computes it.


def bloom_gelu_forward(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def bloom_gelu_back(g, x):
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


class BloomGeLU(torch.autograd.Function):
    """modeling_bloom.GeLUFunction: keeps its input, computes without autograd."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return bloom_gelu_forward(input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return bloom_gelu_back(grad_output, input)


def dropout_add(x, residual, prob, training):
    out = dropout(x, prob, training)
    out = add(residual, out)  # the fp32 stream plus a 16-bit output under autocast: CUDA's add
    return out


def build_alibi_tensor(attention_mask, num_heads, dtype):
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


class BloomAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.num_heads = cfg["n_head"]
        self.head_dim = h // self.num_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.query_key_value = nn.Linear(h, 3 * h, bias=True)
        self.dense = nn.Linear(h, h)
        self.attention_dropout = cfg.get("attention_dropout", 0.0)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)

    def _merge_heads(self, x):
        batch_size_and_num_heads, seq_length, _ = x.shape
        batch_size = batch_size_and_num_heads // self.num_heads
        x = x.view(batch_size, self.num_heads, seq_length, self.head_dim)
        x = x.permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, self.num_heads * self.head_dim)

    def forward(self, ac, hidden_states, residual, alibi, attention_mask, presents=None):
        fused_qkv = linear(ac, hidden_states, self.query_key_value.weight, self.query_key_value.bias)
        batch_size, q_length, _ = fused_qkv.shape
        viewed = fused_qkv.view(batch_size, q_length, self.num_heads, 3, self.head_dim)  # _split_heads
        (query_layer, key_layer, value_layer) = viewed[..., 0, :], viewed[..., 1, :], viewed[..., 2, :]
        del viewed
        query_layer = query_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        key_layer = key_layer.permute(0, 2, 3, 1).reshape(batch_size * self.num_heads, self.head_dim, q_length)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        if presents is not None:  # use_cache: present = (key_layer, value_layer)
            presents.append((key_layer, value_layer))
        # alibi.baddbmm: on autocast's lower-precision list, the bias cast too
        matmul_result = torch.baddbmm(ac.down(alibi), ac.down(query_layer), ac.down(key_layer), beta=1.0,
                                      alpha=self.inv_norm_factor)
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, -1)
        input_dtype = attention_scores.dtype
        if input_dtype == torch.float16:
            attention_scores = attention_scores.to(torch.float)
        attn_weights = torch.masked_fill(attention_scores, attention_mask, torch.finfo(attention_scores.dtype).min)
        attention_probs = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(input_dtype)
        attention_probs = dropout(attention_probs, self.attention_dropout, self.training)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, -1)
        context_layer = torch.bmm(ac.down(attention_probs_reshaped), ac.down(value_layer))
        context_layer = self._merge_heads(context_layer)
        output_tensor = linear(ac, context_layer, self.dense.weight, self.dense.bias)
        output_tensor = dropout_add(output_tensor, residual, self.hidden_dropout, self.training)
        return output_tensor


class BloomBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.input_layernorm = nn.LayerNorm(h, eps=eps)
        self.self_attention = BloomAttention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(h, eps=eps)
        self.dense_h_to_4h = nn.Linear(h, 4 * h)
        self.dense_4h_to_h = nn.Linear(4 * h, h)
        self.hidden_dropout = cfg.get("hidden_dropout", 0.0)

    def mlp(self, ac, hidden_states, residual):
        hidden_states = BloomGeLU.apply(linear(ac, hidden_states, self.dense_h_to_4h.weight, self.dense_h_to_4h.bias))
        intermediate_output = linear(ac, hidden_states, self.dense_4h_to_h.weight, self.dense_4h_to_h.bias)
        return dropout_add(intermediate_output, residual, self.hidden_dropout, self.training)

    def forward(self, ac, hidden_states, alibi, attention_mask, presents=None):
        layernorm_output = layer_norm(ac, self.input_layernorm, hidden_states)
        residual = hidden_states
        attention_output = self.self_attention(ac, layernorm_output, residual, alibi, attention_mask, presents)
        layernorm_output = layer_norm(ac, self.post_attention_layernorm, attention_output)
        residual = attention_output
        return self.mlp(ac, layernorm_output, residual)


class Bloom(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.n_head = cfg["n_head"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.word_embeddings_layernorm = nn.LayerNorm(h, eps=eps)
        self.h = nn.ModuleList([BloomBlock(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(h, eps=eps)

    def prepare_attn_mask(self, attention_mask, input_shape):
        # BloomModel._prepare_attn_mask: _make_causal_mask | _expand_mask
        batch_size, target_length = input_shape
        mask = torch.empty((target_length, target_length), dtype=torch.bool)
        seq_ids = torch.arange(target_length)
        mask[:, 0:] = seq_ids[:, None] < seq_ids[None, :]
        combined_attention_mask = mask[None, None, :, :].expand(batch_size, 1, target_length, target_length)
        expanded_attn_mask = ~(attention_mask[:, None, None, :].to(torch.bool))
        expanded_attn_mask = expanded_attn_mask.expand(batch_size, 1, target_length, target_length)
        return expanded_attn_mask | combined_attention_mask

    def embed(self, input_ids):
        return self.word_embeddings(input_ids)

    def body(self, ac, input_ids, checkpoint, inputs_embeds=None, past_key_values=None):
        if past_key_values is not None and not isinstance(past_key_values, list):
            raise NotImplementedError("prefix tuning is mirrored on LLaMA only")
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        hidden_states = layer_norm(ac, self.word_embeddings_layernorm, inputs_embeds)
        batch_size, seq_length = inputs_embeds.shape[:2]
        attention_mask = torch.ones((batch_size, seq_length))
        alibi = build_alibi_tensor(attention_mask, self.n_head, dtype=hidden_states.dtype)
        causal_mask = self.prepare_attn_mask(attention_mask, (batch_size, seq_length))
        for chunk in chunks(self.h, checkpoint):
            if checkpoint:  # BloomModel's call: hidden_states, alibi, causal_mask go as tensors
                hidden_states = checkpoint(lambda x, a, m, c=chunk: in_turn(c, x, lambda b, y: b(ac, y, a, m)),
                                           hidden_states, alibi, causal_mask)
            else:
                hidden_states = chunk[0](ac, hidden_states, alibi, causal_mask, past_key_values)
        hidden_states = layer_norm(ac, self.ln_f, hidden_states)
        return hidden_states

    def head_weight(self):
        return self.word_embeddings.weight


# ---------------------------------------------------------------- T5


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        # pow and rsqrt are on autocast's fp32 list; their inputs are fp32 here
        variance = Mean2x.apply(hidden_states.to(torch.float32).pow(2))
        # a 16-bit model's rows times the fp32 rsqrt: CUDA's mixed-dtype mul
        hidden_states = mul(hidden_states, torch.rsqrt(variance + self.variance_epsilon))
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    """T5DenseActDense, or T5DenseGatedActDense when gated."""

    def __init__(self, cfg):
        super().__init__()
        d_model, d_ff = cfg["d_model"], cfg["d_ff"]
        proj = cfg.get("feed_forward_proj", "relu")
        self.gated = proj.startswith("gated-")
        self.act = "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1]
        if self.gated:
            self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
            self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        else:
            self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states):
        if self.gated:
            hidden_gelu = activation(ac, self.act, linear(ac, hidden_states, self.wi_0.weight))
            hidden_linear = linear(ac, hidden_states, self.wi_1.weight)
            hidden_states = mul(hidden_gelu, hidden_linear)
        else:
            hidden_states = linear(ac, hidden_states, self.wi.weight)
            hidden_states = activation(ac, self.act, hidden_states)
        hidden_states = dropout(hidden_states, self.p, self.training)
        if hidden_states.dtype != self.wo.weight.dtype:
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        hidden_states = linear(ac, hidden_states, self.wo.weight)
        return hidden_states


class T5Attention(nn.Module):
    def __init__(self, cfg, has_relative_attention_bias=False, is_decoder=False, layer_idx=0):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = cfg.get("relative_attention_num_buckets", 32)
        self.relative_attention_max_distance = cfg.get("relative_attention_max_distance", 128)
        self.n_heads = cfg["num_heads"]
        self.key_value_proj_dim = cfg.get("d_kv", 64)
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.dropout = cfg.get("dropout_rate", 0.1)
        self.layer_idx = layer_idx
        self.gradient_checkpointing = False
        d_model = cfg["d_model"]
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, cache_position=None):
        if cache_position is None:
            context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        else:
            context_position = cache_position[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder), num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        values = values.permute([2, 0, 1]).unsqueeze(0)
        return values

    def forward(self, ac, hidden_states, mask=None, key_value_states=None, position_bias=None, cache=None,
                query_length=None, cache_position=None):
        batch_size, seq_length = hidden_states.shape[:2]
        is_cross_attention = key_value_states is not None
        query_states = linear(ac, hidden_states, self.q.weight)
        query_states = query_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        current_states = key_value_states if is_cross_attention else hidden_states
        key_states = linear(ac, current_states, self.k.weight)
        value_states = linear(ac, current_states, self.v.weight)
        key_states = key_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        value_states = value_states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        if cache is not None:  # EncoderDecoderCache: the self- or the cross-attention cache
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
        scores = torch.matmul(ac.down(query_states), ac.down(key_states).transpose(3, 2))
        if position_bias is None:
            key_length = key_states.shape[-2]
            real_seq_length = query_length if query_length is not None else cache_position[-1] + 1
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_length), dtype=scores.dtype)
                if self.gradient_checkpointing and self.training:
                    position_bias.requires_grad = True
            else:
                position_bias = self.compute_bias(real_seq_length, key_length, cache_position=cache_position)
                position_bias = position_bias[:, :, -seq_length:, :]
            if mask is not None:
                causal_mask = mask[:, :, :, : key_states.shape[-2]]
                position_bias = position_bias + causal_mask
        position_bias_masked = position_bias
        scores += position_bias_masked
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = dropout(attn_weights, self.dropout, self.training)
        attn_output = torch.matmul(ac.down(attn_weights), ac.down(value_states))
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.view(batch_size, -1, self.inner_dim)
        attn_output = linear(ac, attn_output, self.o.weight)
        return attn_output, position_bias


class T5LayerAttention(nn.Module):
    """T5LayerSelfAttention and T5LayerCrossAttention: x + dropout(attention(norm(x)))."""

    def __init__(self, cfg, has_relative_attention_bias, is_decoder, layer_idx):
        super().__init__()
        self.attention = T5Attention(cfg, has_relative_attention_bias, is_decoder, layer_idx)
        self.layer_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states, mask, position_bias, key_value_states=None, cache=None, query_length=None,
                cache_position=None):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.attention(ac, normed_hidden_states, mask, key_value_states, position_bias, cache,
                                          query_length, cache_position)
        hidden_states = add(hidden_states, dropout(attention_output[0], self.p, self.training))
        return hidden_states, attention_output[1]


class T5Block(nn.Module):
    def __init__(self, cfg, has_relative_attention_bias, is_decoder, layer_idx):
        super().__init__()
        self.is_decoder = is_decoder
        self.self_attention = T5LayerAttention(cfg, has_relative_attention_bias, is_decoder, layer_idx)
        if is_decoder:
            self.cross_attention = T5LayerAttention(cfg, False, is_decoder, layer_idx)
        self.ff_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.DenseReluDense = T5DenseActDense(cfg)
        self.p = cfg.get("dropout_rate", 0.1)

    def forward(self, ac, hidden_states, attention_mask, position_bias, encoder_hidden_states,
                encoder_attention_mask, encoder_decoder_position_bias, cache, cache_position):
        hidden_states, position_bias = self.self_attention(
            ac, hidden_states, attention_mask, position_bias, cache=cache and cache[0], cache_position=cache_position)
        if self.is_decoder:
            hidden_states, encoder_decoder_position_bias = self.cross_attention(
                ac, hidden_states, encoder_attention_mask, encoder_decoder_position_bias,
                key_value_states=encoder_hidden_states, cache=cache and cache[1], query_length=cache_position[-1] + 1)
        # T5LayerFF
        forwarded_states = self.ff_norm(hidden_states)
        forwarded_states = self.DenseReluDense(ac, forwarded_states)
        hidden_states = add(hidden_states, dropout(forwarded_states, self.p, self.training))
        # (hidden_states, position_bias) and, in the decoder, the cross-attention's
        if self.is_decoder:
            return hidden_states, position_bias, encoder_decoder_position_bias
        return hidden_states, position_bias


class T5Stack(nn.Module):
    def __init__(self, cfg, embed_tokens, is_decoder):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.is_decoder = is_decoder
        layers = (cfg.get("num_decoder_layers") or cfg["num_layers"]) if is_decoder else cfg["num_layers"]
        self.block = nn.ModuleList([T5Block(cfg, i == 0, is_decoder, i) for i in range(layers)])
        self.final_layer_norm = T5LayerNorm(cfg["d_model"], cfg.get("layer_norm_epsilon", 1e-6))
        self.p = cfg.get("dropout_rate", 0.1)

    @staticmethod
    def causal_mask(attention_mask, sequence_length, target_length, dtype, cache_position, batch_size):
        # _prepare_4d_causal_attention_mask_with_cache_position
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        causal_mask = causal_mask.clone()
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
        return causal_mask

    def run_blocks(self, ac, chunk, h, m, pb, e, em, epb, cp):
        """A checkpointed call's blocks (one, as HF's, or K under every-K):
        each block's outputs feed the next as T5Stack's loop passes them; the
        call returns the last block's."""
        for layer in chunk:
            outputs = layer(ac, h, m, pb, e, em, epb, None, cp)
            h, pb = outputs[0], outputs[1]
            if self.is_decoder:
                epb = outputs[2]
        return outputs

    def forward(self, ac, input_ids, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                cache=None, checkpoint=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = inputs_embeds.shape[:2]
        past_length = cache[0].get_seq_length() if cache is not None else 0
        cache_position = torch.arange(past_length, past_length + seq_length)
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, past_length + seq_length)
        if self.is_decoder:
            causal_mask = self.causal_mask(attention_mask, seq_length, attention_mask.shape[-1], inputs_embeds.dtype,
                                           cache_position, batch_size)
        else:
            causal_mask = attention_mask[:, None, None, :]
            causal_mask = causal_mask.to(dtype=inputs_embeds.dtype)
            causal_mask = (1.0 - causal_mask) * torch.finfo(inputs_embeds.dtype).min
        encoder_extended_attention_mask = None
        if self.is_decoder:  # invert_attention_mask, in the model's dtype
            dtype = self.final_layer_norm.weight.dtype
            encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :].to(dtype=dtype)
            encoder_extended_attention_mask = (1.0 - encoder_extended_attention_mask) * torch.finfo(dtype).min
        position_bias = None
        encoder_decoder_position_bias = None
        hidden_states = dropout(inputs_embeds, self.p, self.training)
        for chunk in chunks(list(self.block), checkpoint):
            if checkpoint:  # T5Stack's call: every tensor argument goes through the checkpoint
                layer_outputs = checkpoint(
                    lambda h, m, pb, e, em, epb, cp, chunk=chunk: self.run_blocks(ac, chunk, h, m, pb, e, em, epb, cp),
                    hidden_states, causal_mask, position_bias, encoder_hidden_states, encoder_extended_attention_mask,
                    encoder_decoder_position_bias, cache_position)
            else:
                layer_cache = None if cache is None else (cache[0], cache[1])
                layer_outputs = chunk[0](
                    ac, hidden_states, causal_mask, position_bias, encoder_hidden_states,
                    encoder_extended_attention_mask, encoder_decoder_position_bias, layer_cache, cache_position)
            hidden_states = layer_outputs[0]
            position_bias = layer_outputs[1]
            if self.is_decoder:
                encoder_decoder_position_bias = layer_outputs[2]
            del layer_outputs
        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = dropout(hidden_states, self.p, self.training)
        return hidden_states


class T5ForConditionalGeneration(nn.Module):
    """transformers 4.46-4.52: the shared embedding, the encoder, the labels
    shifted right into the decoder, the head (its input scaled when tied),
    CrossEntropyLoss; returns (loss, outputs) the way Seq2SeqLMOutput keeps
    them (logits, the decoder's caches, the encoder's last hidden state)."""

    def __init__(self, cfg):
        super().__init__()
        self.model_dim = cfg["d_model"]
        self.tied = cfg.get("tie_word_embeddings", True)
        self.shared = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.encoder = T5Stack(cfg, self.shared, False)
        self.decoder = T5Stack(cfg, self.shared, True)
        if not self.tied:
            self.lm_head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)

    @staticmethod
    def _shift_right(input_ids, decoder_start_token_id=0, pad_token_id=0):
        shifted_input_ids = input_ids.new_zeros(input_ids.shape)
        shifted_input_ids[..., 1:] = input_ids[..., :-1].clone()
        shifted_input_ids[..., 0] = decoder_start_token_id
        shifted_input_ids.masked_fill_(shifted_input_ids == -100, pad_token_id)
        return shifted_input_ids

    def forward(self, ac, input_ids, labels, checkpoint=None, attention_mask=None):
        if checkpoint:  # gradient_checkpointing_enable()
            for module in self.modules():
                if isinstance(module, T5Attention):
                    module.gradient_checkpointing = True
        prompt = getattr(self, "prompt", None)
        inputs_embeds = prompts = None
        if prompt is not None:  # PeftModelForSeq2SeqLM.forward: the encoder's inputs get the first set
            inputs_embeds = self.shared(input_ids)
            prefix_attention_mask = torch.ones(input_ids.shape[0], prompt.num_virtual_tokens)
            attention_mask = torch.cat((prefix_attention_mask, attention_mask), dim=1)
            del prefix_attention_mask
            prompts = prompt.get_prompt(input_ids.shape[0], inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts[:, : prompt.num_virtual_tokens], inputs_embeds), dim=1)
        prefix = getattr(self, "prefix", None)
        cache = None
        if prefix is not None:  # PeftModelForSeq2SeqLM.forward: past_key_values=self.get_prompt(batch_size)
            cache = prefix.get_prompt(input_ids.shape[0], self.shared.weight.dtype)
        hidden_states = self.encoder(ac, input_ids, attention_mask, checkpoint=checkpoint, inputs_embeds=inputs_embeds)
        decoder_input_ids = self._shift_right(labels)
        # config.use_cache: EncoderDecoderCache(DynamicCache(), DynamicCache()); off under checkpointing
        use_cache = getattr(self, "use_cache", True) and not checkpoint
        if cache is None and use_cache:
            cache = (DynamicCache(), DynamicCache())
        # decoder_outputs keeps the decoder's last hidden state until the model returns
        decoder_outputs = sequence_output = self.decoder(ac, decoder_input_ids, None, hidden_states, attention_mask,
                                                         cache, checkpoint)
        if self.tied:
            sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = linear(ac, sequence_output, self.shared.weight if self.tied else self.lm_head.weight)
        log_probs = nn.functional.log_softmax(ac.up(lm_logits.view(-1, lm_logits.size(-1))), dim=-1)
        loss = nn.functional.nll_loss(log_probs, labels.view(-1), ignore_index=-100)
        del log_probs, prompts, inputs_embeds, decoder_outputs
        return loss, (lm_logits, cache, hidden_states)


# ---------------------------------------------------------------- CausalLM


def causal_lm_loss(ac, logits, labels, vocab_size, ignore_index=-100):
    # transformers.loss.loss_utils.ForCausalLMLoss
    logits = logits.float()
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    log_probs = nn.functional.log_softmax(logits, dim=-1)
    return nn.functional.nll_loss(log_probs, shift_labels, ignore_index=ignore_index)


class FusedCrossEntropy(torch.autograd.Function):
    """flash_attn/ops/triton/cross_entropy.py's CrossEntropyLossFunction with
    inplace_backward=True, as it allocates: losses, lse and z_losses (fp32,
    one per row) made empty for the kernel, which reads the 16-bit logits
    as they are; (logits, lse, labels) saved; backward writes the gradient
    into the logits themselves. The Triton kernel's values are not
    computed: only its tensors matter here."""

    @staticmethod
    def forward(ctx, logits, labels):
        n_rows = logits.shape[0]
        losses = torch.empty(n_rows, dtype=torch.float32)
        lse = torch.empty(n_rows, dtype=torch.float32)
        z_losses = torch.empty(n_rows, dtype=torch.float32)
        losses.zero_()
        ctx.save_for_backward(logits, lse, labels)
        ctx.mark_non_differentiable(z_losses)
        return losses, z_losses

    @staticmethod
    def backward(ctx, grad_losses, grad_z_losses):
        logits, lse, labels = ctx.saved_tensors
        dlogits = logits  # inplace_backward: the kernel writes softmax - one-hot here
        return dlogits, None


def fused_causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):
    # ForCausalLMLoss's label shift, then flash_attn.losses.cross_entropy.
    # CrossEntropyLoss(inplace_backward=True) on the 16-bit logits (no upcast)
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous().view(-1)
    loss, z_loss = FusedCrossEntropy.apply(logits.view(-1, vocab_size), shift_labels)
    del z_loss
    return loss.sum() / (shift_labels != ignore_index).sum()


def ce_with_chunked_output_loss(logits, labels, num_output_chunks, ignore_index=-100):
    # torchtune/modules/loss/ce_chunked_output_loss.py: CEWithChunkedOutputLoss.forward
    total_elements = (labels != ignore_index).sum()
    labels = [target_chunk.reshape(-1) for target_chunk in labels.tensor_split(num_output_chunks, dim=1)]
    logits = [logit_chunk.reshape(-1, logit_chunk.size(-1)) for logit_chunk in logits]
    total_loss = 0.0
    for logits_chunk, labels_chunk in zip(logits, labels):
        total_loss += nn.functional.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=ignore_index,
                                                  reduction="sum")
    return total_loss / total_elements


def chunked_output_loss(ac, hidden_states, weight, labels, num_output_chunks, ignore_index=-100):
    """torchtune: TransformerDecoder.chunked_output, then the recipe's
    _loss_step: the labels shifted with torch.hstack (its local until it
    returns), the loss, `del logits`."""
    logits = [linear(ac, chunk, weight) for chunk in hidden_states.tensor_split(num_output_chunks, dim=1)]
    ignore = torch.full((labels.shape[0], 1), ignore_index)  # the recipe's ignore_labels_cache
    labels = torch.hstack((labels[..., 1:], ignore))
    del ignore
    loss = ce_with_chunked_output_loss(logits, labels, num_output_chunks, ignore_index)
    del logits, labels
    return loss


class FusedLinearCrossEntropy(torch.autograd.Function):
    """Liger-Kernel's LigerFusedLinearCrossEntropyFunction
    (src/liger_kernel/ops/fused_linear_cross_entropy.py, 2025-26) as it
    allocates off CUDA (_can_use_mm_out false): the gradients made in the
    forward chunk by chunk and saved. The Triton kernel's arithmetic (the
    loss, and the gradient written over each chunk) is left out."""

    @staticmethod
    def forward(ctx, _input, weight, target, ignore_index=-100):
        BT, H = _input.shape
        V = weight.shape[0]
        inc_factor = -(-V // H)
        chunk_size = min(1 << (-(-BT // inc_factor) - 1).bit_length(), BT)
        num_chunks = -(-BT // chunk_size)
        grad_input = torch.zeros_like(_input)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(BT, dtype=torch.float32)
        target_mask = target != ignore_index
        total_n_non_ignore = target_mask.sum().item()
        for chunk_id in range(num_chunks):
            start_idx, end_idx = chunk_id * chunk_size, min((chunk_id + 1) * chunk_size, BT)
            _input_chunk = _input[start_idx:end_idx]
            logits_chunk = _input_chunk @ weight.t()
            target_chunk = target[start_idx:end_idx].contiguous()
            logits_chunk = logits_chunk.contiguous()
            grad_logits_chunk = logits_chunk  # the kernel writes the gradient over the logits
            del logits_chunk
            grad_input[start_idx:end_idx] = grad_logits_chunk @ weight
            if grad_weight is not None:  # the legacy fallback
                grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()
            del grad_logits_chunk, _input_chunk, target_chunk
        loss = torch.sum(loss_1d)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        if not torch.equal(grad_output, torch.tensor(1.0)):
            grad_input.mul_(grad_output)
            if grad_weight is not None:
                grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None, None


def fused_linear_loss(ac, hidden_states, weight, labels, ignore_index=-100):
    # LigerForCausalLMLoss: the hidden states flattened (a view), the labels
    # shifted as ForCausalLMLoss does, no logits
    _input = hidden_states.view(-1, hidden_states.size(-1))
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous().view(-1)
    return FusedLinearCrossEntropy.apply(_input, weight, shift_labels, ignore_index)


def load_balancing_loss_func(ac, gate_logits, num_experts, top_k):
    # transformers' (Mixtral, Qwen2-MoE, Qwen3-MoE; 4.46-4.52) without an attention mask
    concatenated_gate_logits = torch.cat([layer_gate for layer_gate in gate_logits], dim=0)
    routing_weights = torch.nn.functional.softmax(ac.up(concatenated_gate_logits), dim=-1)  # autocast's fp32 list
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = Mean2x.apply(routing_weights, 0, False)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts


def shifted_logits_loss(ac, lm_logits, labels):
    # BloomForCausalLM.forward (4.26-4.27): the model's own shifted loss
    shift_logits = lm_logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    batch_size, seq_length, vocab_size = shift_logits.shape
    log_probs = nn.functional.log_softmax(ac.up(shift_logits.view(batch_size * seq_length, vocab_size)), dim=-1)
    return nn.functional.nll_loss(log_probs, shift_labels.view(batch_size * seq_length))


class CausalLM(nn.Module):
    """XForCausalLM.forward: body, head, loss; returns (loss, logits) the way
    CausalLMOutputWithPast keeps them."""

    def __init__(self, cfg):
        super().__init__()
        kind = cfg["model_type"]
        self.model = {"gpt2": GPT2, "bloom": Bloom, "gpt_neox": ParallelDecoder, "phi": ParallelDecoder,
                      "starcoder2": Starcoder2, "opt": OPT}.get(kind, Llama)(cfg)
        self.vocab = cfg["vocab_size"]

    def no_training_cache(self):
        # Gemma2Model makes its HybridCache only when not training
        return getattr(self.model, "cfg", {}).get("model_type") in ("gemma2", "gemma3_text")

    def forward(self, ac, input_ids, labels, checkpoint=None):
        prompt = getattr(self, "prompt", None)
        inputs_embeds = prompts = None
        if prompt is not None:  # PEFT computes the embeddings and keeps them (and its prompts) until the model returns
            inputs_embeds = self.model.embed(input_ids)
            # PeftModelForCausalLM.forward: -100 labels for the virtual tokens
            prefix_labels = torch.full((labels.shape[0], prompt.num_virtual_tokens), -100)
            labels = torch.cat((prefix_labels, labels), dim=1)
            del prefix_labels
            prompts = prompt.get_prompt(inputs_embeds.shape[0], inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts, inputs_embeds), dim=1)
        prefix = getattr(self, "prefix", None)
        past_key_values = None
        if prefix is not None:  # PeftModelForCausalLM.forward: past_key_values=self.get_prompt(batch_size)
            past_key_values = prefix.get_prompt(input_ids.shape[0], self.model.embed_tokens.weight.dtype)
        elif getattr(self, "use_cache", True) and checkpoint is None and not self.no_training_cache():
            # config.use_cache, which transformers turns off under gradient
            # checkpointing: LlamaModel makes a DynamicCache, GPT-2 returns presents
            past_key_values = [] if isinstance(self.model, (GPT2, Bloom)) else DynamicCache()
        hidden_states = self.model.body(ac, input_ids, checkpoint, inputs_embeds, past_key_values)
        kind = getattr(self, "loss", "cross-entropy")
        if kind in ("chunked", "fused-linear"):
            # torchtune's recipes delete the chunked logits before backward;
            # Liger makes none: the outputs keep the cache alone, if any
            if kind == "chunked":
                loss = chunked_output_loss(ac, hidden_states, self.model.head_weight(), labels, self.loss_chunks)
            else:
                loss = fused_linear_loss(ac, hidden_states, self.model.head_weight(), labels)
            return loss, (None, past_key_values) if past_key_values is not None else None
        head_bias = getattr(self.model, "head_bias", None)
        logits = linear(ac, hidden_states, self.model.head_weight(), head_bias() if head_bias else None)
        if getattr(self.model, "cfg", {}).get("model_type") == "granite":  # GraniteForCausalLM
            logits = logits / self.model.cfg["logits_scaling"]
        cap = getattr(self.model, "cfg", {}).get("final_logit_softcapping")
        if cap is not None:  # Gemma2ForCausalLM
            logits = logits / cap
            logits = torch.tanh(logits)
            logits = logits * cap
        if isinstance(self.model, Bloom):
            loss = shifted_logits_loss(ac, logits, labels)
        elif kind == "fused":
            loss = fused_causal_lm_loss(logits, labels, self.vocab)
        else:
            loss = causal_lm_loss(ac, logits, labels, self.vocab)
        router_logits = getattr(self.model, "all_router_logits", ())
        self.model.all_router_logits = ()
        if router_logits:  # MixtralForCausalLM with output_router_logits
            cfg = self.model.cfg
            experts = cfg.get("num_local_experts") or cfg["num_experts"]
            aux_loss = load_balancing_loss_func(ac, router_logits, experts, cfg["num_experts_per_tok"])
            loss += cfg.get("router_aux_loss_coef", 0.001) * aux_loss
            del aux_loss
            logits = (logits, router_logits)  # the outputs keep them beside the logits
        if past_key_values is not None:  # the outputs keep the cache beside the logits
            return loss, (logits, past_key_values)
        return loss, logits


# ---------------------------------------------------------------- LoRA

LINEAR_NAMES = {"q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "c_proj", "c_fc", "gate_proj", "up_proj",
                "down_proj", "query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h", "q", "k", "v", "o", "wi",
                "wo", "wi_0", "wi_1", "qkv_proj", "gate_up_proj", "gate", "shared_expert_gate", "fc1", "fc2", "lm_head",
                "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "query", "key", "value", "classifier",
                "out_proj"}
# the heads PEFT's all-linear leaves out: a language model's, a classifier's (SEQ_CLS_HEAD_NAMES)
HEAD_NAMES = {"lm_head", "classifier"}


def add_lora(model, ac, recipe, adapter_dtype):
    """get_peft_model(model, LoraConfig(...)): every parameter frozen, A and
    B beside each targeted weight (all-linear: every linear but lm_head),
    registered on the model so that they count as its parameters. With
    use_dora, DoRA's magnitude vector too: the column norms of the weight,
    one per output feature, in the adapters' dtype (autocast_adapter_dtype)."""
    dora = str(recipe.get("use_dora", "false")) == "true"
    r = recipe.get("lora_rank", 8)
    alpha = recipe.get("lora_alpha", 8)
    p = recipe.get("lora_dropout", 0.0)
    wanted = recipe.get("lora_targets", "q_proj,v_proj,c_attn,query_key_value,q,v,query,value")
    targets = LINEAR_NAMES - HEAD_NAMES if wanted == "all-linear" else set(wanted.split(","))
    for param in model.parameters():
        param.requires_grad_(False)
    adapters = nn.ParameterList()
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] not in targets or not isinstance(module, (nn.Linear, Conv1D)):
            continue
        w = module.weight
        state = ac.quant.get(id(w))
        out_features, in_features = (
            state.shape if isinstance(state, QuantState) else w.shape if state
            else (w.shape[1], w.shape[0]) if isinstance(module, Conv1D) else w.shape)
        lora_A = nn.Parameter(torch.empty(r, in_features, dtype=adapter_dtype).normal_(std=0.02))
        lora_B = nn.Parameter(torch.zeros(out_features, r, dtype=adapter_dtype))
        adapters.append(lora_A)
        adapters.append(lora_B)
        magnitude = None
        if dora and state:  # the norms of the dequantized weight, made once
            magnitude = nn.Parameter(torch.ones(out_features, dtype=adapter_dtype))
            adapters.append(magnitude)
        elif dora:
            oriented = w.detach().T if isinstance(module, Conv1D) else w.detach()
            magnitude = nn.Parameter(torch.linalg.norm(oriented.float(), dim=1).to(adapter_dtype))
            adapters.append(magnitude)
        ac.lora[id(w)] = (lora_A, lora_B, alpha / r, p, magnitude)
    model.lora_adapters = adapters


def freeze(model, trainable_layers):
    """Partial fine-tuning (finetune = freeze): every parameter frozen but
    the last trainable_layers layers', the final norm's and an untied head's
    (a classifier's: the pooler and the classifier)."""
    if isinstance(model, BertForSequenceClassification):
        for param in model.parameters():
            param.requires_grad_(False)
        trained = list(model.layers)[len(model.layers) - trainable_layers:] if trainable_layers else []
        for module in trained + [model.pooler, model.classifier]:
            module.requires_grad_(True)
        return
    if not isinstance(model, CausalLM):
        raise NotImplementedError("freeze is mirrored for the causal language models and BERT")
    body = model.model
    for param in model.parameters():
        param.requires_grad_(False)
    layers = body.h if isinstance(body, (GPT2, Bloom)) else body.layers
    final = body.ln_f if isinstance(body, (GPT2, Bloom)) else body.final_norm if isinstance(body, ParallelDecoder) \
        else body.final_layer_norm if isinstance(body, OPT) else body.norm
    trained = list(layers)[len(layers) - trainable_layers:] if trainable_layers else []
    for module in trained + [final] + ([body.lm_head] if hasattr(body, "lm_head") else []):
        module.requires_grad_(True)


def add_modules_to_save(model, recipe, wrapped=True):
    """Every module whose name ends with one of modules_to_save trained
    (_set_trainable's key.endswith). `wrapped`: PEFT's ModulesToSaveWrapper,
    whose model goes on with a trained deep copy, the original kept beside
    it, frozen; here the module's own parameters are trained and the frozen
    copies kept apart: the same tensors, by bytes and by role."""
    wanted = [t for t in str(recipe.get("modules_to_save", "")).split(",") if t]
    originals = nn.ParameterList()
    for name, module in model.named_modules():
        if not any(name.endswith(t) for t in wanted):
            continue
        for param in module.parameters():
            if wrapped:
                originals.append(nn.Parameter(param.detach().clone(), requires_grad=False))
            param.requires_grad_(True)
    model.peft_originals = originals


def trained_in_registration_order(model, ac):
    """The trained parameters as a PEFT model registers them, which a
    for-loop optimizer follows: a module's own, then the LoRA adapters
    beside its weight (lora_A, lora_B, DoRA's magnitude), module by module.
    The harness keeps its adapters in one list at the end; this puts them
    back in place."""
    adapters = {id(p) for p in getattr(model, "lora_adapters", ())}
    order, seen = [], set()
    for module in model.modules():
        beside = []
        for param in module.parameters(recurse=False):
            if id(param) in adapters or id(param) in seen:
                continue
            seen.add(id(param))
            order.append(param)
            adapter = ac.lora.get(id(param))
            if adapter:
                beside += [adapter[0], adapter[1]] + ([adapter[4]] if adapter[4] is not None else [])
        order += beside
    return [p for p in order if p.requires_grad]


class PromptTuning(nn.Module):
    """PEFT's prompt tuning (PromptEmbedding, PeftModel.get_prompt): the
    virtual tokens' table, num_transformer_submodules sets of them (two for
    seq2seq models), looked up for every sequence and cast to the
    embeddings' dtype; the caller puts them before the embeddings."""

    def __init__(self, num_virtual_tokens, hidden, dtype, submodules=1):
        super().__init__()
        self.num_virtual_tokens = num_virtual_tokens
        self.total = num_virtual_tokens * submodules
        self.embedding = nn.Embedding(self.total, hidden, dtype=dtype)

    def get_prompt(self, batch_size, dtype):
        # the prompt tokens are an arange kept on the CPU: on CUDA, the
        # .to(device) of the expanded tensor copies it
        prompt_tokens = torch.arange(self.total).unsqueeze(0).expand(batch_size, -1).contiguous()
        return self.embedding(prompt_tokens).to(dtype)


def add_prompt(model, recipe, dtype):
    """get_peft_model(model, PromptTuningConfig(num_virtual_tokens=...))."""
    for param in model.parameters():
        param.requires_grad_(False)
    if isinstance(model, T5ForConditionalGeneration):
        model.prompt = PromptTuning(recipe["num_virtual_tokens"], model.shared.weight.shape[1], dtype, submodules=2)
        return
    body = model if isinstance(model, BertForSequenceClassification) else model.model
    embedding = body.wte if hasattr(body, "wte") else \
        body.word_embeddings if isinstance(body, (Bloom, BertForSequenceClassification)) else body.embed_tokens
    model.prompt = PromptTuning(recipe["num_virtual_tokens"], embedding.weight.shape[1], dtype)


class PrefixTuning(nn.Module):
    """PEFT's prefix tuning without a projection (PrefixEncoder and
    PeftModel.get_prompt): a table of num_layers * 2 keys and values per
    virtual token, looked up for every sequence, cast to the model's dtype
    and handed to the model as a DynamicCache of views."""

    def __init__(self, num_virtual_tokens, layers, kv_heads, head_dim, dtype):
        super().__init__()
        self.num_virtual_tokens, self.layers, self.kv_heads, self.head_dim = num_virtual_tokens, layers, kv_heads, head_dim
        self.embedding = nn.Embedding(num_virtual_tokens, layers * 2 * kv_heads * head_dim, dtype=dtype)

    def get_prompt(self, batch_size, model_dtype):
        # the prompt tokens are an arange kept on the CPU: on CUDA, the
        # .to(device) of the expanded tensor copies it
        prompt_tokens = torch.arange(self.num_virtual_tokens).unsqueeze(0).expand(batch_size, -1).contiguous()
        past_key_values = self.embedding(prompt_tokens)
        past_key_values = past_key_values.to(model_dtype)
        past_key_values = past_key_values.view(batch_size, self.num_virtual_tokens, self.layers * 2, self.kv_heads,
                                               self.head_dim)
        past_key_values = past_key_values.permute([2, 0, 3, 1, 4]).split(2)
        return DynamicCache.from_legacy_cache(past_key_values)


class Seq2SeqPrefixTuning(PrefixTuning):
    """PeftModel.get_prompt for SEQ_2_SEQ_LM (PEFT 0.14-0.17, transformers
    4.47-4.52): prompt_tokens hold 2 x num_virtual_tokens ids, cut to the
    first num_virtual_tokens; token_dim is d_model; the table's keys and
    values are joined to themselves (torch.cat on dim 2) for the decoder's
    self- and cross-attention, split per layer into four, and handed over as
    an EncoderDecoderCache whose cross-attention cache PEFT then replaces by
    an empty DynamicCache: only the decoder's self-attention sees the prefix
    (the encoder never gets a cache)."""

    def get_prompt(self, batch_size, model_dtype):
        # .to(device) of the expanded ids copies them on CUDA
        prompt_tokens = torch.arange(2 * self.num_virtual_tokens).unsqueeze(0).expand(batch_size, -1).contiguous()
        prompt_tokens = prompt_tokens[:, : self.num_virtual_tokens]
        past_key_values = self.embedding(prompt_tokens)
        past_key_values = past_key_values.to(model_dtype)
        past_key_values = past_key_values.view(batch_size, self.num_virtual_tokens, self.layers * 2, self.kv_heads,
                                               self.head_dim)
        past_key_values = torch.cat([past_key_values, past_key_values], dim=2)
        past_key_values = past_key_values.permute([2, 0, 3, 1, 4]).split(4)
        # EncoderDecoderCache.from_legacy_cache: [:2] to the self-attention
        # cache, [2:] to the cross-attention one, which PEFT drops
        self_attention, cross_attention = DynamicCache(), DynamicCache()
        for layer_idx in range(len(past_key_values)):
            key_states, value_states = past_key_values[layer_idx][:2]
            self_attention.update(key_states, value_states, layer_idx)
            key_states, value_states = past_key_values[layer_idx][2:]
            cross_attention.update(key_states, value_states, layer_idx)
        return self_attention, DynamicCache()


def add_prefix(model, cfg, recipe, dtype):
    """get_peft_model(model, PrefixTuningConfig(num_virtual_tokens=...)):
    token_dim cut to the key/value heads for grouped-query attention; T5's
    token_dim is d_model, split over its heads."""
    for param in model.parameters():
        param.requires_grad_(False)
    if cfg["model_type"] in ("t5", "mt5"):
        model.prefix = Seq2SeqPrefixTuning(recipe["num_virtual_tokens"], cfg["num_layers"], cfg["num_heads"],
                                           cfg["d_model"] // cfg["num_heads"], dtype)
        return
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    model.prefix = PrefixTuning(recipe["num_virtual_tokens"], cfg["num_hidden_layers"], kv_heads,
                                cfg["hidden_size"] // heads, dtype)


# ---------------------------------------------------------------- BERT


class Dense(nn.Module):
    """One nn.Linear named dense, as BertSelfOutput, BertIntermediate,
    BertOutput and BertPooler hold it: PEFT's target "dense" finds it by
    that name (the parameters register in HF's order)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)


class BertLayer(nn.Module):
    """BertLayer of transformers 4.26 (eager attention, absolute positions)."""

    def __init__(self, cfg):
        super().__init__()
        h, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.heads = cfg["num_attention_heads"]
        self.head_size = h // self.heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attention_output, self.attn_ln = Dense(h, h), nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-12))
        self.intermediate = Dense(h, f)
        self.output, self.output_ln = Dense(f, h), nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-12))
        self.p = cfg.get("hidden_dropout_prob", 0.1)
        self.attn_p = cfg.get("attention_probs_dropout_prob", 0.1)
        self.act = cfg.get("hidden_act", "gelu")

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def self_attention(self, ac, hidden_states, attention_mask):
        mixed_query_layer = linear(ac, hidden_states, self.query.weight, self.query.bias)
        key_layer = self.transpose_for_scores(linear(ac, hidden_states, self.key.weight, self.key.bias))
        value_layer = self.transpose_for_scores(linear(ac, hidden_states, self.value.weight, self.value.bias))
        query_layer = self.transpose_for_scores(mixed_query_layer)
        attention_scores = torch.matmul(ac.down(query_layer), ac.down(key_layer.transpose(-1, -2)))
        attention_scores = attention_scores / math.sqrt(self.head_size)
        attention_scores = add(attention_scores, attention_mask)
        attention_probs = nn.functional.softmax(ac.up(attention_scores), dim=-1)  # autocast's fp32 list
        attention_probs = dropout(attention_probs, self.attn_p, self.training)
        context_layer = torch.matmul(ac.down(attention_probs), ac.down(value_layer))
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.heads * self.head_size,))

    # HF's functions, one per module, so that what is not saved goes when
    # the module that made it returns (frozen weights save less)

    def self_output(self, ac, context, input_tensor):  # BertSelfOutput
        x = linear(ac, context, self.attention_output.dense.weight, self.attention_output.dense.bias)
        x = dropout(x, self.p, self.training)
        return layer_norm(ac, self.attn_ln, add(x, input_tensor))

    def bert_output(self, ac, intermediate, attention_output):  # BertOutput
        x = linear(ac, intermediate, self.output.dense.weight, self.output.dense.bias)
        x = dropout(x, self.p, self.training)
        return layer_norm(ac, self.output_ln, add(x, attention_output))

    def feed_forward_chunk(self, ac, attention_output):
        intermediate = activation(ac, self.act, linear(ac, attention_output, self.intermediate.dense.weight,
                                                       self.intermediate.dense.bias))  # BertIntermediate
        return self.bert_output(ac, intermediate, attention_output)

    def forward(self, ac, hidden_states, attention_mask):
        attention_output = self.self_output(ac, self.self_attention(ac, hidden_states, attention_mask), hidden_states)
        return self.feed_forward_chunk(ac, attention_output)


class BertForSequenceClassification(nn.Module):
    """transformers 4.26: BertEmbeddings, the encoder, BertPooler, dropout,
    classifier, CrossEntropyLoss over the labels; returns (loss, logits)."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        positions = cfg.get("max_position_embeddings", 512)
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h)
        self.position_embeddings = nn.Embedding(positions, h)
        self.token_type_embeddings = nn.Embedding(cfg.get("type_vocab_size", 2), h)
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, positions), dtype=torch.long), persistent=False)
        self.ln = nn.LayerNorm(h, eps=cfg.get("layer_norm_eps", 1e-12))
        self.p = cfg.get("hidden_dropout_prob", 0.1)
        self.layers = nn.ModuleList([BertLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.pooler = Dense(h, h)
        self.num_labels = cfg.get("num_labels", 2)
        self.classifier = nn.Linear(h, self.num_labels)

    def embeddings(self, ac, input_ids, inputs_embeds=None):
        """BertEmbeddings.forward: its lookups and sums are its own locals,
        gone when it returns."""
        batch, seq = inputs_embeds.shape[:2] if inputs_embeds is not None else input_ids.shape
        position_ids = self.position_ids[:, :seq]
        token_type_ids = self.token_type_ids[:, :seq].expand(batch, seq)
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        position_embeddings = self.position_embeddings(position_ids)
        embeddings += position_embeddings
        embeddings = layer_norm(ac, self.ln, embeddings)
        return dropout(embeddings, self.p, self.training)

    def forward(self, ac, input_ids, labels, checkpoint=None):
        prompt = getattr(self, "prompt", None)
        inputs_embeds = prompts = None
        if prompt is not None:  # PeftModelForSequenceClassification.forward: kept until the model returns
            inputs_embeds = self.word_embeddings(input_ids)
            prompts = prompt.get_prompt(input_ids.shape[0], inputs_embeds.dtype)
            inputs_embeds = torch.cat((prompts, inputs_embeds), dim=1)
        # BertForSequenceClassification.forward: the model's outputs (the
        # last hidden state too) live until it returns
        outputs = self.bert(ac, input_ids, checkpoint, inputs_embeds)
        pooled = dropout(outputs[1], self.p, self.training)
        logits = linear(ac, pooled, self.classifier.weight, self.classifier.bias)
        loss = nn.functional.cross_entropy(ac.up(logits.view(-1, self.num_labels)), labels.view(-1))
        return loss, logits

    def bert(self, ac, input_ids, checkpoint, inputs_embeds):
        """BertModel.forward: its mask and embedding_output are locals until
        it returns; the last hidden state and the pooled one go back."""
        batch, seq = inputs_embeds.shape[:2] if inputs_embeds is not None else input_ids.shape
        attention_mask = torch.ones((batch, seq))
        extended = attention_mask[:, None, None, :].to(dtype=self.word_embeddings.weight.dtype)
        extended = (1.0 - extended) * torch.finfo(extended.dtype).min
        embedding_output = hidden_states = self.embeddings(ac, input_ids, inputs_embeds)
        for chunk in chunks(self.layers, checkpoint):
            if checkpoint:
                hidden_states = checkpoint(lambda x, m, c=chunk: in_turn(c, x, lambda l, y: l(ac, y, m)),
                                           hidden_states, extended)
            else:
                hidden_states = chunk[0](ac, hidden_states, extended)
        first_token_tensor = hidden_states[:, 0]  # BertPooler's
        pooled = torch.tanh(linear(ac, first_token_tensor, self.pooler.dense.weight, self.pooler.dense.bias))
        del first_token_tensor, embedding_output
        return hidden_states, pooled
