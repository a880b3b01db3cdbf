-- vramplan.sweep — a sweep's plan (from the command line or a sweep script),
-- evaluating one variant into a row with the names of `estimate --json`
-- (flattened with dots), and the rows' two formats (CSV, JSON lines).
local json = require("dkjson")
local arch = require("vramplan.arch")
local csv = require("vramplan.csv")
local files = require("vramplan.files")
local hardware = require("vramplan.hardware")
local job = require("vramplan.job")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local report = require("vramplan.report")
local sandbox = require("vramplan.sandbox")
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
local object_names = {
  vramplan_version = true, model = true, recipe = true, per_gpu = true, per_rank = true, host = true, gpu = true,
  fits = true, headroom_bytes = true,
}

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
  if known[key] then return end
  local guess = schema.suggest(key, names)
  error(string.format("%s: unknown key '%s': not a recipe key, a model field, gpu nor model%s", origin, tostring(key),
    guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
end

-- Checks the plan's keys against the models it can reach.
local function check_keys(home, plan)
  local descriptions, seen = {}, {}
  local function reach(name, origin)
    if seen[name] then return end
    if type(name) ~= "string" then error(string.format("%s: a model is a name or a path", origin), 0) end
    seen[name] = true
    descriptions[#descriptions + 1] = models.describe(home, name)
  end
  if plan.model then reach(plan.model, plan.source) end
  for _, axis in ipairs(plan.axes) do
    if axis.key == "model" then
      for _, name in ipairs(axis.values) do reach(name, axis.origin) end
    end
  end
  for i, values in ipairs(plan.generated or {}) do
    if values.model ~= nil then reach(values.model, string.format("variant %d", i - 1)) end
  end
  if #descriptions == 0 then error(plan.source .. ": no model to sweep (give model = ...)", 0) end
  local known, all = known_keys(descriptions)
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
local function finish(home, plan)
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
  if spec.recipe then plan.keys, plan.origins = recipes.load(spec.recipe) end
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
  return finish(home, plan)
end

-- ---- sweep scripts ----

local script_fields = { model = true, recipe = true, gpu = true, set = true, vary = true, order = true,
                        where = true, generate = true }

local function is_list(t)
  if type(t) ~= "table" or #t == 0 then return false end
  for k in pairs(t) do if math.type(k) ~= "integer" then return false end end
  return true
end

-- The script's `vary` table as axes (lists) and derived values (functions),
-- in `order` where given, else by key name.
local function script_axes(plan, t, where)
  local keys = {}
  for k in pairs(t.vary or {}) do
    if type(k) ~= "string" then error(where .. ": vary: keys are names", 0) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  if t.order ~= nil then
    if not is_list(t.order) then error(where .. ": order: a list of vary's keys", 0) end
    local rank = {}
    for i, k in ipairs(t.order) do
      if not (t.vary or {})[k] then error(string.format("%s: order: '%s' is not in vary", where, tostring(k)), 0) end
      rank[k] = i
    end
    table.sort(keys, function(a, b) return (rank[a] or math.huge) < (rank[b] or math.huge) or
      (rank[a] or math.huge) == (rank[b] or math.huge) and a < b end)
  end
  for _, k in ipairs(keys) do
    local v = t.vary[k]
    local origin = string.format("%s: vary.%s", where, k)
    if type(v) == "function" then
      plan.derived[#plan.derived + 1] = { key = k, fn = v, origin = origin }
    elseif is_list(v) then
      plan.axes[#plan.axes + 1] = { key = k, values = v, origin = origin }
    else
      error(origin .. ": a non-empty list of values or a function of the others", 0)
    end
  end
end

-- `model = "x"` or a list (then model is varied first); the same for gpu.
local function script_choice(plan, t, name, where)
  local v = t[name]
  if v == nil then return end
  if type(v) == "string" then plan[name] = v
  elseif is_list(v) then table.insert(plan.axes, 1, { key = name, values = v, origin = where .. ": " .. name })
  else error(string.format("%s: %s: a name or a list of names", where, name), 0) end
end

-- A generator's variants are kept (it runs to its end before the first
-- row): a bound that a generator which never ends reaches in a few seconds.
local MAX_GENERATED = 1000000

-- Runs the generator (under the sandbox's budgets, so one that never ends
-- stops) and keeps the variants it emits.
local function generated(fn, where)
  local list = {}
  local function emit(values)
    if type(values) ~= "table" then error("emit takes a table of key = value", 2) end
    local copy = {}
    for k, v in pairs(values) do
      if type(k) ~= "string" then error("emit: keys are names", 2) end
      copy[k] = v
    end
    if #list >= MAX_GENERATED then
      error(string.format("more than %d variants (does it never end?)", MAX_GENERATED), 2)
    end
    list[#list + 1] = copy
  end
  local ok, err = pcall(sandbox.call, fn, emit)
  if not ok then error(string.format("%s: generate: %s", where, tostring(err)), 0) end
  if #list == 0 then error(where .. ": generate emitted no variant", 0) end
  return list
end

local function script_sets(plan, t, where)
  if t.set == nil then return end
  if type(t.set) ~= "table" then error(where .. ": set: a table of key = value", 0) end
  local keys = {}
  for k in pairs(t.set) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do plan.sets[#plan.sets + 1] = { k, t.set[k], where .. ": set." .. k } end
end

local function script_recipe(home, plan, t, where)
  local r = t.recipe
  if r == nil then return end
  if type(r) == "table" then
    plan.keys, plan.origins = {}, {}
    for k, v in pairs(r) do plan.keys[k], plan.origins[k] = v, where .. ": recipe" end
  elseif type(r) == "string" then
    local path = files.is_file(r) and r or (home .. "/scripts/recipes/" .. r .. ".lua")
    plan.keys, plan.origins = recipes.load(path)
  else
    error(where .. ": recipe: a table of keys, a recipe file or a name in scripts/recipes", 0)
  end
end

-- A plan from the table a sweep script returned (`where`: its file:line).
function sweep.from_table(home, t, where)
  for k in pairs(t) do
    if not script_fields[k] then
      local names = {}
      for n in pairs(script_fields) do names[#names + 1] = n end
      table.sort(names)
      local guess = schema.suggest(tostring(k), names)
      error(string.format("%s: sweep: unknown field '%s'%s", where, tostring(k),
        guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
    end
  end
  local plan = { sets = {}, axes = {}, derived = {}, source = where }
  script_recipe(home, plan, t, where)
  script_sets(plan, t, where)
  script_axes(plan, t, where)
  script_choice(plan, t, "gpu", where)
  script_choice(plan, t, "model", where)
  if t.where ~= nil then
    if type(t.where) ~= "function" then error(where .. ": where: a function of a variant's values", 0) end
    plan.where = t.where
  end
  if t.generate ~= nil then
    if type(t.generate) ~= "function" then error(where .. ": generate: a function(emit)", 0) end
    for _, axis in ipairs(plan.axes) do
      if axis.key ~= "model" and axis.key ~= "gpu" then error(where .. ": generate and vary lists exclude each other", 0) end
    end
    if #plan.axes > 0 then error(where .. ": with generate, emit model and gpu with the other keys", 0) end
    plan.generated = generated(t.generate, where)
  end
  if #plan.axes == 0 and not plan.generated then
    error(where .. ": sweep needs vary = { key = list, ... } or generate", 0)
  end
  return finish(home, plan)
end

-- The environment of a sweep script: `sweep { ... }`, and the catalog's
-- names (catalog.models, catalog.gpus) for sweeps over all of them.
local function script_env(home)
  return sandbox.located(sandbox.env({
    catalog = { models = models.list(home), gpus = hardware.list(home) },
  }), {
    sweep = function(where, t)
      if type(t) ~= "table" then error(where .. ": sweep takes a table: sweep { model = ..., vary = { ... } }", 0) end
      return { sweep_table = t, where = where }
    end,
  })
end

-- A plan from a sweep script.
function sweep.from_script(home, path)
  local s = sandbox.run(path, script_env(home))
  if type(s) ~= "table" or type(s.sweep_table) ~= "table" then
    error(path .. ": a sweep script must return sweep { ... }", 0)
  end
  return sweep.from_table(home, s.sweep_table, s.where)
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
  local parts = { name }
  local keys = {}
  for k in pairs(overrides) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(overrides[k]) end
  return table.concat(parts, "\0")
end

-- An evaluator for the plan: evaluate(values) -> the flat row (name ->
-- value), or nil and the one-line message of why it cannot be evaluated.
function sweep.evaluator(plan)
  local home = plan.home
  local descriptions = bounded_cache(64)
  local built = bounded_cache(16)
  local gpus = bounded_cache(64)
  local origin = {}
  for _, axis in ipairs(plan.axes) do origin[axis.key] = axis.origin end
  for _, d in ipairs(plan.derived) do origin[d.key] = d.origin end

  local function evaluate(values)
    local name = values.model or plan.model
    local d = descriptions(name, function() return models.describe(home, name) end)
    if d.error then return nil, d.error end
    local keys, origins = {}, {}
    for k, v in pairs(plan.keys or {}) do keys[k], origins[k] = v, plan.origins[k] end
    local sets = table.move(plan.sets, 1, #plan.sets, 1, {})
    local varied = {}
    for k in pairs(values) do if k ~= "model" and k ~= "gpu" then varied[#varied + 1] = k end end
    table.sort(varied)
    for _, k in ipairs(varied) do sets[#sets + 1] = { k, values[k], origin[k] or "variant" } end
    local ok, overrides, override_origins = pcall(job.split_sets, d.value, sets, keys, origins)
    if not ok then return nil, tostring(overrides) end
    local m = built(model_key(name, overrides), function()
      local model, config = arch.build(d.value, overrides, override_origins)
      return { model = model, config = config }
    end)
    if m.error then return nil, m.error end
    local ok2, err = pcall(recipes.over_checkpoint, keys, origins, d.value.quantization)
    if not ok2 then return nil, tostring(err) end
    local gpu_name = values.gpu or plan.gpu
    local g
    if gpu_name then
      g = gpus(gpu_name, function() return hardware.gpu(home, gpu_name) end)
      if g.error then return nil, g.error end
    end
    local j = { home = home, description = d.value, model = m.value.model, config = m.value.config, keys = keys,
                origins = origins, gpu = g and g.value }
    local result, message = job.try(j)
    if not result then return nil, message end
    return flatten(report.object(job.context(j, result)))
  end
  return evaluate
end

-- ---- rows ----

-- The columns of the output: `fields` (a list, from --fields) checked, or
-- variant, the varied keys and the default fields.
function sweep.fields(plan, fields)
  local varied = {}
  for _, k in ipairs(plan.columns) do varied[k] = true end
  if fields then
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

-- One row's values in `fields` order (nil where a field has no value).
function sweep.row_values(fields, varied, index, values, flat, message)
  local out = {}
  for i, f in ipairs(fields) do
    local v
    if f == "variant" then v = index
    elseif f == "error" then v = message
    elseif varied[f] then v = values[f]
    elseif flat then v = flat[f] end
    if v == json.null then v = nil end
    out[i] = v
  end
  return out
end

-- The formats: a header line (or nil) and one line per row.
local formats = {}

formats.csv = {
  header = function(fields) return csv.line(fields) end,
  row = function(fields, values) return csv.line(values, #fields) end,
  variant = function(line, header_fields)
    local fields = csv.parse(line)
    for i, f in ipairs(header_fields) do
      if f == "variant" then return fields and math.tointeger(tonumber(fields[i])) end
    end
  end,
}

formats.jsonl = {
  header = function() return nil end,
  row = function(fields, values)
    local o = {}
    for i, f in ipairs(fields) do o[f] = values[i] == nil and json.null or values[i] end
    return json.encode(o, { keyorder = fields })
  end,
  variant = function(line)
    local o = json.decode(line)
    return type(o) == "table" and math.tointeger(o.variant) or nil
  end,
}

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
