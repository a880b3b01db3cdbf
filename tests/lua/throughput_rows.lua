-- The published throughput rows of tests/reference/throughput.json as
-- vramplan models and recipes, and the step time vramplan gives each: what
-- tests/lua/steptime_spec.lua checks and tools/throughput_report.lua prints.
local job = require("vramplan.job")

local rows = {}

-- The sets of a job: the model's fields, then the recipe's keys (changes on top).
local function sets(v, changes)
  local out = {}
  local function add(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do out[#out + 1] = { k, tostring(t[k]), "throughput.json" } end
  end
  add(v.fields)
  local recipe = {}
  for k, x in pairs(v.recipe) do recipe[k] = x end
  for k, x in pairs(changes or {}) do recipe[k] = x end
  add(recipe)
  return out
end

local function estimate(home, v, changes)
  local j = job.load(home, { target = v.model, sets = sets(v, changes), gpu = v.gpu })
  return job.estimate(j).time
end

-- The modelled time of a row in seconds, comparable with its published_time_s:
-- a step, or (measure "layer") one layer's forward and backward, the
-- difference between two layers and one without an optimizer step.
function rows.modelled(home, row)
  local v = row.vramplan
  if v.measure == "layer" then
    local function at(n)
      local fields = {}
      for k, x in pairs(v.fields) do fields[k] = x end
      fields.layers = n
      return estimate(home, { model = v.model, fields = fields, recipe = v.recipe, gpu = v.gpu },
        { optimizer = "none" }).step_s
    end
    return at(2) - at(1)
  end
  return estimate(home, v).step_s
end

function rows.load(home)
  local f = assert(io.open(home .. "/tests/reference/throughput.json"))
  local data = require("dkjson").decode(f:read("a"))
  f:close()
  return data
end

-- Every row: { row, modelled, ratio (modelled / published) } or, when the
-- row is skipped, { row, skipped = reason }.
function rows.compare(home)
  local out = {}
  for _, row in ipairs(rows.load(home)) do
    if row.skipped then
      out[#out + 1] = { row = row, skipped = row.skipped }
    else
      local t = rows.modelled(home, row)
      out[#out + 1] = { row = row, modelled = t, ratio = t / row.published_time_s }
    end
  end
  return out
end

function rows.median(values)
  local s = {}
  for i, x in ipairs(values) do s[i] = x end
  table.sort(s)
  local n = #s
  if n == 0 then return nil end
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

return rows
