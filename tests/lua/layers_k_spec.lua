-- checkpointing = layers-K: torchtitan's selective layer checkpointing
-- (ac_freq), every K-th layer checkpointed alone, the others not at all;
-- tests/torch/compare.py checks it against PyTorch ("layers-").
local helper = require("tests.lua.helper")

local function activations(ckpt)
  return helper.estimate("llama3.2-1b", "--set", "seq_len=1024", "--set", "checkpointing=" .. ckpt)
    .per_gpu.activations_bytes
end

describe("checkpointing = layers-K", function()
  it("keeps what full checkpointing keeps at K = 1, and more with every larger K, less than none", function()
    local full, none = activations("full"), activations("none")
    assert.are.equal(full, activations("layers-1"))
    local last = full
    for _, k in ipairs({ 2, 4, 8 }) do
      local a = activations("layers-" .. k)
      assert.is_true(a > last, "layers-" .. k)
      assert.is_true(a < none, "layers-" .. k)
      last = a
    end
  end)

  it("reruns one layer in K in backward (the step-time model's hardware FLOPs)", function()
    local function hw(ckpt)
      return helper.estimate("llama3.2-1b", "--gpu", "a100-80gb", "--set", "seq_len=1024", "--set",
        "checkpointing=" .. ckpt).time.hardware_flops_per_step
    end
    local none, full, two = hw("none"), hw("full"), hw("layers-2")
    assert.is_true(math.abs((two - none) - (full - none) / 2) < 1e-6 * full)
  end)

  it("echoes as given, and names a malformed K", function()
    assert.are.equal("layers-3", helper.estimate("gpt2", "--set", "checkpointing=layers-3").recipe.checkpointing)
    local err = helper.fails("gpt2", "--set", "checkpointing=layers-0")
    assert.truthy(err:find("must be none, full, selective, op-selective, every-K or layers-K", 1, true), err)
  end)
end)
