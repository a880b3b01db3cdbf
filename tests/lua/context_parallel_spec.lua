-- Context parallelism (Megatron-LM with Transformer Engine's ring
-- attention): the sequence split over cp ranks, K and V passed round the
-- ring, gradients and the distributed optimizer over dp x cp, and layouts
-- that do not hold together.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local models = require("vramplan.models")

local function build(name, overrides)
  return (arch.build(models.describe(helper.root, name), overrides or {}, { layers = "test" }))
end

local function megatron(recipe)
  recipe.framework, recipe.precision, recipe.attention = "megatron", "mixed-bf16", "flash"
  return recipe
end

describe("context parallelism", function()
  it("keeps 1/cp of the activations on each rank", function()
    local model = build("llama3-8b", { layers = 4 })
    local one = vramplan.estimate(model, megatron({ seq_len = 8192 }))
    for _, cp in ipairs({ 2, 4, 8 }) do
      local r = vramplan.estimate(model, megatron({ seq_len = 8192, cp = cp }))
      -- everything per token is split; the ring's saved K/V buffer replaces k and v
      assert.is_true(math.abs(r.activations_bytes * cp / one.activations_bytes - 1) < 0.002,
        string.format("cp %d: %d vs %d / cp", cp, r.activations_bytes, one.activations_bytes))
      assert.are.equal(one.params_bytes, r.params_bytes)
    end
  end)

  it("holds every rank's K and V and every step's output until the ring ends", function()
    -- TE's AttnFuncWithCPAndKVP2P: p2p_comm_buffers (cp of them) and
    -- out_per_step (cp), all alive when the output is corrected
    local model = build("llama3-8b", { layers = 2 })
    local b, s, heads, kv_heads, d = 2, 4096, 32, 8, 128
    for _, cp in ipairs({ 2, 4 }) do
      local r = vramplan.estimate(model, megatron({ micro_batch = b, seq_len = s, cp = cp }), nil,
        { timeline = true, fold = false })
      local t = s // cp
      local ring, outs = {}, {}
      for _, e in ipairs(r.timeline) do
        if e.phase == "forward" and e.layer == 0 and e.delta > 0 then
          if e.op == "attention.cp_kv_ring" then ring[#ring + 1] = e.delta end
          if e.op == "attention.cp_out_per_step" then outs[#outs + 1] = e.delta end
        end
      end
      assert.are.equal(cp, #ring)
      assert.are.equal(cp, #outs)
      for i = 1, cp do
        assert.are.equal(2 * b * t * kv_heads * d * 2, ring[i])   -- k and v stacked, bf16
        assert.are.equal(b * t * heads * d * 2, outs[i])
      end
    end
  end)

  it("reduces gradients and shards the distributed optimizer over dp x cp", function()
    local model = build("llama3-8b", { layers = 4 })
    local a = vramplan.estimate(model, megatron({ seq_len = 4096, dp = 2, cp = 4, distributed_optimizer = true }))
    local b = vramplan.estimate(model, megatron({ seq_len = 4096, dp = 8, distributed_optimizer = true }))
    assert.are.equal(b.master_bytes, a.master_bytes)
    assert.are.equal(b.optimizer_bytes, a.optimizer_bytes)
  end)

  it("agrees with evaluating every layer", function()
    local model = build("llama3-8b", { layers = 5 })
    for _, recipe in ipairs({
      megatron({ seq_len = 2048, cp = 4, checkpointing = "every-2" }),
      megatron({ seq_len = 2048, cp = 2, tp = 2, sequence_parallel = true, dp = 2, distributed_optimizer = true }),
    }) do
      helper.assert_fold_agrees(model, recipe)
    end
  end)

  local bad = {
    { { "--set", "cp=2" }, "cp: context parallelism needs framework" },
    { { "--set", "framework=megatron", "--set", "cp=3", "--set", "seq_len=4096" }, "cp: seq_len must divide into 2 x cp" },
    { { "--set", "framework=megatron", "--set", "cp=2", "--set", "attention=eager" }, "cp: ring attention runs a fused" },
    { { "--set", "framework=megatron", "--set", "cp=2", "--set", "dp=2", "--set", "gpus=2" }, "gpus: must equal dp x tp x pp x cp" },
  }
  for _, case in ipairs(bad) do
    local args = { "llama3-8b", table.unpack(case[1]) }
    it("rejects " .. table.concat(args, " "), helper.rejection(args, case[2]))
  end
end)
