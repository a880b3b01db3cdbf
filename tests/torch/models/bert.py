"""BertForSequenceClassification as transformers 4.26 computes it."""
import math

import torch
import torch.nn as nn

from .common import activation, add, chunks, dropout, in_turn, layer_norm
from .linear import linear


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
