"""Optimizers outside torch.optim, written out line by line as their
libraries run them on parameters that are not sparse, so that the CPU
harness measures what their steps allocate.

* Adafactor: transformers.optimization.Adafactor with its defaults
  (scale_parameter, relative_step, beta1=None, weight_decay 0), or beta1
  set (a first moment) and a weight decay.
* SM3: torch-optimizer's SM3 (as vendored by GPT-NeoX) with its defaults
  (momentum 0, beta 0), or a momentum.
* HFAdamW: transformers' own AdamW, the Trainer's adamw_hf (weight decay 0
  unless given).
"""
import math

import torch
from torch.optim import Optimizer


class Adafactor(Optimizer):
    def __init__(self, params, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None, weight_decay=0.0):
        defaults = {"lr": None, "eps": eps, "clip_threshold": clip_threshold, "decay_rate": decay_rate,
                    "beta1": beta1, "weight_decay": weight_decay, "scale_parameter": True, "relative_step": True,
                    "warmup_init": False}
        super().__init__(params, defaults)

    @staticmethod
    def _get_lr(param_group, param_state):
        rel_step_sz = min(1e-2, 1.0 / math.sqrt(param_state["step"]))
        param_scale = max(param_group["eps"][1], param_state["RMS"])
        return param_scale * rel_step_sz

    @staticmethod
    def _rms(tensor):
        return tensor.norm(2) / (tensor.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col):
        r_factor = (exp_avg_sq_row / exp_avg_sq_row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c_factor = exp_avg_sq_col.unsqueeze(-2).rsqrt()
        return torch.mul(r_factor, c_factor)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.dtype in {torch.float16, torch.bfloat16}:
                    grad = grad.float()
                state = self.state[p]
                grad_shape = grad.shape
                factored = len(grad_shape) >= 2
                use_first_moment = group["beta1"] is not None
                if len(state) == 0:
                    state["step"] = 0
                    if use_first_moment:
                        state["exp_avg"] = torch.zeros_like(grad)
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad_shape[:-1]).to(grad)
                        state["exp_avg_sq_col"] = torch.zeros(grad_shape[:-2] + grad_shape[-1:]).to(grad)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                elif use_first_moment:
                    state["exp_avg"] = state["exp_avg"].to(grad)
                p_data_fp32 = p
                if p.dtype in {torch.float16, torch.bfloat16}:
                    p_data_fp32 = p_data_fp32.float()
                state["step"] += 1
                state["RMS"] = self._rms(p_data_fp32)
                lr = self._get_lr(group, state)
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = (grad**2) + group["eps"][0]
                if factored:
                    exp_avg_sq_row = state["exp_avg_sq_row"]
                    exp_avg_sq_col = state["exp_avg_sq_col"]
                    exp_avg_sq_row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
                    exp_avg_sq_col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))
                    update = self._approx_sq_grad(exp_avg_sq_row, exp_avg_sq_col)
                    update.mul_(grad)
                else:
                    exp_avg_sq = state["exp_avg_sq"]
                    exp_avg_sq.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
                    update = exp_avg_sq.rsqrt().mul_(grad)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                if use_first_moment:
                    exp_avg = state["exp_avg"]
                    exp_avg.mul_(group["beta1"]).add_(update, alpha=(1 - group["beta1"]))
                    update = exp_avg
                if group["weight_decay"] != 0:
                    p_data_fp32.add_(p_data_fp32, alpha=(-group["weight_decay"] * lr))
                p_data_fp32.add_(-update)
                if p.dtype in {torch.float16, torch.bfloat16}:
                    p.copy_(p_data_fp32)


class SM3(Optimizer):
    def __init__(self, params, lr=0.1, momentum=0.0, eps=1e-30):
        super().__init__(params, {"lr": lr, "momentum": momentum, "eps": eps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                rank = len(grad.shape)
                if len(state) == 0:
                    state["step"] = 0
                    state["momentum_buffer"] = 0.0
                    for i in range(rank):
                        acc_shape = [1] * i + [grad.shape[i]] + [1] * (rank - 1 - i)
                        state["accumulator_" + str(i)] = torch.zeros(acc_shape, dtype=grad.dtype)
                acc_list = [state["accumulator_" + str(i)] for i in range(rank)]
                update = acc_list[0].clone()
                for i in range(1, rank):
                    update = torch.min(update, acc_list[i])
                update.addcmul_(grad, grad, value=1.0)
                for i, acc in enumerate(acc_list):
                    nu_max = update
                    for d in range(rank):
                        if d != i:
                            nu_max = nu_max.max(dim=d, keepdim=True).values
                    acc.copy_(nu_max)
                update.add_(group["eps"]).rsqrt_().mul_(grad)
                if group["momentum"] > 0.0:
                    m = state["momentum_buffer"]
                    update.mul_(1.0 - group["momentum"]).add_(m, alpha=group["momentum"])
                    state["momentum_buffer"] = update.detach()
                p.sub_(update, alpha=group["lr"])
                state["step"] += 1


class HFAdamW(Optimizer):
    """transformers.AdamW (the Trainer's adamw_hf), weight decay 0 as the
    Trainer's default."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=(1.0 - beta1))
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"] * math.sqrt(1.0 - beta2 ** state["step"]) / (1.0 - beta1 ** state["step"])
                p.addcdiv_(exp_avg, denom, value=-step_size)
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=(-group["lr"] * group["weight_decay"]))
