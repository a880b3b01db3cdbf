-- vramplan.sweep — a sweep's plan (from the command line here; from a
-- script in sweep_script.lua), evaluating one variant into a row with the
-- names of `estimate --json` (flattened with dots), and the rows' two
-- formats (CSV, JSON lines).
local json = require("dkjson")
local arch = require("vramplan.arch")
local csv = require("vramplan.csv")
local hardware = require("vramplan.hardware")
local job = require("vramplan.job")
local json_out = require("vramplan.json_out")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local report = require("vramplan.report")
local schema = require("vramplan.schema")
local vramplan = require("vramplan")

local sweep = {}

-- The columns after `variant` and the varied keys, unless --fields says.
sweep.default_fields = {
  "model.name", "model.params", "model.trainable_params", "gpu.short_name", "per_gpu.params_bytes",
  "per_gpu.grads_bytes", "per_gpu.master_bytes", "per_gpu.optimizer_bytes", "per_gpu.activations_bytes",
  "per_gpu.peak_allocated_bytes", "per_gpu.peak_reserved_bytes", "per_gpu.peak_total_bytes", "per_gpu.peak_phase",
  "fits", "headroom_bytes", "error",
}

-- The top-level names of estimate --json's object: a --fields name must
-- start with one of them (or be variant, error or a varied key).
local object_names = report.object_names

-- ---- the plan ----

