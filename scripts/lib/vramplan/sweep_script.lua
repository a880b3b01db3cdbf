-- vramplan.sweep_script — sweep scripts: `return sweep { model, recipe, gpu,
-- set, vary, order, where, generate }` read in the sandbox into a plan
-- (vramplan.sweep's), every field checked and errors naming the script's
-- line.
local files = require("vramplan.files")
local hardware = require("vramplan.hardware")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local sandbox = require("vramplan.sandbox")
local schema = require("vramplan.schema")
local sweep = require("vramplan.sweep")

local sweep_script = {}

local script_fields = { model = true, recipe = true, gpu = true, set = true, vary = true, order = true,
                        where = true, generate = true }

local function is_list(t)
  if type(t) ~= "table" or #t == 0 then return false end
  for k in pairs(t) do if math.type(k) ~= "integer" then return false end end
  return true
end

-- The script's `vary` table as axes (lists) and derived values (functions),
-- in `order` where given, else by key name.
local function script_axes(plan, t, at)
  local keys = {}
  for k in pairs(t.vary or {}) do
    if type(k) ~= "string" then error(at.vary .. ": vary: keys are names", 0) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  if t.order ~= nil then
    if not is_list(t.order) then error(at.order .. ": order: a list of vary's keys", 0) end
    local rank = {}
    for i, k in ipairs(t.order) do
      if not (t.vary or {})[k] then error(string.format("%s: order: '%s' is not in vary", at.order, tostring(k)), 0) end
      rank[k] = i
    end
    table.sort(keys, function(a, b) return (rank[a] or math.huge) < (rank[b] or math.huge) or
      (rank[a] or math.huge) == (rank[b] or math.huge) and a < b end)
  end
  -- each key's own line within vary
  local vary_at = keys[1] and sandbox.field_origins(at.vary, t.vary) or {}
  for _, k in ipairs(keys) do
    local v = t.vary[k]
    local origin = string.format("%s: vary.%s", vary_at[k], k)
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
local function script_choice(plan, t, name, at)
  local v = t[name]
  if v == nil then return end
  if type(v) == "string" then plan[name], plan[name .. "_origin"] = v, at[name] .. ": " .. name
  elseif is_list(v) then table.insert(plan.axes, 1, { key = name, values = v, origin = at[name] .. ": " .. name })
  else error(string.format("%s: %s: a name or a list of names", at[name], name), 0) end
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

local function script_sets(plan, t, at)
  if t.set == nil then return end
  if type(t.set) ~= "table" then error(at.set .. ": set: a table of key = value", 0) end
  local keys = {}
  for k in pairs(t.set) do keys[#keys + 1] = k end
  table.sort(keys)
  local set_at = sandbox.field_origins(at.set, t.set)
  for _, k in ipairs(keys) do plan.sets[#plan.sets + 1] = { k, t.set[k], set_at[k] .. ": set." .. k } end
end

local function script_recipe(home, plan, t, at)
  local r = t.recipe
  if r == nil then return end
  if type(r) == "table" then
    plan.keys, plan.origins = {}, {}
    local recipe_at = sandbox.field_origins(at.recipe, r)
    for k, v in pairs(r) do plan.keys[k], plan.origins[k] = v, recipe_at[k] .. ": recipe" end
  elseif type(r) == "string" then
    local ok, path = pcall(recipes.find, home, r)
    if not ok then error(at.recipe .. ": recipe: " .. tostring(path), 0) end
    plan.keys, plan.origins, plan.imported = recipes.load(path)
  else
    error(at.recipe .. ": recipe: a table of keys, a recipe file or a name in scripts/recipes", 0)
  end
end

-- A plan from the table a sweep script returned (`where`: its file:line;
-- each field's error names the field's own line).
function sweep_script.from_table(home, t, where)
  local at = sandbox.field_origins(where, t)
  for k in pairs(t) do
    if not script_fields[k] then
      local names = {}
      for n in pairs(script_fields) do names[#names + 1] = n end
      table.sort(names)
      local guess = schema.suggest(tostring(k), names)
      error(string.format("%s: sweep: unknown field '%s'%s", at[k], tostring(k),
        guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
    end
  end
  local plan = { sets = {}, axes = {}, derived = {}, source = where }
  script_recipe(home, plan, t, at)
  script_sets(plan, t, at)
  script_axes(plan, t, at)
  script_choice(plan, t, "gpu", at)
  script_choice(plan, t, "model", at)
  if t.where ~= nil then
    if type(t.where) ~= "function" then error(at.where .. ": where: a function of a variant's values", 0) end
    plan.where = t.where
  end
  if t.generate ~= nil then
    if type(t.generate) ~= "function" then error(at.generate .. ": generate: a function(emit)", 0) end
    for _, axis in ipairs(plan.axes) do
      if axis.key ~= "model" and axis.key ~= "gpu" then
        error(at.generate .. ": generate and vary lists exclude each other", 0)
      end
    end
    if #plan.axes > 0 then error(at.generate .. ": with generate, emit model and gpu with the other keys", 0) end
    plan.generated = generated(t.generate, at.generate)
  end
  if #plan.axes == 0 and not plan.generated then
    error(where .. ": sweep needs vary = { key = list, ... } or generate", 0)
  end
  return sweep.finish(home, plan)
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
function sweep_script.from_script(home, path)
  -- math.random starts from the same seed in every run, so that a generator
  -- drawing random variants gives --jobs workers and --shard runs the same
  -- enumeration
  math.randomseed(18)
  local s = sandbox.run(path, script_env(home))
  if type(s) ~= "table" or type(s.sweep_table) ~= "table" then
    error(path .. ": a sweep script must return sweep { ... }", 0)
  end
  return sweep_script.from_table(home, s.sweep_table, s.where)
end

return sweep_script
