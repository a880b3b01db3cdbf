"""DeepSeek-V3's multi-token prediction module (DeepSeek-AI 2024, arXiv
2412.19437 section 2.2), one depth, written plainly in PyTorch as
vramplan's branch runs it (engine/ops/op_branch.c,
models/examples/arch/deepseek_v3_mtp.lua): on the main model's last hidden
states before the final norm, h' = eh_proj(cat(enorm(Emb(t_{i+1})),
hnorm(h))) (the checkpoint's names; Megatron-LM's _concat_embeddings'
order, megatron/core/transformer/multi_token_prediction.py), a
decoder layer with routed experts, its own norm (shared_head.norm), the
main model's head and loss on the labels one ahead; the embedding and the
head are the main model's. The tokens and labels are rolled as Megatron-LM's
multi_token_prediction.py rolls them (torch.roll, the sequence keeps its
length; the last label ignored). DeepSeek's own training code is not
public: this is the module as vramplan describes it, compared op for op."""
import torch
import torch.nn as nn

from .linear import linear
from .llama_blocks import rms_norm
from .losses import causal_lm_loss


class MTPDepth(nn.Module):
    """The module of depth k: enorm, hnorm, eh_proj, a decoder layer (the
    model's layer index num_hidden_layers + k - 1) and its own norm."""

    def __init__(self, cfg, layer_class, k):
        super().__init__()
        h = cfg["hidden_size"]
        # registered as vramplan's branch lists them: the block's enorm,
        # hnorm, eh_proj, the layer, shared_head.norm
        self.enorm = rms_norm(cfg, h)
        self.hnorm = rms_norm(cfg, h)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        # the layer after the main model's last (and the depths before): routed experts
        self.layer = layer_class(cfg, cfg["num_hidden_layers"] + k - 1)
        self.norm = rms_norm(cfg, h)

    def forward(self, ac, model, k, input_ids, labels, state, mask, position_ids, cache_position, tables,
                run_layers, keep):
        """Depth k on the hidden states state holds (the caller's reference
        handed over: the depth before's go once eh_proj has run, as a local
        rebound); returns its last hidden states when the next depth takes
        them (keep), and its loss."""
        inputs_embeds = model.embed_tokens(torch.roll(input_ids, -k, dims=-1))
        hidden_states = state.pop()
        hidden_states = linear(ac, torch.cat([self.enorm(inputs_embeds), self.hnorm(hidden_states)], dim=-1),
                               self.eh_proj.weight)
        # no cache in training: the layer's attention keeps its weights until it returns
        hidden_states = run_layers(ac, [self.layer], hidden_states, mask, position_ids, cache_position, tables)
        hidden_states = self.norm(hidden_states)
        logits = linear(ac, hidden_states, model.head_weight())
        if not keep:
            del hidden_states
            hidden_states = None
        labels = torch.roll(labels, -k, dims=-1)
        labels[:, -k:] = -100
        loss = causal_lm_loss(ac, logits, labels, model.cfg["vocab_size"])
        del logits, labels, inputs_embeds
        return hidden_states, loss


class MTPModule(nn.Module):
    """D = num_nextn_predict_layers sequential depths (arXiv 2412.19437
    eqs. 21-25): depth k > 1 takes depth k - 1's output after its norm, as
    Megatron-LM's MultiTokenPredictionBlock hands each layer the one
    before's (megatron/core/transformer/multi_token_prediction.py); the
    depths' losses summed as they come."""

    def __init__(self, cfg, layer_class):
        super().__init__()
        depth = cfg["num_nextn_predict_layers"]
        self.depths = nn.ModuleList(MTPDepth(cfg, layer_class, k) for k in range(1, depth + 1))

    def forward(self, ac, model, input_ids, labels, hidden_states, mask, position_ids, cache_position, tables,
                run_layers):
        state = [hidden_states]
        del hidden_states  # (the model body's reference keeps the main stream)
        total = None
        for k, depth in enumerate(self.depths, 1):
            out, loss = depth(ac, model, k, input_ids, labels, state, mask, position_ids, cache_position, tables,
                              run_layers, k < len(self.depths))
            state = [out]
            del out
            total = loss if total is None else total + loss
            del loss
        return total
