-- GPT-2 (HF's GPT2LMHeadModel, transformers 4.4x-4.5x) with its MLP
-- written as a Lua block (vramplan.block) instead of the core's mlp op; the
-- attention and LayerNorms are still the core's. tests/lua/block_spec.lua
-- compares its timelines with the gpt2 family's byte for byte.
return architecture {
  name = "gpt2_blocks",
  doc = "GPT-2 whose MLP (Conv1D projections, gelu_new) is a Lua block",
  fields = {
    { "hidden", "int", doc = "n_embd" },
    { "layers", "int", max = 100000, doc = "n_layer" },
    { "heads", "int", doc = "n_head" },
    { "intermediate", "int", default = function(c) return c.hidden and 4 * c.hidden end, doc = "n_inner" },
    { "vocab", "int", default = 50257, doc = "vocab_size" },
    { "max_positions", "int", default = 1024, doc = "n_positions" },
    { "resid_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "resid_pdrop" },
    { "embed_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "embd_pdrop" },
    { "attn_dropout", "number", default = 0.1, min = 0, max = 0.999, doc = "attn_pdrop" },
    { "norm_eps", "number", default = 1e-5, min = 0, doc = "layer_norm_epsilon" },
  },
  build = function(c)
    -- NewGELUActivation.forward (gelu_new), left to right:
    --   0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))
    local function gelu_new(input)
      local function L(name) return { label = "gelu_new." .. name } end
      local half = F.mul(0.5, input, L "half")
      local inner = F.add(input, F.mul(0.044715, F.pow(input, 3, L "pow"), L "mul"), L "add")
      local t = F.tanh(F.mul(math.sqrt(2 / math.pi), inner, L "mul"), L "tanh")
      return F.mul(half, F.add(1.0, t, L "add"), L "mul")
    end
    -- GPT2MLP.forward: c_fc, act, c_proj, dropout. The activation is a
    -- module: its argument is its local until it returns (F.call).
    local function mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        params = {
          { "up_proj", linear = { c.hidden, c.intermediate }, split = "column", bias = true, conv1d = true,
            module = "c_fc" },
          { "down_proj", linear = { c.intermediate, c.hidden }, split = "row", bias = true, conv1d = true,
            module = "c_proj" },
        },
        forward = function(x, p)
          local h = F.call(gelu_new, p.up_proj(x))
          h = p.down_proj(h)
          return F.dropout(h, c.resid_dropout, { label = "resid_dropout" })
        end,
      }
    end
    return decoder {
      embed = {
        token_embedding { vocab = c.vocab, hidden = c.hidden },
        position_embedding { positions = c.max_positions, hidden = c.hidden },
        dropout { p = c.embed_dropout },
      },
      layer = {
        residual {
          keeps_branch = true, -- attn_output, a local of GPT2Block.forward
          layernorm { hidden = c.hidden, eps = c.norm_eps },
          attention {
            hidden = c.hidden, heads = c.heads, qkv_bias = true, out_bias = true, fused_qkv = true,
            dropout = c.attn_dropout, resid_dropout = c.resid_dropout, mask = "bool-buffer",
            positions = c.max_positions, upcast_softmax = false, conv1d = true, caches = true, keeps_weights = true,
          },
        },
        residual { layernorm { hidden = c.hidden, eps = c.norm_eps }, mlp() },
      },
      layers = c.layers,
      final = {
        layernorm { hidden = c.hidden, eps = c.norm_eps },
        lm_head { vocab = c.vocab, hidden = c.hidden, tied = true },
        cross_entropy {},
      },
    }
  end,
}
