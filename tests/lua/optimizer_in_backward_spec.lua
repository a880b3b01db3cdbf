-- optimizer_in_backward = true: torchtune's optimizer in backward, one
-- optimizer per parameter stepped in its post-accumulate-grad hook and the
-- gradient set to None there; tests/torch/compare.py checks the timeline
-- against PyTorch ("optimizer in backward"). Here: what it refuses, and that
-- folding identical layers still changes nothing.
local helper = require("tests.lua.helper")

describe("optimizer_in_backward", function()
  it("keeps no gradients between backward and the next step", function()
    local r = helper.estimate("llama2-7b", "--set", "precision=bf16", "--set", "optimizer_in_backward=true")
    assert.are.equal(true, r.recipe.optimizer_in_backward)
    assert.are.equal(0, r.per_gpu.grads_bytes)
    assert.are.equal(false, helper.estimate("gpt2").recipe.optimizer_in_backward)
  end)

  it("refuses what torchtune refuses or vramplan does not model, naming the key", function()
    local on = { "--set", "optimizer_in_backward=true", "--set", "precision=bf16" }
    local function refused(message, ...)
      local args = { "llama3.2-1b" }
      for _, a in ipairs(on) do args[#args + 1] = a end
      for i = 1, select("#", ...) do args[#args + 1] = select(i, ...) end
      local err = helper.fails(table.unpack(args))
      assert.truthy(err:find("optimizer_in_backward: " .. message, 1, true), err)
    end
    refused("torchtune refuses gradient accumulation with it (grad_accum must be 1)", "--set", "grad_accum=2")
    refused("needs an optimizer to step (optimizer is none)", "--set", "optimizer=none")
    refused("modelled on one GPU", "--set", "dp=2")
    refused("modelled on one GPU", "--set", "framework=fsdp", "--set", "dp=2")
    refused("modelled on one GPU", "--set", "framework=deepspeed", "--set", "zero=2", "--set", "dp=2", "--set",
      "precision=fp32")
    refused("modelled on one GPU", "--set", "framework=megatron", "--set", "tp=2", "--set", "precision=fp32")
    refused("each parameter steps in its own dtype", "--set", "precision=mixed-bf16")
    refused("its hook sets each gradient to None (grads_set_to_none must be true)", "--set",
      "grads_set_to_none=false")
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { precision = "bf16", optimizer_in_backward = true },
      { precision = "bf16", checkpointing = "full", optimizer_in_backward = true, optimizer_impl = "for-loop" },
      { precision = "amp-bf16", checkpointing = "every-2", use_reentrant = false, optimizer_in_backward = true },
      { precision = "bf16", finetune = "lora", lora_targets = "all-linear", optimizer_in_backward = true,
        optimizer = "adafactor" },
      { precision = "bf16", checkpointing = "full", optimizer = "paged-adamw-8bit", optimizer_in_backward = true },
    })
  end)
end)
