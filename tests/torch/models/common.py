"""What every mirror shares: CUDA's behaviour on Debian's PyTorch 1.13 CPU,
the activations, LayerNorm under autocast, the causal mask OPT and T5 make
from a 2-D mask, the checkpointed chunks of layers and transformers'
DynamicCache.

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
        self.float8 = set()  # ids of weights torchao's Float8Linear runs (models/float8.py)
        self.float8_recipe = "tensorwise"

    def down(self, t):
        """Lower-precision list: fp32 inputs are cast; leaves that require
        grad and are not views are cached for the rest of the autocast
        region (autocast_mode.cpp's cached_cast: a view, such as a 3-D
        parameter's select made under no_grad, which still says it requires
        grad, is cast each time)."""
        if self.low is None or t is None or t.dtype != torch.float32:
            return t
        if t.is_leaf and t.requires_grad and not t._is_view():
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
    if x.is_cuda:  # the GPU check (tests/gpu): the kernel this mirrors
        return torch.nn.functional.dropout(x, p, True)
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


def mixed(a, b):
    """Operands of two dtypes on the CPU, where the mirrors stand in for
    CUDA's mixed-dtype kernels; on a GPU (tests/gpu) the kernels themselves."""
    return a.dtype != b.dtype and not a.is_cuda


def add(a, b):
    return MixedAdd.apply(a, b) if mixed(a, b) else a + b


def sub(a, b):
    return MixedAdd.apply(a, b, -1.0) if mixed(a, b) else a - b


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
        ctx.save_for_backward(a if b.requires_grad else None, b if a.requires_grad else None)
        return MixedMul.product(a, b)

    @staticmethod
    def product(a, b):
        out = empty_like_result(a, b, torch.mul)
        low, high = (a, b) if a.dtype != out.dtype else (b, a)
        out.copy_(low)  # copy_ converts element by element
        return out.mul_(high)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = MixedMul.product(grad, b) if b is not None else None
        grad_b = MixedMul.product(grad, a) if a is not None else None
        return grad_a, grad_b


def mul(a, b):
    return MixedMul.apply(a, b) if mixed(a, b) else a * b


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


def layer_norm(ac, ln, x):
    # layer_norm is on autocast's fp32 list
    # autocast's fp32 list casts every floating argument: a 16-bit model's weight and bias too
    bias = ac.up(ln.bias) if ln.bias is not None else None
    return nn.functional.layer_norm(ac.up(x), ln.normalized_shape, ac.up(ln.weight), bias, ln.eps)


def causal_mask_with_cache_position(attention_mask, sequence_length, target_length, dtype, cache_position,
                                    batch_size):
    """transformers' _prepare_4d_causal_attention_mask_with_cache_position
    with a 2-D attention mask (OPT's decoder, T5's): the [b, 1, s, t] causal
    mask, the padding merged into a contiguous copy."""
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
    mask_length = attention_mask.shape[-1]
    # a 16-bit mask plus the fp32 ones: CUDA's add (MixedAdd), without CPU's fp32 copy
    padding_mask = add(causal_mask[:, :, :, :mask_length], attention_mask[:, None, None, :])
    padding_mask = padding_mask == 0
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


def aliases(embed, layers, norm):
    """Properties embed_tokens, layers and norm (the names the harness's
    generic code reads) over a family's own attribute names."""
    return tuple(property(lambda self, name=name: getattr(self, name)) for name in (embed, layers, norm))


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
