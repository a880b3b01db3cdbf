"""The language models' losses: transformers' ForCausalLMLoss and BLOOM's
shifted one, flash-attn's fused cross-entropy, torchtune's chunked output
and linear cross-entropy, Liger-Kernel's fused linear cross-entropy, and the mixtures' load-balancing
loss."""
import torch
import torch.nn as nn

from .common import Mean2x
from .liger import LigerCrossEntropyFunction
from .linear import linear


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


def liger_causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):
    # transformers.loss.loss_utils.ForCausalLMLoss with F.cross_entropy
    # swapped for Liger's liger_cross_entropy (its patch's cross_entropy=True)
    logits = logits.float()
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    return LigerCrossEntropyFunction.apply(logits, shift_labels, ignore_index)


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


def chunked_output_loss(ac, hidden_states, weight, labels, num_output_chunks, ignore_index=-100, bias=None):
    """torchtune: TransformerDecoder.chunked_output (the output projection,
    its bias too, on each chunk), then the recipe's _loss_step: the labels
    shifted with torch.hstack (its local until it returns), the loss,
    `del logits`."""
    logits = [linear(ac, chunk, weight, bias) for chunk in hidden_states.tensor_split(num_output_chunks, dim=1)]
    ignore = torch.full((labels.shape[0], 1), ignore_index)  # the recipe's ignore_labels_cache
    labels = torch.hstack((labels[..., 1:], ignore))
    del ignore
    loss = ce_with_chunked_output_loss(logits, labels, num_output_chunks, ignore_index)
    del logits, labels
    return loss


def linear_cross_entropy_loss(ac, hidden_states, weight, labels, num_output_chunks, ignore_index=-100):
    """torchtune main after 0.6.1: the model returns the normed hidden
    states (skip_output_layer) and LinearCrossEntropyLoss
    (torchtune/modules/loss/cross_entropy_loss.py, mask_ignored_tokens=True)
    applies the output projection chunk by chunk to the tokens with a
    target. The labels come shifted from the dataset (datasets/_sft.py:
    tokens[1:], ignore_index last): here the batch's own labels stand for
    them, each sequence's last set to ignore_index in place (fill_ with a
    Python number allocates nothing)."""
    labels.select(1, -1).fill_(ignore_index)
    total_valid_tokens = torch.where(labels != ignore_index)[0].numel()
    targets = labels.reshape(-1)
    outputs = hidden_states.reshape(-1, hidden_states.shape[-1])
    indices = torch.where(targets != ignore_index)[0]  # mask_inputs
    outputs = outputs.index_select(0, indices)
    targets = targets.index_select(0, indices)
    del indices
    hidden_chunks = outputs.tensor_split(num_output_chunks, dim=0)
    target_chunks = targets.tensor_split(num_output_chunks, dim=0)
    del outputs, targets
    total_loss = torch.tensor(0.0)
    for hidden_chunk, target_chunk in zip(hidden_chunks, target_chunks):
        logits = linear(ac, hidden_chunk, weight)  # compute_cross_entropy
        loss = nn.functional.cross_entropy(logits.float(), target_chunk, reduction="sum", ignore_index=ignore_index)
        del logits
        total_loss += loss
        del loss
    del hidden_chunks, target_chunks
    return total_loss / total_valid_tokens


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
