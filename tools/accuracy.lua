-- vramplan against the GPU measurements kept in tests/reference/: each
-- run's estimate beside the published figure, and a summary by kind of
-- run, which the text report quotes (scripts/lib/vramplan/accuracy.lua).
--
--   lua5.4 tools/accuracy.lua           prints the table
--   lua5.4 tools/accuracy.lua --write   rewrites scripts/lib/vramplan/accuracy.lua
--   lua5.4 tools/accuracy.lua --check   exits 1 when that file is not current
--
-- Run from the tree's root after `make`. tests/lua/accuracy_spec.lua checks
-- the written summary is current.
package.cpath = "build/?.so;" .. package.cpath
package.path = "scripts/lib/?.lua;" .. package.path
local json = require("dkjson")
local job = require("vramplan.job")

local function read(path)
  local f = assert(io.open(path, "r"))
  local o = json.decode(f:read("a"))
  f:close()
  return o
end

local function estimate(model, keys, gpu)
  local sets = {}
  for k, v in pairs(keys) do sets[#sets + 1] = { k, tostring(v), "reference" } end
  return job.estimate(job.load(".", { target = model, sets = sets, gpu = gpu }))
end

-- Every run: { id, kind, what, measured, estimated } in bytes (the worst
-- rank's, as the published figures take the largest over ranks).
local function runs()
  local out = {}
  -- transformers' perf_train_gpu_one: nvidia-smi's used memory after training
  -- BERT-large on a V100, fully fine-tuned with the HF Trainer
  local hf = read("tests/reference/hf_trainer.json")
  for _, run in ipairs(hf.runs) do
    local keys = { seq_len = 512, attention = "eager", torch_version = "1.13", cuda_context_mib = hf.cuda_context_mib }
    for k, v in pairs(run.recipe) do keys[k] = v end
    local r = estimate("bert-large-uncased", keys)
    out[#out + 1] = { id = run.id, kind = "full", what = "nvidia-smi total", measured = run.measured_mib * 2 ^ 20,
                      estimated = r.peak_total_bytes }
  end
  -- PEFT's README: BLOOMZ-7b1 with LoRA, torch.cuda.max_memory_allocated
  -- published rounded to whole GB (the middle of the range it allows)
  local peft = read("tests/reference/peft_memory.json")
  for _, run in ipairs(peft.runs) do
    local r = estimate(run.model, run.recipe)
    out[#out + 1] = { id = run.id, kind = run.recipe.finetune or "full", what = "allocated peak",
                      measured = (run.low_mib + run.high_mib) / 2 * 2 ^ 20, estimated = r.peak_allocated_bytes }
  end
  -- torchtune's README ladder (Llama 3.2 3B on an A100): the peak of
  -- active memory, the allocated blocks
  local tune = read("tests/reference/torchtune.json")
  for _, run in ipairs(tune.rows) do
    if run.modelled then
      local r = estimate(tune.model, run.recipe, tune.gpu)
      -- (its LoRA and QLoRA rows are LoRA runs, as the report quotes them)
      local kind = (run.recipe.finetune == "lora" or run.recipe.finetune == "qlora") and "lora" or "full"
      out[#out + 1] = { id = run.id, kind = kind, what = "allocated peak", measured = run.value_gib * 2 ^ 30,
                        estimated = r.peak_allocated_bytes }
    end
  end
  -- torchtitan's benchmark (H100s, FSDP2 with TP, CP and PP): the reserved
  -- peak, with the allocator a user gets by default (the tests simulate it)
  local titan = read("tests/reference/torchtitan.json")
  for _, run in ipairs(titan.rows) do
    if run.modelled then
      local r = estimate(run.model, run.recipe)
      out[#out + 1] = { id = run.id, kind = "full", what = "reserved peak", measured = run.value_gib * 2 ^ 30,
                        estimated = r.peak_reserved_bytes }
    end
  end
  -- axolotl's GPT-OSS examples: max_memory_reserved() over the run, from
  -- its logs, of the configs as published (the rows vramplan models)
  local ax = read("tests/reference/axolotl_gpt_oss.json")
  for _, run in ipairs(ax.rows) do
    if run.modelled then
      local sets = { { "allocator", "simulated", "reference" } }
      for k, v in pairs(run.set or {}) do sets[#sets + 1] = { k, v, "reference" } end
      local r = job.estimate(job.load(".", {
        recipe = "tests/fixtures/configs/axolotl/examples/gpt-oss/" .. run.config,
        sets = sets, gpus = run.gpus, gpu = ax.gpu }))
      local ft = r.recipe.finetune
      out[#out + 1] = { id = run.id, kind = (ft == "lora" or ft == "qlora") and "lora" or "full",
                        what = "reserved over run", measured = run.value_gib * 2 ^ 30,
                        estimated = r.peak_reserved_run_bytes or r.peak_reserved_bytes }
    end
  end
  -- the ML-engineering handbook's Llama-3.1-8B ZeRO-3 runs with Liger's
  -- kernels: max_memory_reserved() since the process began
  local mle = read("tests/reference/ml_engineering.json")
  for _, run in ipairs(mle.runs) do
    local keys = { seq_len = run.seq_len }
    for k, v in pairs(mle.recipe) do keys[k] = v end
    local r = estimate(mle.model, keys, mle.gpu)
    out[#out + 1] = { id = run.id, kind = "full", what = "reserved over run", measured = run.measured_gib * 2 ^ 30,
                      estimated = r.peak_reserved_run_bytes }
  end
  return out
end

-- By kind: count, the median absolute error, the largest under- and
-- over-estimate, as ratios.
local function summary(rows)
  local kinds = {}
  for _, row in ipairs(rows) do
    local k = kinds[row.kind] or { errors = {} }
    kinds[row.kind] = k
    local e = row.estimated / row.measured - 1
    k.errors[#k.errors + 1] = e
  end
  local out = {}
  for kind, k in pairs(kinds) do
    local abs = {}
    local low, high = 0, 0
    for i, e in ipairs(k.errors) do
      abs[i] = math.abs(e)
      low, high = math.min(low, e), math.max(high, e)
    end
    table.sort(abs)
    local n = #abs
    local median = n % 2 == 1 and abs[(n + 1) // 2] or (abs[n // 2] + abs[n // 2 + 1]) / 2
    -- three decimals: the summary is data, not a formula
    local function r3(x) return math.floor(x * 1000 + 0.5) / 1000 end
    out[kind] = { runs = n, median_error = r3(median), most_low = r3(low), most_high = r3(high) }
  end
  return out
end

local rows = runs()
local s = summary(rows)
if arg[1] == "--check" then
  -- the written summary against this run's
  local written = dofile("scripts/lib/vramplan/accuracy.lua")
  for kind, v in pairs(s) do
    local w = written[kind] or {}
    for k, x in pairs(v) do
      if w[k] ~= x then
        io.stderr:write(string.format("scripts/lib/vramplan/accuracy.lua: %s.%s is %s, now %s: run " ..
          "lua5.4 tools/accuracy.lua --write\n", kind, k, tostring(w[k]), tostring(x)))
        os.exit(1)
      end
    end
  end
  for kind in pairs(written) do
    if not s[kind] then io.stderr:write("accuracy.lua: " .. kind .. " has no runs now\n") os.exit(1) end
  end
  print("current")
elseif arg[1] == "--write" then
  local kinds = {}
  for k in pairs(s) do kinds[#kinds + 1] = k end
  table.sort(kinds)
  local lines = {
    "-- vramplan.accuracy — how close vramplan has been to the GPU measurements",
    "-- in tests/reference/, by kind of run: written by tools/accuracy.lua",
    "-- --write (tests/lua/accuracy_spec.lua checks it is current); errors are",
    "-- estimate / measured - 1.",
    "return {",
  }
  for _, k in ipairs(kinds) do
    local v = s[k]
    lines[#lines + 1] = string.format("  [%q] = { runs = %d, median_error = %s, most_low = %s, most_high = %s },", k,
      v.runs, v.median_error, v.most_low, v.most_high)
  end
  lines[#lines + 1] = "}"
  local f = assert(io.open("scripts/lib/vramplan/accuracy.lua", "w"))
  f:write(table.concat(lines, "\n") .. "\n")
  f:close()
else
  print(string.format("%-12s %-6s %-18s %12s %12s %8s", "run", "kind", "quantity", "measured MiB", "vramplan MiB",
    "error"))
  for _, row in ipairs(rows) do
    print(string.format("%-12s %-6s %-18s %12.0f %12.0f %+7.1f%%", row.id, row.kind, row.what, row.measured / 2 ^ 20,
      row.estimated / 2 ^ 20, 100 * (row.estimated / row.measured - 1)))
  end
  for k, v in pairs(s) do
    print(string.format("%s: %d runs, median |error| %.1f %%, from %+.1f %% to %+.1f %%", k, v.runs,
      100 * v.median_error, 100 * v.most_low, 100 * v.most_high))
  end
end
