-- BERT's attention (HF's BertAttention, transformers 4.26-4.4x, eager):
-- BertSelfAttention and BertSelfOutput written as one Lua block, which the
-- bert family runs in place of the core's attention and the LayerNorm after
-- it when a model sets lua_blocks = "bert". An encoder's block: every token
-- attends to every other, the additive mask is BertModel's extended one
-- over an all-ones attention_mask (F.mask("bidirectional")), never causal.
-- compare.py's "bert-blocks" cases check it against
-- tests/torch/models/bert.py, BERT written plainly in PyTorch.
return {
  check = function(c)
    if c.hidden % c.heads ~= 0 then return "heads", "must divide hidden" end
  end,
  build = function(c)
    local d = c.hidden // c.heads
    -- BertSelfAttention.forward (transformers 4.26 modeling_bert.py):
    --   mixed_query_layer = self.query(hidden_states)
    --   key_layer = self.transpose_for_scores(self.key(hidden_states))
    --   value_layer = self.transpose_for_scores(self.value(hidden_states))
    --   query_layer = self.transpose_for_scores(mixed_query_layer)
    --   attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
    --   attention_scores = attention_scores / math.sqrt(self.attention_head_size)
    --   attention_scores = attention_scores + attention_mask
    --   attention_probs = nn.functional.softmax(attention_scores, dim=-1)
    --   attention_probs = self.dropout(attention_probs)
    --   context_layer = torch.matmul(attention_probs, value_layer)
    --   context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
    --   context_layer = context_layer.view(new_context_layer_shape)
    -- each name a local until it returns: the masked scores stay past the
    -- softmax (attention_probs takes the new name), the softmax's output
    -- goes once dropout's replaces it
    local function self_attention(p, x)
      local mixed_query_layer = F.keep(p.query(x), "mixed_query_layer")
      local key_layer = F.keep(p.key(x):view(-1, d):transpose(1, 2), "key_layer")
      local value_layer = F.keep(p.value(x):view(-1, d):transpose(1, 2), "value_layer")
      local query_layer = F.keep(mixed_query_layer:view(-1, d):transpose(1, 2), "query_layer")
      local scores = F.keep(F.matmul(query_layer, key_layer:transpose(2, 3), { label = "scores", operands = { "q", "k" } }),
        "attention_scores")
      scores = F.keep(F.div(scores, math.sqrt(d), { label = "scale" }), "attention_scores")
      scores = F.keep(F.add(scores, F.mask("bidirectional"), { label = "mask" }), "attention_scores")
      local probs = F.keep(F.softmax(scores, -1), "attention_probs")
      probs = F.keep(F.dropout(probs, c.attn_dropout, { label = "dropout" }), "attention_probs")
      local context = F.keep(F.matmul(probs, value_layer, { label = "context", operands = { "probs", "v" } }),
        "context_layer")
      context = F.keep(context:transpose(1, 2):contiguous({ label = "merge_heads" }), "context_layer")
      return context:reshape(-1)
    end
    -- BertSelfOutput.forward(hidden_states, input_tensor):
    --   hidden_states = self.dense(hidden_states)
    --   hidden_states = self.dropout(hidden_states)
    --   hidden_states = self.LayerNorm(hidden_states + input_tensor)
    local function self_output(p, h, input)
      local y = F.keep(p.dense(h), "hidden_states")
      y = F.keep(F.dropout(y, c.dropout, { label = "resid_dropout" }), "hidden_states")
      return F.layer_norm(F.add(y, input, { label = "residual" }), p.ln_weight, p.ln_bias, { label = "layernorm" })
    end
    -- BertAttention.forward: self_outputs = self.self(hidden_states, ...), a
    -- local until it returns, through BertSelfOutput
    local function attention()
      return block {
        name = "attention",
        width = c.hidden,
        params = {
          { "query", linear = { c.hidden, c.hidden }, bias = true },
          { "key", linear = { c.hidden, c.hidden }, bias = true },
          { "value", linear = { c.hidden, c.hidden }, bias = true },
          { "dense", linear = { c.hidden, c.hidden }, bias = true },
          { "ln_weight", size = c.hidden, module = "norm" },
          { "ln_bias", size = c.hidden, module = "norm" },
        },
        forward = function(x, p)
          local self_outputs = F.keep(F.call(function(h) return self_attention(p, h) end, x), "self_outputs")
          return F.call(function(h, input) return self_output(p, h, input) end, self_outputs, x)
        end,
      }
    end
    return { attention = attention }
  end,
}
