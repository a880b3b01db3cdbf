-- The caching allocator simulated over the step (engine/core/allocator.c, recipe
-- key `allocator`): the same figure as tools/allocator_replay.py's Python
-- model of the same rules on a few timelines, the recipe key's two modes,
-- and no simulation for the CPU twin. Its comparison with Hugging Face's
-- BERT-large measurements is in docs/how-it-works.md ("The caching
-- allocator, simulated").
local helper = require("tests.lua.helper")

local PYTHON = "/usr/bin/python3"
local MIB = 2 ^ 20

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local bert = { "bert-large-uncased", "--set", "seq_len=512", "--set", "attention=eager", "--set", "torch_version=1.13",
  "--set", "cuda_context_mib=1343", "--set", "grads_set_to_none=false" }

local function with(base, ...)
  local args = { table.unpack(base) }
  for i = 1, select("#", ...) do args[#args + 1] = select(i, ...) end
  return args
end

-- tools/allocator_replay.py over the `--timeline --json` file of `args`:
-- the reservation after its last step (MiB, as it prints it), and the
-- JSON's simulated figure (MiB)
local function replayed(args)
  local out, err, code = helper.run("estimate", "--json", "--timeline", table.unpack(args))
  assert(code == 0, "vramplan failed: " .. err)
  local path = helper.write(out, ".json")
  local p = io.popen(string.format("%s %s/tools/allocator_replay.py %s 2>&1", PYTHON, helper.root, quote(path)))
  local text = p:read("a")
  assert(p:close(), text)
  local last = assert(text:match("reserved after each step [%d, ]-(%d+) MiB"), text)
  local simulated = require("dkjson").decode(out).per_gpu.peak_reserved_simulated_bytes
  return tonumber(last), simulated / MIB
end

describe("the caching allocator simulated over the step", function()
  -- The two models apply the same rules to the same events; they differ in
  -- pairing a free with its allocation (the engine knows the tensor, the
  -- Python tool takes the latest live block of the same op and size) and
  -- in gradient moves (AccumulateGrad: no allocator call here, a free and a
  -- malloc there). On BERT-large's runs 01 and 02 they agree to the MiB;
  -- run 03 is 8 MiB apart (5406 here, 5414 there), LLaMA-3.2-1B 108 MiB
  -- (32932, 33040): 64 MiB from the moves, the rest from pairing. Given the
  -- tool's pairing and moves (tried by hand), the C replay gives its
  -- figures to the MiB.
  local cases = {
    { "hf-perf-01", with(bert, "--set", "precision=fp32", "--set", "optimizer=adamw-hf", "--set", "micro_batch=4") },
    { "hf-perf-03", with(bert, "--set", "precision=fp32", "--set", "optimizer=adamw-hf", "--set", "micro_batch=1",
      "--set", "grad_accum=4", "--set", "checkpointing=full") },
    { "llama3.2-1b on an H100", { "llama3.2-1b", "--gpu", "h100-80gb" } },
  }
  for _, case in ipairs(cases) do
    it("agrees with tools/allocator_replay.py within 0.5 %: " .. case[1], function()
      local tool, simulated = replayed(case[2])
      assert.is_true(math.abs(simulated / tool - 1) < 0.005,
        string.format("simulated %.0f MiB, allocator_replay.py %d MiB", simulated, tool))
    end)
  end

  it("allocator = constant is the default: every figure as before, the simulation only beside", function()
    local default = helper.estimate("--timeline", table.unpack(cases[1][2])).per_gpu
    local constant = helper.estimate(table.unpack(with(cases[1][2], "--set", "allocator=constant"))).per_gpu
    for _, k in ipairs({ "peak_allocated_bytes", "peak_reserved_bytes", "peak_total_bytes", "allocator_bytes" }) do
      assert.are.equal(default[k], constant[k])
    end
    assert.are_not.equal(default.peak_reserved_bytes, default.peak_reserved_simulated_bytes)
    -- without the timeline (no unfolded evaluation asked for) it is not simulated beside
    assert.is_nil(constant.peak_reserved_simulated_bytes)
  end)

  it("allocator = simulated reserves what the simulation holds, with no fragmentation share", function()
    local r = helper.estimate(table.unpack(with(cases[1][2], "--set", "allocator=simulated")))
    local g = r.per_gpu
    assert.are.equal("simulated", r.recipe.allocator)
    assert.are.equal(g.peak_reserved_simulated_bytes, g.peak_reserved_bytes)
    assert.are.equal(g.peak_reserved_bytes - g.peak_allocated_bytes, g.allocator_bytes)
    assert.are.equal(g.peak_reserved_bytes + g.runtime_bytes, g.peak_total_bytes)
    -- a multiple of 2 MiB: every segment is (kSmallBuffer, kLargeBuffer, kRoundLarge)
    assert.are.equal(0, g.peak_reserved_bytes % (2 * MIB))
  end)

  it("is not reported for the CPU twin (no caching allocator)", function()
    local g = helper.estimate("gpt2", "--set", "device=cpu", "--set", "allocator=simulated").per_gpu
    assert.is_nil(g.peak_reserved_simulated_bytes)
    assert.are.equal(g.peak_allocated_bytes, g.peak_reserved_bytes)
  end)

  -- docs/how-it-works.md's table of the HF runs, constant beside simulated,
  -- is what the engine computes today
  it("docs/how-it-works.md's table of Hugging Face's runs is current", function()
    local json = require("dkjson")
    local f = assert(io.open(helper.root .. "/tests/reference/hf_trainer.json", "r"))
    local reference = json.decode(f:read("a"))
    f:close()
    f = assert(io.open(helper.root .. "/docs/how-it-works.md", "r"))
    local doc = f:read("a")
    f:close()
    for _, run in ipairs(reference.runs) do
      local r = run.recipe
      local args = with(bert, "--set", "precision=" .. r.precision, "--set", "optimizer=" .. r.optimizer,
        "--set", "micro_batch=" .. r.micro_batch, "--set", "grad_accum=" .. r.grad_accum,
        "--set", "checkpointing=" .. r.checkpointing)
      local constant = helper.estimate(table.unpack(args)).per_gpu
      local simulated = helper.estimate(table.unpack(with(args, "--set", "allocator=simulated"))).per_gpu
      local row = string.format("| %s | %d | %.0f | %.2f | %.0f | %.2f | %.0f | %.0f |", run.id, run.measured_mib,
        constant.peak_total_bytes / MIB, constant.peak_total_bytes / MIB / run.measured_mib,
        simulated.peak_total_bytes / MIB, simulated.peak_total_bytes / MIB / run.measured_mib,
        constant.peak_reserved_bytes / MIB, simulated.peak_reserved_bytes / MIB)
      assert.is_truthy(doc:find(row, 1, true), "docs/how-it-works.md should have the row " .. row)
    end
  end)

  it("rejects an unknown allocator model", helper.rejection({ "gpt2", "--set", "allocator=exact" }, "allocator"))
end)
