"""PEFT's target_parameters (peft/tuners/lora/layer.py, lora.ParamWrapper,
main of 2026) on a mixture's 3-D experts parameters, written out: lora_A
[r x experts, in] and lora_B [out, r x experts] beside each targeted
parameter, and around each call of the experts module, one wrapper per
parameter (down_proj's outermost, as _inject_parameters nests them), each
making get_delta_weight's update, registering it as a parametrization
(torch.nn.utils.parametrize, which computes W + delta once to check it)
and running the inner call under parametrize.cached()."""
import re

import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize


class _LoraParameterProxy(nn.Module):
    """W + delta_weight, the update held as a plain attribute."""

    def __init__(self, delta_weight):
        super().__init__()
        self.delta_weight = delta_weight

    def forward(self, W):
        return W + self.delta_weight


def targeted(recipe):
    """target_parameters as (layer or None, parameter name) pairs: an entry
    names a parameter whose full name ends with it."""
    out = []
    for entry in filter(None, recipe.get("lora_target_parameters", "").split(",")):
        parts = entry.split(".")
        layer = next((int(p) for p in parts if re.fullmatch(r"\d+", p)), None)
        out.append((layer, parts[-1]))
    return out


def add_param_lora(model, ac, recipe, adapter_dtype, adapters):
    """lora_A / lora_B (ParamWrapper.update_layer) for each parameter
    target_parameters names in each decoder layer's mlp.experts; they join
    `adapters` and ac.lora beside their parameter (the registration order
    trained_in_registration_order follows)."""
    wanted = targeted(recipe)
    if not wanted:
        return
    r = recipe.get("lora_rank", 8)
    scaling = recipe.get("lora_alpha", 8) / r
    ac.param_lora = {}
    for index, layer in enumerate(model.model.layers):
        experts = getattr(layer.mlp, "experts", None)  # a dense layer has none
        for name in ("gate_up_proj", "down_proj"):
            if not any(n == name and (l is None or l == index) for l, n in wanted):
                continue
            param = getattr(experts, name, None)
            if not isinstance(param, nn.Parameter) or param.dim() != 3:  # 4.x's experts: nn.Linear modules
                continue
            e, first, second = param.shape
            # _get_in_out_features: (experts, in, out) when is_transposed, else swapped
            in_features, out_features = (first, second) if experts.is_transposed else (second, first)
            lora_A = nn.Parameter(torch.empty(r * e, in_features, dtype=adapter_dtype).normal_(std=0.02))
            lora_B = nn.Parameter(torch.zeros(out_features, r * e, dtype=adapter_dtype))
            adapters.append(lora_A)
            adapters.append(lora_B)
            ac.lora[id(param)] = (lora_A, lora_B, scaling, 0.0, None)
            ac.param_lora[id(param)] = (lora_A, lora_B, scaling)


def delta_weight(ac, module, param, lora_A, lora_B, scaling):
    """get_delta_weight with several experts: A viewed [experts, r, in], B
    [out, r, experts], torch.einsum("o r e, e r i -> e i o") (or "e o i"),
    times scaling, cast to the parameter's dtype. Under autocast the bmm
    ATen runs the einsum as casts its operands, B permuted to [experts,
    out, r] and A: the same bmm written out."""
    e = param.shape[0]
    weight_A = lora_A.reshape(e, -1, lora_A.shape[-1])
    weight_B = lora_B.reshape(lora_B.shape[0], -1, e)
    if ac.low is None:
        equation = "o r e, e r i -> e i o" if module.is_transposed else "o r e, e r i -> e o i"
        delta = torch.einsum(equation, weight_B, weight_A)
    else:
        product = torch.bmm(ac.down(weight_B.permute(2, 0, 1)), ac.down(weight_A))
        delta = product.transpose(1, 2) if module.is_transposed else product
    delta = delta * scaling
    if delta.dtype != param.dtype:
        delta = delta.to(param.dtype)
    return delta


def call_wrapped(module, ac, names, call):
    """The experts module's call inside the wrappers of `names`, outermost
    first: _activate_lora's update and parametrization, parametrize.cached()
    around the inner call, the parametrization removed after it."""
    if not names:
        return call()
    name = names[0]
    param = getattr(module, name)
    lora_A, lora_B, scaling = ac.param_lora[id(param)]
    delta = delta_weight(ac, module, param, lora_A, lora_B, scaling)
    parametrize.register_parametrization(module, name, _LoraParameterProxy(delta))
    del delta
    try:
        with parametrize.cached():
            return call_wrapped(module, ac, names[1:], call)
    finally:
        parametrize.remove_parametrizations(module, name, leave_parametrized=False)


def wrapped_names(module, ac):
    """The experts' parameters target_parameters wraps, outermost first."""
    table = getattr(ac, "param_lora", {})
    return [n for n in ("down_proj", "gate_up_proj") if id(getattr(module, n)) in table]
