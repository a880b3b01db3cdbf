-- checkpointing = op-selective: torchtitan's op-level selective activation
-- checkpointing in every layer (engine/policy/sac_policy.c's save list);
-- tests/torch/compare.py checks it against PyTorch on CPU ("op-selective",
-- where 1.13's eager attention has no SDPA). Here: what the save list keeps
-- per layer under SDPA, counted by hand from torchtitan's list; refusals;
-- folding.
local helper = require("tests.lua.helper")

local function activations(ckpt, attention)
  return helper.estimate("llama2-7b", "--set", "precision=bf16", "--set", "device=cpu", "--set", "seq_len=1024",
    "--set", "checkpointing=" .. ckpt, "--set", "use_reentrant=false", "--set", "attention=" .. attention)
    .per_gpu.activations_bytes
end

describe("checkpointing = op-selective", function()
  it("keeps the saved ops' outputs beside each layer's input, as torchtitan's save list says", function()
    -- Llama-2-7B, one sequence of 1,024 tokens in bf16: of a layer's seven
    -- mm (q, k, v, o, gate, up, down) the 1st, 3rd, 5th and 7th are saved
    -- (q_proj's and v_proj's outputs, 4,096 wide; gate_proj's, 11,008;
    -- down_proj's, 4,096), and under SDPA its flash kernel's outputs (the
    -- 4,096-wide output, an fp32 logsumexp per head and row, the 16-byte
    -- RNG state); FlashAttention-2's library kernel is no SDPA op
    local tokens, layers = 1024, 32
    local mm = 2 * tokens * (4096 + 4096 + 11008 + 4096)
    local sdpa = 2 * tokens * 4096 + 4 * 32 * tokens + 16
    for attention, per_layer in pairs({ sdpa = mm + sdpa, flash = mm }) do
      local full = activations("full", attention)
      assert.are.equal(layers * per_layer, activations("op-selective", attention) - full, attention)
    end
  end)

  it("echoes as given and runs non-reentrant", function()
    local r = helper.estimate("gpt2", "--set", "checkpointing=op-selective")
    assert.are.equal("op-selective", r.recipe.checkpointing)
    assert.are.equal(false, r.recipe.use_reentrant)
  end)

  it("refuses what it does not model, naming the key", function()
    local function refused(message, ...)
      local err = helper.fails("llama3.2-1b", "--set", "checkpointing=op-selective", ...)
      assert.truthy(err:find(message, 1, true), err)
    end
    refused("use_reentrant: checkpointing = op-selective is torch.utils.checkpoint's selective checkpointing",
      "--set", "use_reentrant=true")
    refused("checkpointing: op-selective is modelled on framework torch", "--set", "framework=fsdp", "--set", "dp=2")
    refused("checkpointing: op-selective is not modelled with qlora", "--set", "finetune=qlora")
    refused("checkpointing: op-selective is not modelled with offload_activations", "--set",
      "offload_activations=true")
    local err = helper.fails("mixtral-8x7b", "--set", "checkpointing=op-selective")
    assert.truthy(err:find("checkpointing: op-selective is modelled for dense layers", 1, true), err)
    err = helper.fails("gpt2", "--set", "checkpointing=op-selectiv")
    assert.truthy(err:find("must be none, full, selective, op-selective, every-K or layers-K", 1, true), err)
  end)

  it("is refused with use_reentrant = true in every run (keys are read in their declared order, not the table's)",
    function()
      -- Lua's table order changes from process to process: twelve runs
      -- would have met both orders before (each about half the time)
      for _ = 1, 12 do
        local err = helper.fails("gpt2", "--set", "checkpointing=op-selective", "--set", "use_reentrant=true")
        assert.truthy(err:find("use_reentrant: checkpointing = op-selective", 1, true), err)
      end
    end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { precision = "bf16", checkpointing = "op-selective" },
      { precision = "bf16", checkpointing = "op-selective", checkpoint_early_stop = false, attention = "eager" },
      { precision = "amp-bf16", checkpointing = "op-selective", finetune = "lora", lora_targets = "all-linear" },
      { precision = "bf16", checkpointing = "op-selective", optimizer_in_backward = true },
    })
  end)
end)
