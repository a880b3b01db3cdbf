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


class MTPModule(nn.Module):
    def __init__(self, cfg, layer_class):
        super().__init__()
        h = cfg["hidden_size"]
        # registered as vramplan's branch lists them: the block's enorm,
        # hnorm, eh_proj, the layer, shared_head.norm
        self.enorm = rms_norm(cfg, h)
        self.hnorm = rms_norm(cfg, h)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        # the layer after the main model's last: routed experts
        self.layer = layer_class(cfg, cfg["num_hidden_layers"])
        self.norm = rms_norm(cfg, h)

    def forward(self, ac, model, input_ids, labels, hidden_states, mask, position_ids, cache_position, tables,
                run_layers):
        inputs_embeds = model.embed_tokens(torch.roll(input_ids, -1, dims=-1))
        hidden_states = linear(ac, torch.cat([self.enorm(inputs_embeds), self.hnorm(hidden_states)], dim=-1),
                               self.eh_proj.weight)
        # no cache in training: the layer's attention keeps its weights until it returns
        hidden_states = run_layers(ac, [self.layer], hidden_states, mask, position_ids, cache_position, tables)
        hidden_states = self.norm(hidden_states)
        logits = linear(ac, hidden_states, model.head_weight())
        del hidden_states
        labels = torch.roll(labels, -1, dims=-1)
        labels[:, -1:] = -100
        loss = causal_lm_loss(ac, logits, labels, model.cfg["vocab_size"])
        del logits, labels, inputs_embeds
        return loss