-- Every key a sweep may vary: recipe keys, the models' fields, gpu, model.
local function known_keys(descriptions)
  local known, names = { gpu = true, model = true }, { "gpu", "model" }
  for _, k in ipairs(vramplan.recipe_keys()) do known[k.name] = true; names[#names + 1] = k.name end
  for _, d in ipairs(descriptions) do
    for _, f in ipairs(d.family.schema.order) do
      if not known[f] then known[f] = true; names[#names + 1] = f end
    end
  end
  return known, names
end

-- Raises "<origin>: unknown key ..." unless `key` can be varied.
local function check_key(known, names, key, origin)
  -- another tool's name for a key, or the stack's, as --set takes them
  if known[key] or recipes.is_key(key) then return end
  local guess = schema.suggest(key, names)
  error(string.format("%s: unknown key '%s': not a recipe key, a model field, gpu nor model%s", origin, tostring(key),
    guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
end

-- Checks the plan's keys against the models it can reach.
local function check_keys(home, plan)
  local descriptions, seen = {}, {}
  -- `origin` (where the name was given) prefixes a name that is no model; MODEL's own error stands alone
  local function reach(name, origin)
    if seen[name] then return end
    if type(name) ~= "string" then error(string.format("%s: a model is a name or a path", origin), 0) end
    seen[name] = true
    local ok, d = pcall(models.describe, home, name)
    if not ok then error(origin and (origin .. ": " .. tostring(d)) or d, 0) end
    descriptions[#descriptions + 1] = d
  end
  if plan.model then reach(plan.model, plan.model_origin) end
  for _, axis in ipairs(plan.axes) do
    if axis.key == "model" then
      for _, name in ipairs(axis.values) do reach(name, axis.origin) end
    end
  end
  for i, values in ipairs(plan.generated or {}) do
    if values.model ~= nil then reach(values.model, string.format("variant %d", i - 1)) end
  end
  if #descriptions == 0 then error(plan.source .. ": no model to sweep (give model = ...)", 0) end
  -- a misspelt GPU fails at once rather than in every row, naming where it was given
  if plan.gpu then
    local ok, err = pcall(hardware.resolve, home, plan.gpu)
    if not ok then error(plan.gpu_origin and (plan.gpu_origin .. ": " .. tostring(err)) or err, 0) end
  end
  for _, axis in ipairs(plan.axes) do
    if axis.key == "gpu" then
      for _, name in ipairs(axis.values) do
        local ok, err = pcall(hardware.resolve, home, tostring(name))
        if not ok then error(axis.origin .. ": " .. tostring(err), 0) end
      end
    end
  end
  local known, all = known_keys(descriptions)
  -- a recipe's misspelt key fails at once, naming its line, as --set's and estimate's do
  for k, v in pairs(plan.keys or {}) do
    if type(k) ~= "string" or not recipes.is_key(k) then
      local ok, err = pcall(vramplan.check_recipe, { [k] = v }, true)
      error(string.format("%s: %s", plan.origins[k] or plan.source,
        ok and ("unknown recipe key '" .. tostring(k) .. "'") or tostring(err)), 0)
    end
  end
  for _, axis in ipairs(plan.axes) do check_key(known, all, axis.key, axis.origin) end
  for _, d in ipairs(plan.derived) do check_key(known, all, d.key, d.origin) end
  for _, s in ipairs(plan.sets) do check_key(known, all, s[1], s[3]) end
  for i, values in ipairs(plan.generated or {}) do
    for k in pairs(values) do check_key(known, all, k, string.format("variant %d", i - 1)) end
  end
end

-- The varied keys in column order: the axes, then the derived values (a
-- generator's keys sorted by name).
local function columns(plan)
  local cols, seen = {}, {}
  local function add(k) if not seen[k] then seen[k] = true; cols[#cols + 1] = k end end
  for _, axis in ipairs(plan.axes) do add(axis.key) end
  if plan.generated then
    local keys = {}
    for _, values in ipairs(plan.generated) do
      for k in pairs(values) do if not seen[k] then seen[k] = true; keys[#keys + 1] = k end end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do cols[#cols + 1] = k end
  end
  for _, d in ipairs(plan.derived) do add(d.key) end
  return cols
end

-- Finishes a plan: checks its keys, fixes its columns.
function sweep.finish(home, plan)
  check_keys(home, plan)
  plan.columns = columns(plan)
  plan.home = home
  return plan
end

-- A plan from the command line: spec = { target, recipe, gpu, sets, vary =
-- { "KEY=LIST", ... } }.
function sweep.from_args(home, spec)
  local plan = { model = spec.target, gpu = spec.gpu, sets = spec.sets or {}, axes = {}, derived = {},
                 source = "command line" }
  if spec.recipe then plan.keys, plan.origins, plan.imported = recipes.load(recipes.find(home, spec.recipe)) end
  -- a config file may name its model, as estimate's does (job.load)
  if not plan.model then plan.model = plan.imported and plan.imported.model end
  for _, text in ipairs(spec.vary or {}) do
    local origin = "--vary " .. text
    local key, list = text:match("^([%w_]+)=(.+)$")
    if not key then error(origin .. ": takes KEY=LIST", 0) end
    local ok, values = pcall(require("vramplan.grid").parse_list, list)
    if not ok then error(origin .. ": " .. tostring(values), 0) end
    for _, axis in ipairs(plan.axes) do
      if axis.key == key then error(origin .. ": " .. key .. " is varied twice", 0) end
    end
    plan.axes[#plan.axes + 1] = { key = key, values = values, origin = origin }
  end
  -- --vary model=... names the models itself
  local varies_model = false
  for _, axis in ipairs(plan.axes) do varies_model = varies_model or axis.key == "model" end
  if not plan.model and not varies_model then
    error((plan.imported and plan.imported.model_note) or
      "no MODEL given: sweep MODEL --vary ..., --vary model=..., or a config file naming its model as --recipe", 0)
  end
  return sweep.finish(home, plan)
end

-- ---- evaluating ----

-- Flattens estimate --json's object into name -> value with dotted names
-- (per_gpu.peak_total_bytes, per_rank.1.stage); JSON null stays null.
local function flatten(object, prefix, into)
  into = into or {}
  for k, v in pairs(object) do
    local name = prefix and (prefix .. "." .. k) or tostring(k)
    if type(v) == "table" and v ~= json.null then flatten(v, name, into)
    else into[name] = v end
  end
  return into
end
sweep.flatten = flatten

-- The value `name` (dotted, as flatten names it) has in estimate --json's
-- object: what flatten(object)[name] is, without flattening the whole
-- object for the few fields a row shows. Names are split once, into a
-- flat list: each part's name, then its integer (an array's index) or false.
local paths = {}
local function path_of(name)
  local path = paths[name]
  if path == nil then
    path = {}
    -- flatten never names an empty part
    if name == "" or name:find("^%.") or name:find("%.%.") or name:find("%.$") then path = false end
    for part in name:gmatch("[^.]+") do
      if path then
        -- an array's index as flatten writes it (tostring of the integer)
        local n = part:match("^%-?%d+$") and math.tointeger(tonumber(part))
        path[#path + 1] = part
        path[#path + 1] = n and tostring(n) == part and n or false
      end
    end
    paths[name] = path
  end
  return path
end

local null = json.null

function sweep.lookup(object, name)
  local path = paths[name]
  if path == nil then path = path_of(name) end
  if not path then return nil end
  local v = object
  for i = 1, #path, 2 do
    if type(v) ~= "table" or v == null then return nil end
    local next_v = v[path[i]]
    if next_v == nil then
      local n = path[i + 1]
      if n then next_v = v[n] end
    end
    v = next_v
  end
  if type(v) == "table" and v ~= null then return nil end
  return v
end

-- A cache that forgets everything when full: sweeps visit their variants in
-- order, so the models they reuse are the recent ones, and memory stays flat
-- however many models a shape sweep builds.
local function bounded_cache(limit)
  local entries, n = {}, 0
  return function(key, make)
    local hit = entries[key]
    if hit then return hit end
    if n >= limit then entries, n = {}, 0 end
    local ok, value = pcall(make)
    hit = ok and { value = value } or { error = tostring(value) }
    entries[key], n = hit, n + 1
    return hit
  end
end

-- The key of a model with field overrides, independent of table order.
local function model_key(name, overrides)
  if next(overrides) == nil then return name end -- the one model of a recipe sweep
  local parts = { name }
  local keys = {}
  for k in pairs(overrides) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(overrides[k]) end
  return table.concat(parts, "\0")
end

-- Splits the --set pairs of one variant between the model's fields and
-- recipe keys as job.split_sets does: the plan's, then its varied keys (by
-- name, each with the origin of its list or function). `sorted`: the last
-- variant's keys by name, reused while a variant has the same keys (every
-- variant of a grid has). Returns the overrides and their origins.
local function split_variant(plan, origin, values, sorted, description, keys, origins)
  local overrides, override_origins = {}, {}
  for _, s in ipairs(plan.sets) do
    job.split_set(description, s[1], s[2], s[3], keys, origins, overrides, override_origins)
  end
  local same, n = true, 0
  for k in pairs(values) do
    if k ~= "model" and k ~= "gpu" then
      n = n + 1
      same = same and sorted[k] ~= nil
    end
  end
  if not same or n ~= #sorted then
    for i = #sorted, 1, -1 do sorted[sorted[i]], sorted[i] = nil, nil end
    for k in pairs(values) do if k ~= "model" and k ~= "gpu" then sorted[#sorted + 1] = k end end
    table.sort(sorted)
    for i, k in ipairs(sorted) do sorted[k] = i end
  end
  for _, k in ipairs(sorted) do
    job.split_set(description, k, values[k], origin[k] or "variant", keys, origins, overrides, override_origins)
  end
  return overrides, override_origins
end

-- The top-level entries of estimate --json's object that `fields` read (a
-- list for report.object).
function sweep.object_parts(plan, fields)
  local varied, seen, names = {}, {}, {}
  for _, k in ipairs(plan.columns) do varied[k] = true end
  for _, f in ipairs(fields) do
    local top = f:match("^[^.]+")
    if f ~= "variant" and f ~= "error" and not varied[f] and top and not seen[top] then
      seen[top] = true
      names[#names + 1] = top
    end
  end
  return names
end

-- The estimate's options for those parts: the recipe keys to echo, the
-- ones the parts and the GPU check read (nil: the whole echo).
function sweep.estimate_options(parts)
  local echo, seen = {}, {}
  local function add(keys)
    for _, k in ipairs(keys) do
      if not seen[k] then seen[k] = true; echo[#echo + 1] = k end
    end
  end
  add(hardware.unsupported_keys)
  for _, name in ipairs(parts) do
    local keys = report.part_recipe_keys[name]
    if keys == "all" then return nil end
    if keys then add(keys) end
  end
  return { echo = echo }
end

-- The job of each variant: variant_job(values) -> the job estimate runs
-- (job.load's fields), or nil and the one-line message of why it cannot be
-- made. `estimate`'s path (job.split_sets, arch.build, job.complete) with
-- the models, descriptions and GPUs cached.
local function job_maker(plan)
  local home = plan.home
  local descriptions, built, gpus = bounded_cache(64), bounded_cache(16), bounded_cache(64)
  local origin, sorted = {}, {}
  for _, axis in ipairs(plan.axes) do origin[axis.key] = axis.origin end
  for _, d in ipairs(plan.derived) do origin[d.key] = d.origin end

  return function(values)
    local name = values.model or plan.model
    local d = descriptions(name, function() return models.describe(home, name) end)
    if d.error then return nil, d.error end
    local keys, origins = {}, {}
    for k, v in pairs(plan.keys or {}) do keys[k], origins[k] = v, plan.origins[k] end
    local ok, overrides, override_origins = pcall(split_variant, plan, origin, values, sorted, d.value, keys, origins)
    if not ok then return nil, tostring(overrides) end
    local m = built(model_key(name, overrides), function()
      local model, config = arch.build(d.value, overrides, override_origins)
      return { model = model, config = config }
    end)
    if m.error then return nil, m.error end
    local gpu_name, hw = values.gpu or plan.gpu, {}
    if gpu_name then
      local g = gpus(gpu_name, function() return hardware.resolve(home, gpu_name) end)
      if g.error then return nil, g.error end
      hw = g.value
    end
    -- the keys completed as estimate completes them (job.load)
    local ok2, assumed = pcall(job.complete, keys, origins, { description = d.value, config = m.value.config,
      imported = plan.imported, host = hw.host, host_name = gpu_name })
    if not ok2 then return nil, tostring(assumed) end
    return { home = home, description = d.value, model = m.value.model, config = m.value.config, keys = keys,
             origins = origins, gpu = hw.gpu, host = hw.host, assumed = assumed }
  end
end

-- An evaluator for the plan: evaluate(values) -> estimate --json's object
-- (its fields read with sweep.lookup), or nil and the one-line message of
-- why it cannot be evaluated. With `fields` (sweep.fields'), the object has
-- only the top-level entries those fields read.
function sweep.evaluator(plan, fields)
  local parts = fields and sweep.object_parts(plan, fields)
  local options = parts and sweep.estimate_options(parts)
  local variant_job = job_maker(plan)
  return function(values)
    local j, message = variant_job(values)
    if not j then return nil, message end
    local result
    result, message = job.try(j, nil, options)
    if not result then return nil, message end
    return report.object(job.context(j, result), parts)
  end
end

-- ---- rows ----

-- The columns of the output: `fields` (a list, from --fields) checked, or
-- variant, the varied keys and the default fields.
function sweep.fields(plan, fields)
  local varied = {}
  for _, k in ipairs(plan.columns) do varied[k] = true end
  if fields then
    if #fields == 0 then error("--fields: name one field or more (variant,per_gpu.peak_total_bytes,...)", 0) end
    for _, f in ipairs(fields) do
      if f ~= "variant" and f ~= "error" and not varied[f] and not object_names[f:match("^[^.]+")] then
        error(string.format("--fields: unknown field '%s' (fields are variant, error, the varied keys and " ..
          "estimate --json's names joined with dots, such as per_gpu.peak_total_bytes)", f), 0)
      end
    end
    return fields
  end
  local list = { "variant" }
  for _, k in ipairs(plan.columns) do list[#list + 1] = k end
  for _, f in ipairs(sweep.default_fields) do list[#list + 1] = f end
  return list
end

-- One row's values in `fields` order (nil where a field has no value);
-- object: the evaluator's (or nil).
function sweep.row_values(fields, varied, index, values, object, message)
  local out, lookup = {}, sweep.lookup
  for i = 1, #fields do
    local f, v = fields[i], nil
    if f == "variant" then v = index
    elseif f == "error" then v = message
    elseif varied[f] then v = values[f]
    elseif object then v = lookup(object, f) end
    if v == null then v = nil end
    out[i] = v
  end
  return out
end

-- The formats: a header line (or nil) and one line per row.
local formats = {}

formats.csv = {
  header = function(fields) return csv.line(fields) end,
  row = function(fields, values) return csv.line(values, #fields) end,
}

formats.jsonl = {
  header = function() return nil end,
  row = function(fields, values)
    local o = {}
    for i, f in ipairs(fields) do o[f] = values[i] == nil and json.null or values[i] end
    return json_out.encode(o, fields)
  end,
}

-- ---- rows in C ----

-- The fields report.object makes from the model's description and the GPU
-- alone, never from the estimate: a row in C takes them from the object of
-- a context without a result (the same parts, the same values).
local static_fields = {
  ["model.name"] = true, ["model.arch"] = true, ["model.layers"] = true, ["model.source"] = true,
  ["gpu.name"] = true, ["gpu.short_name"] = true, ["gpu.memory_bytes"] = true,
}

-- The estimate's figures a row in C reads from the engine's answer (C
-- refuses the names it does not know): the object's per_gpu and time
-- entries, model.params and model.trainable_params, fits, headroom_bytes.
local function c_figure(name)
  local top, rest = name:match("^([^.]+)%.([^.]+)$")
  if top == "per_gpu" then return report.rank_field_names[rest] or rest == "peak_layer" end
  if top == "time" then return report.time_field_names[rest] == true end
  return name == "model.params" or name == "model.trainable_params" or name == "fits" or name == "headroom_bytes"
end

-- Rows made in C (vramplan.estimate_row: no result tables, no object) in
-- `form` ("csv": the CSV line; "values": sweep.row_values' list), where C
-- can fill every column; nil otherwise (sweep.evaluator's path then).
-- make(index, values) -> the row, the same the evaluator's path gives
-- (tests/lua/sweep_spec.lua compares them); a variant that cannot be
-- evaluated gets its row from the Lua side.
local function rows_in_c(plan, fields, form)
  local varied = {}
  for _, k in ipairs(plan.columns) do varied[k] = true end
  local columns = {}
  for i, f in ipairs(fields) do
    if f == "variant" or f == "error" then columns[i] = f
    elseif varied[f] then columns[i] = "value:" .. f
    elseif static_fields[f] then columns[i] = "static:" .. f
    elseif c_figure(f) then columns[i] = f
    else return nil end
  end
  local spec = vramplan.row_spec(columns, form)
  if not spec then return nil end
  local variant_job = job_maker(plan)
  local options = { echo = hardware.unsupported_keys, fold = true }
  -- the static fields of a built model (its config) on a GPU (or none)
  local statics_of, no_gpu = setmetatable({}, { __mode = "k" }), {}
  local function statics(j)
    local by_gpu = statics_of[j.config]
    if not by_gpu then by_gpu = setmetatable({}, { __mode = "k" }); statics_of[j.config] = by_gpu end
    local s = by_gpu[j.gpu or no_gpu]
    if not s then
      local flat = flatten(report.object(job.context(j, {}), { "model", "gpu" }))
      s = {}
      for name in pairs(static_fields) do if flat[name] ~= null then s[name] = flat[name] end end
      by_gpu[j.gpu or no_gpu] = s
    end
    return s
  end
  local function error_row(index, values, message)
    local list = sweep.row_values(fields, varied, index, values, nil, sweep.one_line(message))
    return form == "csv" and formats.csv.row(fields, list) or list
  end
  return function(index, values)
    local j, message = variant_job(values)
    if j then
      local ok, row, echo = pcall(vramplan.estimate_row, spec, j.model, j.keys, j.gpu, options, index, values,
        statics(j))
      if not ok then message = job.blame(j, nil, row)
      else
        message = job.gpu_problem(j, nil, echo)
        if not message then return row end
      end
    end
    return error_row(index, values, message)
  end
end

-- A maker of each variant's list of values (sweep.row_values'), made in C
-- where it can fill every column: values_of(index, values) -> the list;
-- nil when C cannot (sweep.evaluator's path then).
function sweep.values_maker(plan, fields)
  return rows_in_c(plan, fields, "values")
end

-- A maker of each variant's row in `format_name` (csv: the line written
-- in C; jsonl: the values from C, encoded here), where C can fill every
-- column: row(index, values) -> the line; nil otherwise.
function sweep.row_maker(plan, fields, format_name)
  if format_name == "csv" then return rows_in_c(plan, fields, "csv") end
  local values_of, format = sweep.values_maker(plan, fields), sweep.format(format_name)
  if not values_of then return nil end
  return function(index, values) return format.row(fields, values_of(index, values)) end
end

function sweep.format(name)
  local f = formats[name]
  if not f then error(string.format("--format: csv or jsonl (got '%s')", tostring(name)), 0) end
  return f
end

-- A message on one line: a row holds no line break.
function sweep.one_line(message)
  return message and (tostring(message):gsub("[\r\n]+", " ")) or nil
end

return sweep
