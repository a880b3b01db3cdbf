-- `vramplan fit` against brute force: every answer must be what trying
-- each value with the engine gives (the searches may only skip values).
local helper = require("tests.lua.helper")
local job = require("vramplan.job")
local fit = require("vramplan.fit")

-- A GPU file with `mib` of memory, so that searches land on small values.
local function small_gpu(mib)
  return helper.write(string.format('return gpu { name = "test %d MiB", memory_mib = %d }', mib, mib))
end

local function load(model, sets, mib)
  local list = {}
  for k, v in pairs(sets) do list[#list + 1] = { k, tostring(v), "test" } end
  return job.load(helper.root, { target = model, sets = list, gpu = small_gpu(mib) })
end

-- Does the job fit with `changes`? (false where the engine refuses them)
local function fits(j, changes)
  local r = job.try(j, changes)
  return r ~= nil and r.fits == true, r
end

-- The largest v in 1..hi with fits(v), by trying every one.
local function brute_largest(hi, try)
  local best
  for v = 1, hi do
    if try(v) then best = v end
  end
  return best
end

describe("fit: micro_batch", function()
  it("is the largest micro_batch that fits, as trying every value finds", function()
    local j = load("llama3.2-1b", { layers = 2, seq_len = 512 }, 12000)
    local a = fit.micro_batch(j)
    assert.is_not_nil(a.value)
    local hi = 2 * a.value + 8
    assert.are.equal(brute_largest(hi, function(mb) return fits(j, { micro_batch = mb }) end), a.value)
    local _, next_result = fits(j, { micro_batch = a.value + 1 })
    assert.are.equal(-next_result.headroom_bytes, a.next_short_by_bytes)
    assert.is_true(a.estimates < hi, "a search, not a scan: " .. a.estimates .. " estimates")
  end)

  it("keeps the global batch: grad_accum rounds up, and the largest exact divisor is found", function()
    local j = load("llama3.2-1b", { layers = 2, seq_len = 512, global_batch = 96, dp = 2,
                                    framework = "deepspeed", zero = 2 }, 14000)
    local a = fit.micro_batch(j)
    local function try(mb)
      return fits(j, { global_batch = job.unset, micro_batch = mb, grad_accum = (96 + 2 * mb - 1) // (2 * mb) })
    end
    assert.are.equal(brute_largest(48, try), a.value)
    assert.are.equal((96 + 2 * a.value - 1) // (2 * a.value), a.grad_accum)
    assert.are.equal(96 % (2 * a.value) == 0, a.divides)
    -- the exact one is what `estimate` accepts with global_batch kept
    local exact = brute_largest(48, function(mb) return 48 % mb == 0 and fits(j, { micro_batch = mb }) end)
    assert.are.equal(exact, a.dividing.value)
  end)

  it("finds the answer where the total is not monotone (the allocator's segment rounding)", function()
    -- one more token can need a few MiB less once the blocks at the peak
    -- round to segments differently: find such a length, then make a GPU
    -- whose capacity is exactly its total, so the length before it fails
    local j = load("gpt2", { layers = 2 }, 100000)
    local totals, dip = {}, nil
    for s = 1, 1024 do
      totals[s] = job.try(j, { seq_len = s }).peak_total_bytes
      if s > 1 and totals[s] < totals[s - 1] and not dip then dip = s end
    end
    assert.is_not_nil(dip, "this model must show a dip to test anything")
    local gpu = helper.write(string.format('return gpu { name = "exact", memory_mib = %.17g }', totals[dip] / 1048576))
    local k = job.load(helper.root, { target = "gpt2", sets = { { "layers", "2", "test" } }, gpu = gpu })
    assert.is_false(fits(k, { seq_len = dip - 1 }))
    assert.is_true(fits(k, { seq_len = dip }))
    local a = fit.seq_len(k)
    assert.are.equal(brute_largest(1024, function(s) return fits(k, { seq_len = s }) end), a.value)
    assert.is_true(a.value >= dip)
  end)

  it("keeps the global batch through a pipeline (micro-batches in flight change with micro_batch)", function()
    local j = load("llama3.2-1b", { layers = 4, seq_len = 1024, global_batch = 24, framework = "megatron", pp = 2 },
      9000)
    local a = fit.micro_batch(j)
    local expect = brute_largest(24, function(mb)
      return (fits(j, { global_batch = job.unset, micro_batch = mb, num_microbatches = (24 + mb - 1) // mb }))
    end)
    assert.is_not_nil(expect)
    assert.are.equal(expect, a.value)
  end)

  it("relies on a lower bound that grows with micro_batch and seq_len and falls with dp", function()
    -- the searches skip values by fit.lower_bound: it must be monotone
    local cases = {
      { "llama3.2-1b", { layers = 2, seq_len = 256 }, "micro_batch", 1, 64, 1 },
      { "gpt2", { layers = 2 }, "seq_len", 1, 1024, 1 },
      { "llama3.2-1b", { layers = 2, attention = "eager" }, "seq_len", 1, 2048, 1 },
      { "llama3.2-1b", { seq_len = 512, framework = "deepspeed", zero = 3 }, "dp", 1, 300, -1 },
      { "llama3.2-1b", { seq_len = 512, framework = "fsdp" }, "dp", 1, 300, -1 },
      { "llama3.2-1b", { layers = 4, seq_len = 512, framework = "megatron", pp = 2, tp = 2 }, "micro_batch", 1, 32, 1 },
    }
    for _, c in ipairs(cases) do
      local j = load(c[1], c[2], 80000)
      local previous
      for v = c[4], c[5] do
        local r = job.try(j, { [c[3]] = v })
        if r then
          local b = fit.lower_bound(r)
          if previous then
            assert.is_true((b - previous) * c[6] >= 0, string.format("%s %s %d: %d after %d", c[1], c[3], v, b, previous))
          end
          previous = b
        end
      end
    end
  end)

  it("respects a layout's divisibility (sequence parallelism splits micro_batch x seq_len over tp)", function()
    local j = load("llama3.2-1b", { layers = 2, seq_len = 511, framework = "megatron", tp = 2,
                                    sequence_parallel = true }, 12000)
    local a = fit.micro_batch(j)
    assert.are.equal(0, a.value % 2)
    assert.are.equal(brute_largest(2 * a.value + 8, function(mb) return fits(j, { micro_batch = mb }) end), a.value)
  end)

  it("says why when not even one sequence fits", function()
    local j = load("llama3.2-1b", { seq_len = 4096 }, 2000)
    local a = fit.micro_batch(j)
    assert.is_nil(a.value)
    assert.truthy(a.reason:find("does not fit", 1, true))
  end)
end)

describe("fit: seq_len", function()
  it("is the longest sequence up to the position limit, as trying every length finds", function()
    -- a GPU that holds about 600 tokens of this model
    local probe = load("gpt2", { layers = 2 }, 100000)
    local mib = job.try(probe, { seq_len = 600 }).peak_total_bytes / 1048576
    local j = load("gpt2", { layers = 2 }, math.floor(mib))
    local a = fit.seq_len(j)
    assert.are.equal(1024, a.limit)
    assert.are.equal(brute_largest(1024, function(s) return fits(j, { seq_len = s }) end), a.value)
    assert.is_true(a.value < 1024, "the GPU must bind before the table ends")
  end)

  it("takes a cap, and lengths context parallelism can split", function()
    local j = load("llama3.2-1b", { layers = 2, framework = "megatron", cp = 2, max_positions = 4096 }, 9000)
    local a = fit.seq_len(j, { max = 3000 })
    assert.are.equal(0, a.value % 4)
    assert.are.equal(brute_largest(3000, function(s) return s % 4 == 0 and fits(j, { seq_len = s }) end), a.value)
  end)
end)

-- Fails unless the answer `a` of fit.gpus is the smallest dp that fits, trying every one.
local function assert_fewest_dp(j, a)
  for dp = 1, a.value - 1 do assert.is_false(fits(j, { dp = dp }), "dp " .. dp) end
  assert.is_true(fits(j, { dp = a.value }))
end

-- Fails unless the answer `a` of fit.gpus with megatron is the fewest tp x pp x dp that fits, trying every
-- tp up to 8 and every pp dividing `layers`.
local function assert_fewest_layout(j, a, layers)
  for tp = 1, 8 do
    for pp = 1, layers do
      for dp = 1, layers % pp == 0 and (a.value - 1) // (tp * pp) or 0 do
        assert.is_false(fits(j, { tp = tp, pp = pp, dp = dp }), string.format("tp %d pp %d dp %d", tp, pp, dp))
      end
    end
  end
  assert.is_true(fits(j, { tp = a.layout.tp, pp = a.layout.pp, dp = a.layout.dp }))
end

describe("fit: gpus", function()
  it("is the smallest dp that fits with ZeRO-3, as trying every count finds", function()
    local j = load("llama3.2-1b", { seq_len = 512, framework = "deepspeed", zero = 3 }, 9000)
    local a = fit.gpus(j)
    assert.is_not_nil(a.value)
    assert.is_true(a.value > 1)
    assert_fewest_dp(j, a)
  end)

  it("is the smallest dp that fits with FSDP2, whose memory grows again once the ranks outnumber rows", function()
    -- FSDP2 pads each parameter's dim 0 to a multiple of the ranks: Qwen3-30B-A3B's experts have 768 rows, so
    -- 65536 ranks gather 85 x each expert's size and the top of the search range does not fit
    local j = load("qwen3-30b-a3b", { layers = 4, seq_len = 512, framework = "fsdp2" }, 24564)
    assert.is_false(fits(j, { dp = 65536 }))
    local a = fit.gpus(j)
    assert.is_not_nil(a.value, a.reason)
    assert_fewest_dp(j, a)
  end)

  it("with global_batch, says whether the fewest GPUs keep it, and the fewest that keep it exactly", function()
    local global = 12
    local j = load("llama3.2-1b", { seq_len = 512, framework = "fsdp", global_batch = global }, 7400)
    local a = fit.gpus(j)
    assert.is_not_nil(a.value, a.reason)
    -- brute force: the smallest dp that fits with the global batch rounded up to whole micro-batches per rank
    local function rounded(dp)
      return fits(j, { dp = dp, global_batch = job.unset, grad_accum = (global + dp - 1) // dp })
    end
    local first
    for dp = 1, global do if not first and rounded(dp) then first = dp end end
    assert.are.equal(first, a.layout.dp)
    assert.are.equal((global + first - 1) // first, a.grad_accum)
    assert.are.equal(global % first == 0, a.divides)
    assert.are.equal(first * a.grad_accum, a.global_batch)
    -- the engine refuses a global_batch that dp does not divide: the smallest dp it accepts and that fits
    local exact
    for dp = 1, global do if not exact and fits(j, { dp = dp }) then exact = dp end end
    assert.is_false(a.divides) -- the case this test is for
    assert.are.same({ value = exact, dp = exact, grad_accum = global // exact }, a.dividing)
  end)

  it("is the smallest tp x pp x dp with megatron", function()
    local j = load("llama3.2-1b", { layers = 8, seq_len = 1024, framework = "megatron", distributed_optimizer = true },
      5000)
    local a = fit.gpus(j)
    assert.is_not_nil(a.value)
    assert.are.equal(a.value, a.layout.dp * a.layout.tp * a.layout.pp)
    assert_fewest_layout(j, a, 8)
  end)

  it("splits the layers evenly over pp with megatron, as Megatron-LM requires and plan does", function()
    -- 9 layers: pp 2 would fit on 2 GPUs, but Megatron-LM asserts num_layers % pp == 0
    local j = load("llama3.2-1b", { layers = 9, seq_len = 1024, framework = "megatron" }, 11500)
    assert.is_true(fits(j, { pp = 2 }))
    local a = fit.gpus(j)
    assert.is_not_nil(a.value, a.reason)
    assert.are.equal(0, 9 % a.layout.pp)
    assert_fewest_layout(j, a, 9)
  end)

  it("says when more data-parallel ranks cannot help", function()
    local j = load("llama3.2-1b", { seq_len = 512 }, 4000)
    local a = fit.gpus(j, { max = 64 })
    assert.is_nil(a.value)
    assert.truthy(a.reason:find("whole replica", 1, true), a.reason)
  end)
end)

describe("vramplan fit (the command)", function()
  it("answers in JSON what `estimate` finds at the answer and one past it", function()
    local gpu = small_gpu(12000)
    local sets = { "--set", "layers=2", "--set", "seq_len=512" }
    local out, err, code = helper.run("fit", "llama3.2-1b", "--gpu", gpu, "--json", table.unpack(sets))
    assert.are.equal(0, code, err)
    local o = require("dkjson").decode(out)
    local mb = o.fit.micro_batch
    local at = helper.estimate("llama3.2-1b", "--gpu", gpu, "--set", "micro_batch=" .. mb.value, table.unpack(sets))
    local past = helper.estimate("llama3.2-1b", "--gpu", gpu, "--set", "micro_batch=" .. (mb.value + 1),
      table.unpack(sets))
    assert.is_true(at.fits)
    assert.is_false(past.fits)
    assert.are.equal(at.per_gpu.peak_total_bytes, mb.peak_total_bytes)
    assert.are.equal(-past.headroom_bytes, mb.next_short_by_bytes)
    assert.is_not_nil(o.fit.seq_len.value)
    assert.is_not_nil(o.fit.gpus.value)
  end)

  it("judges the fewest GPUs of a node as estimate --gpus does: the node's GPUs per node follow the ranks",
    function()
      -- at dp 1 the job has one GPU of the DGX; at dp 2 its NCCL communicators span two GPUs of one node, not two
      -- nodes of one GPU each (engine/step/nccl.c)
      local sets = { "--set", "framework=fsdp", "--set", "checkpointing=full" }
      local out, err, code = helper.run("fit", "llama3-8b", "--gpu", "dgx-h100", "--json", table.unpack(sets))
      assert.are.equal(0, code, err)
      local g = require("dkjson").decode(out).fit.gpus
      assert.is_true(g.value > 1)
      local at = helper.estimate("llama3-8b", "--gpu", "dgx-h100", "--gpus", tostring(g.value), table.unpack(sets))
      local fewer = helper.estimate("llama3-8b", "--gpu", "dgx-h100", "--gpus", tostring(g.value - 1),
        table.unpack(sets))
      assert.are.equal(math.min(8, g.value), at.recipe.gpus_per_node)
      assert.is_true(at.fits)
      assert.are.equal(at.per_gpu.peak_total_bytes, g.peak_total_bytes)
      assert.is_false(fewer.fits)
      assert.are.equal(-fewer.headroom_bytes, g.next_short_by_bytes)
    end)

  it("gives null with a reason where nothing fits, and exits 0", function()
    local out, err, code = helper.run("fit", "llama3.2-1b", "--gpu", small_gpu(1000), "--json")
    assert.are.equal(0, code, err)
    local o = require("dkjson").decode(out)
    assert.is_nil(o.fit.micro_batch.value)
    assert.truthy(out:find('"value":null', 1, true))
    assert.truthy(o.fit.micro_batch.reason)
  end)

  it("needs --gpu", function()
    local _, err, code = helper.run("fit", "gpt2")
    assert.are.equal(2, code)
    assert.truthy(err:find("fit needs --gpu", 1, true), err)
  end)
end)
