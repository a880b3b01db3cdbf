-- vramplan plan: layouts for N GPUs that fit, ranked, as ready --set lines
-- and (with --emit DIR) recipe files.
local job = require("vramplan.job")
local plan = require("vramplan.plan")
local report = require("vramplan.report")

local cmd = {
  usage = "plan MODEL --gpu NAME --gpus N [--recipe FILE] [--set KEY=VALUE]... [--top K] [--emit DIR] [--json]",
  help = [[Every way the framework splits N GPUs (dp x tp x pp x cp, ep for mixtures; with no framework in the
recipe, DDP, DeepSpeed, FSDP and Megatron), with its ZeRO stage or FSDP mode, checkpointing,
offload and the largest micro-batch that fits (with global_batch set, one that keeps it); each
judged by a full estimate. Keys the recipe sets are kept. A layout that does not fit at
micro_batch 1 with its lightest options is not tried further.]],
  flags = { recipe = "value", gpu = "value", set = "set", json = "flag", gpus = "value", top = "value", emit = "value" },
  examples = {
    "vramplan plan llama3-70b --gpu h100-80gb --gpus 64 --set framework=megatron --set seq_len=4096 --top 3 --emit plans/",
  },
}

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function set_lines(changes)
  local parts = {}
  for _, k in ipairs(sorted_keys(changes)) do parts[#parts + 1] = string.format("--set %s=%s", k, tostring(changes[k])) end
  return table.concat(parts, " ")
end

-- A recipe script holding the job's own keys and the candidate's changes.
local function recipe_text(keys, candidate, rank, model)
  local all = {}
  -- typed as the engine reads them (a --set value arrives as text)
  for k, v in pairs(keys) do all[k] = candidate.recipe[k] == nil and v or candidate.recipe[k] end
  for k, v in pairs(candidate.changes) do all[k] = v end
  local lines = { string.format("-- vramplan plan: candidate %d for %s", rank, model), "return recipe {" }
  for _, k in ipairs(sorted_keys(all)) do
    local v = all[k]
    lines[#lines + 1] = string.format("  %s = %s,", k, type(v) == "string" and string.format("%q", v) or tostring(v))
  end
  lines[#lines + 1] = "}"
  return table.concat(lines, "\n") .. "\n"
end

local function emit(dir, j, candidates, top)
  local lfs = require("lfs")
  if not lfs.attributes(dir, "mode") then
    local ok, err = lfs.mkdir(dir)
    if not ok then error(string.format("--emit %s: cannot create the folder: %s", dir, err), 0) end
  elseif lfs.attributes(dir, "mode") ~= "directory" then
    error(string.format("--emit %s: not a folder", dir), 0)
  end
  local written = {}
  for i = 1, math.min(top, #candidates) do
    local path = string.format("%s/plan-%d.lua", dir, i)
    local f, err = io.open(path, "w")
    if not f then error(string.format("--emit %s: %s", dir, err), 0) end
    f:write(recipe_text(j.keys, candidates[i], i, j.config.name))
    f:close()
    written[#written + 1] = path
  end
  return written
end

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.target and not opts.recipe then cli.fail_usage("plan needs a MODEL") end -- a config may name it
  if not opts.gpu then cli.fail_usage("plan needs --gpu NAME") end
  if not opts.gpus then cli.fail_usage("plan needs --gpus N") end
  local gpus, top = cli.positive(opts, "gpus", true), cli.positive(opts, "top", true, 5)
  -- --gpus is the count to split here, not estimate's data-parallel size
  opts.gpus = nil
  local j = job.load(home, opts)
  local p = plan.plan(j, gpus)
  local written = opts.emit and emit(opts.emit, j, p.candidates, top) or {}
  if opts.json then
    local json = require("dkjson")
    local candidates = {}
    for i, c in ipairs(p.candidates) do
      candidates[i] = { recipe = c.changes, peak_total_bytes = c.result.peak_total_bytes,
                        headroom_bytes = c.result.headroom_bytes, fits = c.result.fits, time = c.result.time or json.null }
    end
    print(json.encode({ model = { name = j.config.name, source = j.description.source },
                        gpu = { name = j.gpu.name, short_name = j.gpu.short_name, memory_bytes = j.gpu.memory_bytes },
                        plan = { gpus = gpus, candidates = candidates, rejected = p.rejected, estimates = p.estimates,
                                 emitted = written } }, { indent = true }))
    return 0
  end
  print(string.format("%s on %d x %s: %d layouts fit (%d estimates)", j.config.name, gpus, j.gpu.name,
    #p.candidates, p.estimates))
  for i = 1, math.min(top, #p.candidates) do
    local c = p.candidates[i]
    local t = c.result.time
    print(string.format("%2d. needs %s (%s to spare)%s", i, report.bytes(c.result.peak_total_bytes),
      report.bytes(c.result.headroom_bytes),
      t and t.tokens_per_s and string.format(", ~%.0f tokens/s", t.tokens_per_s) or ""))
    print("    " .. set_lines(c.changes))
    if written[i] then print("    written to " .. written[i]) end
  end
  if #p.candidates == 0 then
    local tried = (p.rejected["does not fit"] or 0) + (p.rejected["dominated"] or 0)
    if tried == 0 then
      -- every split was refused by the engine or contradicts the recipe's keys
      print(string.format("no layout can split %d GPUs with this recipe's keys (a tp, pp, cp or dp that does not " ..
        "divide %d, or a layout the model refuses)", gpus, gpus))
    else
      print(string.format("no layout of %d GPUs fits %s", gpus, j.gpu.name))
    end
  end
  local reasons = sorted_keys(p.rejected)
  if #reasons > 0 then
    local parts = {}
    for _, k in ipairs(reasons) do parts[#parts + 1] = string.format("%s %d", k, p.rejected[k]) end
    print("rejected: " .. table.concat(parts, ", "))
  end
  return 0
end

return cmd
