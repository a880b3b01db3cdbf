-- The training stacks' own activation-checkpointing keys (vramplan.stacks):
-- torchtitan's activation_checkpoint.{mode, selective_ac_option, early_stop}
-- and torchtune's enable_activation_checkpointing / ac_mode / ac_option,
-- each mapped onto the engine's checkpointing, use_reentrant and
-- checkpoint_early_stop, and checked against the same recipe written with
-- those keys by hand; torchtitan's per-op selective checkpointing is
-- checkpointing = op-selective, torchtune's is refused by name.
local helper = require("tests.lua.helper")

local MODEL = "llama3.2-1b"
local BASE = { "--set", "seq_len=128", "--set", "framework=fsdp", "--set", "gpus=2" }

local function args(list) return helper.with_sets(MODEL, BASE, list) end

-- Fails unless the stack's keys give `want` (recipe keys) and the same peak
-- as `want` set by hand.
local function assert_maps(stack_keys, want)
  local r = helper.estimate(args(stack_keys))
  for k, v in pairs(want) do
    assert(r.recipe[k] == v, string.format("%s: %s = %s, want %s", table.concat(stack_keys, " "), k,
      tostring(r.recipe[k]), tostring(v)))
  end
  local by_hand = {}
  for k, v in pairs(want) do by_hand[#by_hand + 1] = k .. "=" .. tostring(v) end
  local h = helper.estimate(args(by_hand))
  assert(h.per_gpu.peak_allocated_bytes == r.per_gpu.peak_allocated_bytes, string.format("%s: peak %d, by hand (%s) %d",
    table.concat(stack_keys, " "), r.per_gpu.peak_allocated_bytes, table.concat(by_hand, " "), h.per_gpu.peak_allocated_bytes))
  return r
end

-- Fails unless the stack's keys are refused with `message`, naming `key`.
local function assert_refused(stack_keys, key, message)
  local err = helper.fails(args(stack_keys))
  assert.truthy(err:find(key, 1, true), err)
  assert.truthy(err:find(message, 1, true), err)
end

describe("torchtitan's activation_checkpoint keys", function()
  it("map none, full and selective with an integer K onto the engine's checkpointing", function()
    -- torchtitan wraps blocks non-reentrant, without early stop unless asked
    local nonreentrant = { use_reentrant = false, checkpoint_early_stop = false }
    local function with(t)
      for k, v in pairs(nonreentrant) do
        if t[k] == nil then t[k] = v end
      end
      return t
    end
    assert_maps({ "activation_checkpoint.mode=none" }, { checkpointing = "none" })
    assert_maps({ "activation_checkpoint.mode=full" }, with({ checkpointing = "full" }))
    assert_maps({ "activation_checkpoint.mode=selective", "activation_checkpoint.selective_ac_option=4" },
      with({ checkpointing = "layers-4" }))
    -- selective_ac_option's default is "2"; mode's default is selective
    assert_maps({ "activation_checkpoint.mode=selective" }, with({ checkpointing = "layers-2" }))
    assert_maps({ "activation_checkpoint.selective_ac_option=3" }, with({ checkpointing = "layers-3" }))
    -- 0 and 1 checkpoint every block (_apply_layer_sac: `not ac_freq or count % ac_freq == 0`)
    assert_maps({ "activation_checkpoint.selective_ac_option=1" }, with({ checkpointing = "full" }))
    assert_maps({ "activation_checkpoint.selective_ac_option=0" }, with({ checkpointing = "full" }))
    assert_maps({ "activation_checkpoint.mode=FULL", "activation_checkpoint.early_stop=true" },
      { checkpointing = "full", use_reentrant = false, checkpoint_early_stop = true })
  end)

  it("maps per-op selective checkpointing onto op-selective, which runs over FSDP2", function()
    local fsdp2 = { "--set", "seq_len=128", "--set", "framework=fsdp2", "--set", "gpus=2" }
    local r = helper.estimate(helper.with_sets(MODEL, fsdp2, { "activation_checkpoint.mode=selective",
      "activation_checkpoint.selective_ac_option=op" }))
    assert.are.equal("op-selective", r.recipe.checkpointing)
    local h = helper.estimate(helper.with_sets(MODEL, fsdp2, { "checkpointing=op-selective" }))
    assert.are.equal(h.per_gpu.peak_allocated_bytes, r.per_gpu.peak_allocated_bytes)
    -- FSDP1's wrapping is not modelled under op-selective: the engine says so
    assert_refused({ "activation_checkpoint.selective_ac_option=op" }, "checkpointing", "op-selective")
  end)

  it("refuses memory_budget and bad values, naming the key", function()
    assert_refused({ "activation_checkpoint.mode=memory_budget" }, "activation_checkpoint.mode = memory_budget",
      "not modelled")
    assert_refused({ "activation_checkpoint.mode=some" }, "activation_checkpoint.mode: some",
      "none | full | selective | memory_budget")
    assert_refused({ "activation_checkpoint.selective_ac_option=2.5" }, "activation_checkpoint.selective_ac_option: 2.5",
      "neither op nor a whole number")
  end)

  it("blames the recipe file that sets them", function()
    local path = helper.write('return recipe {\n  ["activation_checkpoint.mode"] = "memory_budget",\n}\n')
    local err = helper.fails(MODEL, "--recipe", path, "--set", "seq_len=128")
    assert.truthy(err:find(path, 1, true), err)
    assert.truthy(err:find("activation_checkpoint.mode = memory_budget", 1, true), err)
  end)
end)

describe("torchtune's checkpointing keys", function()
  it("map enable_activation_checkpointing, and ac_mode with ac_option, onto the engine's", function()
    assert_maps({ "enable_activation_checkpointing=true" }, { checkpointing = "full", use_reentrant = false })
    assert_maps({ "enable_activation_checkpointing=false" }, { checkpointing = "none" })
    assert_maps({ "enable_activation_checkpointing=false", "ac_mode=selective", "ac_option=3" },
      { checkpointing = "layers-3", use_reentrant = false })
    assert_maps({ "ac_mode=full" }, { checkpointing = "full", use_reentrant = false })
    -- the recipe applies neither when both are set (recipes/full_finetune_distributed.py)
    local r = assert_maps({ "enable_activation_checkpointing=true", "ac_mode=full" }, { checkpointing = "none" })
    assert.are.equal("none", r.recipe.checkpointing)
  end)

  it("refuses ac_option op and a selective mode without its K", function()
    assert_refused({ "ac_mode=selective", "ac_option=op" }, "ac_option = op", "whole number of layers")
    assert_refused({ "ac_mode=selective" }, "ac_mode = selective", "needs ac_option")
    assert_refused({ "ac_mode=partial" }, "ac_mode: partial", "none | full | selective")
  end)
end)

describe("the stacks' checkpointing keys and the recipe's own", function()
  it("must agree, and one stack's keys at a time", function()
    assert_refused({ "activation_checkpoint.mode=full", "checkpointing=none" }, "activation_checkpoint.mode",
      "gives checkpointing = full, but checkpointing = none")
    assert_maps({ "activation_checkpoint.mode=full", "checkpointing=full" },
      { checkpointing = "full", use_reentrant = false, checkpoint_early_stop = false })
    assert_refused({ "activation_checkpoint.mode=full", "enable_activation_checkpointing=true" },
      "activation_checkpoint.mode is torchtitan's", "give one stack's checkpointing keys")
  end)

  it("give each stack its own flavour by default", function()
    local r = helper.estimate(MODEL, "--set", "seq_len=128", "--set", "stack=torchtitan", "--set", "gpus=2")
    assert.are.same({ "layers-2", false, false },
      { r.recipe.checkpointing, r.recipe.use_reentrant, r.recipe.checkpoint_early_stop })
    r = helper.estimate(MODEL, "--set", "seq_len=128", "--set", "stack=torchtune")
    assert.are.same({ "full", false, true }, { r.recipe.checkpointing, r.recipe.use_reentrant, r.recipe.checkpoint_early_stop })
    -- the stack's keys win over its defaults
    r = helper.estimate(MODEL, "--set", "seq_len=128", "--set", "stack=torchtitan", "--set", "gpus=2",
      "--set", "activation_checkpoint.mode=full")
    assert.are.equal("full", r.recipe.checkpointing)
    r = helper.estimate(MODEL, "--set", "seq_len=128", "--set", "stack=torchtune",
      "--set", "enable_activation_checkpointing=false")
    assert.are.equal("none", r.recipe.checkpointing)
  end)
end)
