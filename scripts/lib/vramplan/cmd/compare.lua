-- vramplan compare: a measured training step (tools/measure.py's file) beside
-- vramplan's estimate of the same run, quantity by quantity, naming the
-- term that differs most and what usually makes it differ.
local job = require("vramplan.job")
local report = require("vramplan.report")

local cmd = {
  usage = "compare MEASURED.json [--json]",
  help = [[MEASURED.json is what tools/measure.py writes around a real training step: the model, recipe and
GPU vramplan needs (its "vramplan" object) and what was measured. Each measured quantity is put
beside the estimate's: the resident tensors (parameters, buffers, gradients, optimizer states,
counted from the tensors), the allocated and reserved peaks (torch.cuda), and nvidia-smi's
figure against the estimate's total.]],
  flags = { json = "flag" },
}

-- Measured field, the estimate's field(s) it is put beside, and what
-- usually explains a difference there.
local QUANTITIES = {
  { "params_bytes", { "params_bytes" }, "the precision or fine-tuning method (a quantized or frozen base) differs" },
  { "buffers_bytes", { "buffers_bytes" }, "the model's buffers (rotary tables, masks) differ: a config key" },
  { "grads_bytes", { "grads_bytes" }, "what is trained, or the gradients' dtype, differs" },
  { "optimizer_bytes", { "optimizer_bytes" },
    "the optimizer or its implementation differs (a framework's master weights are counted apart by vramplan)" },
  { "peak_allocated_bytes", { "peak_allocated_bytes" },
    "the activations: a technique the recipe does not describe (a fused or chunked loss, torch.compile) or the " ..
    "batch and sequence; `estimate --timeline` shows what vramplan keeps" },
  { "peak_reserved_bytes", { "peak_reserved_bytes" },
    "the caching allocator: vramplan adds the peak's segments and a constant share (fragmentation); " ..
    "tools/allocator_replay.py replays the timeline through the allocator's rules" },
  { "nvidia_smi_used_bytes", { "peak_total_bytes" },
    "beyond the reserved peak: the CUDA context (cuda_context_mib), NCCL's buffers, other processes" },
}

-- Within this share a quantity agrees (allocator rounding, a few scalars).
local AGREE = 0.01

local function read_measured(path)
  local f, err = io.open(path, "r")
  if not f then error("cannot read " .. tostring(err), 0) end
  local text = f:read("a")
  f:close()
  local o, pos, msg = require("dkjson").decode(text, 1, nil)
  if msg then error(string.format("%s: invalid JSON at byte %s: %s", path, tostring(pos), msg), 0) end
  if type(o) ~= "table" or type(o.vramplan) ~= "table" or type(o.measured) ~= "table" then
    error(path .. ": not a measurement (tools/measure.py writes one: a \"vramplan\" and a \"measured\" object)", 0)
  end
  if type(o.vramplan.model) ~= "string" then error(path .. ": vramplan.model: the model's name or file", 0) end
  return o
end

-- The allocator's options the measured process ran with (measure.py
-- records PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF): the recipe's
-- alloc_conf unless it names one, for the simulated allocator; options the
-- simulation cannot take leave it out, said. Returns the set, or nil and
-- why not.
local function measured_alloc_conf(path, o)
  local conf = type(o.environment) == "table" and o.environment.alloc_conf
  if type(conf) ~= "string" or conf == "" or (o.vramplan.recipe or {}).alloc_conf ~= nil then return nil end
  local ok, err = pcall(require("vramplan").check_recipe, { alloc_conf = conf }, true)
  if not ok then return nil, string.format("%s: environment.alloc_conf %s not applied: %s", path, conf, tostring(err)) end
  return { "alloc_conf", conf, path .. ": environment.alloc_conf" }
end

-- Liger-Kernel's modules the measured model ran (measure.py records
-- them): liger_rms_norm and liger_swiglu where the recipe names neither.
local function measured_liger(path, o)
  local liger = type(o.environment) == "table" and o.environment.liger
  local recipe = o.vramplan.recipe or {}
  if type(liger) ~= "table" or recipe.liger_rms_norm ~= nil or recipe.liger_swiglu ~= nil then return {} end
  local sets = {}
  for key, found in pairs({ liger_rms_norm = liger.rms_norm, liger_swiglu = liger.swiglu }) do
    if found == true then sets[#sets + 1] = { key, "true", path .. ": environment.liger" } end
  end
  -- Liger's q_norm / k_norm or transformers': the class swap or the built model's patch
  if liger.rms_norm == true and type(liger.qk_norms) == "boolean" and recipe.liger_before_load == nil then
    sets[#sets + 1] = { "liger_before_load", tostring(liger.qk_norms), path .. ": environment.liger.qk_norms" }
  end
  table.sort(sets, function(a, b) return a[1] < b[1] end)
  return sets
end

-- accelerate's convert_outputs_to_fp32 around the measured model's forward
-- (measure.py records it): outputs_fp32 where the recipe names none.
local function measured_outputs_fp32(path, o)
  local found = type(o.environment) == "table" and o.environment.outputs_fp32
  if type(found) ~= "boolean" or (o.vramplan.recipe or {}).outputs_fp32 ~= nil then return nil end
  return { "outputs_fp32", tostring(found), path .. ": environment.outputs_fp32" }
end

-- The job the measurement describes; a model file is relative to the
-- measurement's folder when not found as given.
local function measured_job(home, path, o)
  local files = require("vramplan.files")
  local model = o.vramplan.model
  if model:match("[/.]") and not files.is_file(model) then
    local beside = files.dirname(path) .. "/" .. model
    if files.is_file(beside) then model = beside end
  end
  local sets, keys = {}, {}
  for k in pairs(o.vramplan.recipe or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    sets[#sets + 1] = { k, tostring(o.vramplan.recipe[k]), path .. ": vramplan.recipe." .. k }
  end
  local conf, why_not = measured_alloc_conf(path, o)
  if conf then sets[#sets + 1] = conf end
  for _, set in ipairs(measured_liger(path, o)) do sets[#sets + 1] = set end
  sets[#sets + 1] = measured_outputs_fp32(path, o)
  if why_not then io.stderr:write("vramplan: warning: ", why_not, "\n") end
  return job.load(home, { target = model, sets = sets, gpu = o.vramplan.gpu })
end

-- The rows: measured, estimated, difference; and the largest difference.
function cmd.compare(measured, result)
  local rows, largest = {}, nil
  for _, q in ipairs(QUANTITIES) do
    local m = measured[q[1]]
    if type(m) == "number" then
      local e = 0
      for _, field in ipairs(q[2]) do e = e + (result[field] or 0) end
      local row = { quantity = q[1], measured = math.tointeger(m) or m, estimated = e, difference_bytes = e - m,
                    difference_ratio = m ~= 0 and (e - m) / m or nil, explanation = q[3] }
      rows[#rows + 1] = row
      local r = row.difference_ratio and math.abs(row.difference_ratio) or (e ~= 0 and math.huge or 0)
      if r > AGREE and (not largest or r > largest.size) then largest = { row = row, size = r } end
    end
  end
  return rows, largest and largest.row
end

local function shown_ratio(row)
  if not row.difference_ratio then return row.estimated == 0 and "same" or "-" end
  return string.format("%+.1f %%", 100 * row.difference_ratio)
end

function cmd.run(opts, home)
  local path = opts.target
  if not path then require("vramplan.cli").fail_usage("compare needs MEASURED.json") end
  local o = read_measured(path)
  local j = measured_job(home, path, o)
  local result = job.estimate(j)
  local rows, largest = cmd.compare(o.measured, result)
  if opts.json then
    local json = require("dkjson")
    print(json.encode({ model = { name = j.config.name, source = j.description.source }, recipe = result.recipe,
      compare = { rows = rows, largest = largest and largest.quantity or json.null },
      environment = o.environment }, { indent = true, keyorder = report.key_order() }))
    return 0
  end
  print(string.format("%s, measured on %s, beside vramplan's estimate", j.config.name,
    o.environment and (o.environment.device_name or o.environment.device) or "?"))
  print(string.format("%-24s %14s %14s %14s %9s", "quantity", "measured", "vramplan", "difference", ""))
  for _, row in ipairs(rows) do
    print(string.format("%-24s %14s %14s %14s %9s", row.quantity, report.bytes(row.measured),
      report.bytes(row.estimated), (row.difference_bytes >= 0 and "+" or "-") .. report.bytes(math.abs(
      row.difference_bytes)), shown_ratio(row)))
  end
  print("")
  if largest then
    print(string.format("largest difference: %s, vramplan %s by %s: %s", largest.quantity,
      largest.difference_bytes > 0 and "high" or "low", shown_ratio(largest), largest.explanation))
  else
    print(string.format("every measured quantity within %g %% of the estimate", 100 * AGREE))
  end
  return 0
end

return cmd
