-- The ML-engineering handbook's Llama-3.1-8B runs (tests/reference/
-- ml_engineering.json): DeepSpeed ZeRO-3 over 8 GPUs with the optimizer on
-- the CPU, Liger's kernels, non-reentrant checkpointing, 8k to 64k tokens
-- of one sequence; torch.cuda.max_memory_reserved() since the process
-- began, against the reservation vramplan replays over the whole run.
local helper = require("tests.lua.helper")

local GIB = 2 ^ 30
local reference = helper.read_json(helper.root .. "/tests/reference/ml_engineering.json")

local function args_of(run, extra)
  local args = { reference.model, "--gpu", reference.gpu, "--set", "seq_len=" .. run.seq_len }
  local names = {}
  for k in pairs(reference.recipe) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(reference.recipe[k])
  end
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  return args
end

describe("the ML-engineering handbook's ZeRO-3 runs", function()
  -- Tolerance: 20 % below, 5 % above the published figure (today -6.3,
  -- -17.5 and -1.5 %). The 8k run is the loading's peak (the whole bf16
  -- model on the GPU before ZeRO-3 partitions it, 15.3 GiB), the others the
  -- step's own; the 32k run's 4.5 GiB more than the step is not explained
  -- (docs/reserved.md).
  for _, run in ipairs(reference.runs) do
    it(run.id .. " (" .. run.seq_len .. " tokens) is within 20 % below / 5 % above the published reservation", function()
      local g = helper.estimate(table.unpack(args_of(run))).per_gpu
      local err = g.peak_reserved_run_bytes / GIB / run.measured_gib - 1
      assert.is_true(err > -0.20 and err < 0.05, string.format("%s: %.2f GiB against %.1f (%+.1f %%)", run.id,
        g.peak_reserved_run_bytes / GIB, run.measured_gib, 100 * err))
    end)
  end

  -- deepspeed/runtime/zero/stage3.py, defragment: the partitions copied to
  -- the host and freed, empty_cache(), one flat buffer back on the GPU
  it("begins its first step with the loading's reservation given back (ZeRO-3's defragment)", function()
    local run = reference.runs[1]
    local e = helper.estimate(table.unpack(args_of(run)))
    local whole = e.model.params * 2 -- the bf16 model deepspeed.initialize moved to the GPU
    assert.is_true(e.per_gpu.peak_reserved_run_bytes >= whole, "the loading's peak is in the run's")
    assert.is_true(e.per_gpu.reserved_at_start_bytes < whole / 4,
      string.format("%.2f GiB reserved when the first step begins", e.per_gpu.reserved_at_start_bytes / GIB))
    -- built under zero.Init, the optimizer defragments the same way: the
    -- first step begins from the same reservation, and the loading's
    -- whole model is not there
    local init = helper.estimate(table.unpack(args_of(run, { "--set", "zero_init=true" }))).per_gpu
    assert.are.equal(e.per_gpu.reserved_at_start_bytes, init.reserved_at_start_bytes)
    assert.is_true(init.peak_reserved_run_bytes < whole, init.peak_reserved_run_bytes)
  end)
end)
