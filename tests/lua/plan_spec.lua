-- `vramplan plan`: every layout it prints estimates as it says, every
-- rejection has the reason it gives, and the emitted recipes run.
local helper = require("tests.lua.helper")
local json = require("dkjson")
local job = require("vramplan.job")
local plan = require("vramplan.plan")

local function small_gpu(mib)
  return helper.write(string.format('return gpu { name = "test %d MiB", memory_mib = %d }', mib, mib))
end

describe("vramplan plan", function()
  local gpu = small_gpu(16000)
  local base = { "llama3.2-1b", "--gpu", gpu, "--gpus", "8", "--set", "layers=4", "--set", "seq_len=1024" }

  it("prints layouts that estimate as it says, for the GPU count asked", function()
    local out, err, code = helper.run("plan", "--json", "--top", "3", table.unpack(base))
    assert.are.equal(0, code, err)
    local o = json.decode(out)
    assert.is_true(#o.plan.candidates > 0)
    for _, c in ipairs(o.plan.candidates) do
      local args = { "llama3.2-1b", "--gpu", gpu, "--set", "layers=4", "--set", "seq_len=1024" }
      for k, v in pairs(c.recipe) do
        args[#args + 1] = "--set"
        args[#args + 1] = k .. "=" .. tostring(v)
      end
      local e = helper.estimate(table.unpack(args))
      assert.are.equal(e.per_gpu.peak_total_bytes, c.peak_total_bytes)
      assert.is_true(e.fits)
      assert.are.equal(8, e.recipe.dp * e.recipe.tp * e.recipe.pp * e.recipe.cp)
    end
  end)

  it("searches FSDP2 too, with and without resharding after forward", function()
    local j = job.load(helper.root, { target = "llama3.2-1b", gpu = small_gpu(16000),
                                      sets = { { "layers", "4", "t" }, { "seq_len", "1024", "t" } } })
    local p = plan.plan(j, 8)
    local tried = {}
    for _, c in ipairs(p.candidates) do
      if c.recipe.framework == "fsdp2" then tried[tostring(c.recipe.reshard_after_forward)] = true end
    end
    for _, r in ipairs(p.rejections) do
      if r.changes.framework == "fsdp2" then tried[tostring(r.changes.reshard_after_forward)] = true end
    end
    assert.is_true(tried["true"] and tried["false"])
  end)

  it("gives each rejection its true reason", function()
    local j = job.load(helper.root, { target = "llama3.2-1b", gpu = small_gpu(6000),
                                      sets = { { "layers", "4", "t" }, { "seq_len", "1024", "t" } } })
    local p = plan.plan(j, 8)
    assert.is_true(#p.rejections > 0)
    local seen = {}
    for _, r in ipairs(p.rejections) do
      seen[r.reason] = true
      local result = job.try(j, r.changes)
      if r.reason == "layout invalid" then
        assert.is_nil(result, json.encode(r.changes))
      elseif r.reason == "does not fit" then
        assert.is_false(result ~= nil and result.fits, json.encode(r.changes))
      elseif r.reason == "dominated" then
        assert.is_true(result.fits)
      end
    end
    assert.is_true(seen["does not fit"] or false)
    -- pruning: fewer estimates than layouts times options times micro-batches
    assert.is_true(p.estimates < 2000, p.estimates .. " estimates")
  end)

  it("keeps the keys the recipe sets", function()
    local j = job.load(helper.root, { target = "llama3.2-1b", gpu = gpu,
                                      sets = { { "layers", "4", "t" }, { "seq_len", "1024", "t" },
                                               { "framework", "deepspeed", "t" }, { "checkpointing", "full", "t" } } })
    local p = plan.plan(j, 4)
    assert.is_true(#p.candidates > 0)
    for _, c in ipairs(p.candidates) do
      assert.are.equal("deepspeed", c.recipe.framework)
      assert.are.equal("full", c.recipe.checkpointing)
      assert.are.equal(4, c.recipe.dp)
    end
  end)

  it("writes each of the top layouts as a recipe that estimates the same", function()
    local dir = os.tmpname()
    os.remove(dir)
    local out, err, code = helper.run("plan", "--top", "2", "--emit", dir, table.unpack(base))
    assert.are.equal(0, code, err)
    local first = out:match("needs ([%d%.]+ %a+)")
    local e = helper.estimate("llama3.2-1b", "--gpu", gpu, "--set", "layers=4", "--recipe", dir .. "/plan-1.lua")
    assert.is_true(e.fits)
    assert.are.equal(first, require("vramplan.report").bytes(e.per_gpu.peak_total_bytes))
    os.remove(dir .. "/plan-1.lua")
    os.remove(dir .. "/plan-2.lua")
    os.remove(dir)
  end)

  it("says so when no layout fits, and exits 0", function()
    local out, err, code = helper.run("plan", "llama3-70b", "--gpu", small_gpu(1000), "--gpus", "2")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("no layout of 2 GPUs fits", 1, true), out)
  end)

  it("says when no layout can split the GPUs as the recipe asks", function()
    local out, err, code = helper.run("plan", "llama3.2-1b", "--gpu", "a100-80gb", "--gpus", "8",
      "--set", "framework=megatron", "--set", "tp=3")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("no layout can split 8 GPUs", 1, true), out)
  end)

  it("refuses a GPU count that is not a positive integer", function()
    local _, err, code = helper.run("plan", "gpt2", "--gpu", "a100-80gb", "--gpus", "0")
    assert.are.equal(2, code)
    assert.truthy(err:find("--gpus takes a positive integer", 1, true), err)
  end)
end)
