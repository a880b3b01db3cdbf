-- GPT-2's MLP (HF's GPT2MLP, transformers 4.4x-4.5x: Conv1D projections,
-- gelu_new) written as a Lua block (vramplan.block), which the gpt2 family
-- runs in place of the core's mlp op when a model sets lua_blocks = "gpt2";
-- the attention and LayerNorms stay the core's. tests/lua/block_spec.lua
-- compares its timelines with the built-in model's byte for byte.
return {
  check = function(c)
    if c.activation ~= "gelu_new" then return "activation", "the gpt2 Lua MLP computes gelu_new only" end
  end,
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
    return { mlp = mlp }
  end,
}
