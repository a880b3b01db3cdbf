-- A user's SwiGLU MLP whose projections carry names of their own (my_gate,
-- my_up, my_proj: no core module has them), for the llama family
-- (lua_blocks = "own_names"): compare.py's case of LoRA on a Lua block's
-- own names, mirrored by tests/torch/models/llama_blocks.py's LlamaMLP
-- under the same names (its mlp_names).
return {
  build = function(c)
    local function mlp()
      return block {
        name = "mlp",
        width = c.hidden,
        params = {
          { "my_up", linear = { c.hidden, c.intermediate }, split = "column" },
          { "my_gate", linear = { c.hidden, c.intermediate }, split = "column" },
          { "my_proj", linear = { c.intermediate, c.hidden }, split = "row" },
        },
        -- my_proj(silu(my_gate(x)) * my_up(x))
        forward = function(x, p) return p.my_proj(F.mul(F.silu(p.my_gate(x)), p.my_up(x), { label = "gate_mul" })) end,
      }
    end
    return { mlp = mlp }
  end,
}
