-- vramplan.api — the Lua half of `require "vramplan"`: models, GPUs and
-- recipes by name, the report object of `estimate --json`, and sweeps run
-- in-process. Documented in docs/lua-api.md; what is there is stable.
local vramplan = require("vramplan")

-- Where models/, hardware/ and scripts/ are; the command sets it, a Lua
-- program may too.
vramplan.home = vramplan.home or os.getenv("VRAMPLAN_HOME") or "."

-- What a bad argument was, for the message: its type, and a short list's items.
local function describe(got)
  if type(got) == "table" and #got > 0 and #got <= 4 then
    local items = {}
    for i = 1, #got do items[i] = type(got[i]) == "string" and string.format("%q", got[i]) or tostring(got[i]) end
    return "{ " .. table.concat(items, ", ") .. " }"
  end
  return type(got)
end

-- Raises "vramplan.NAME: argument I (WHAT) must be ..." at the caller.
local function check(ok, name, i, what, must, got)
  if not ok then
    error(string.format("vramplan.%s: argument %d (%s) must be %s (got %s)", name, i, what, must, describe(got)), 3)
  end
end

-- A list of names (sweep's fields).
local function is_names(t)
  if type(t) ~= "table" or #t == 0 then return false end
  for _, v in ipairs(t) do if type(v) ~= "string" then return false end end
  return true
end

-- A shard { k, n }: whole numbers, 0 <= k < n (--shard K/N's).
local function is_shard(t)
  if type(t) ~= "table" then return false end
  local k, n = t[1], t[2]
  return math.type(k) == "integer" and math.type(n) == "integer" and k >= 0 and k < n
end

-- vramplan.load_model(spec [, fields]) -> model, config: spec a name in
-- models/, a model script or a config.json; fields overrides its fields.
function vramplan.load_model(spec, fields)
  check(type(spec) == "string", "load_model", 1, "model", "a model name or path", spec)
  check(fields == nil or type(fields) == "table", "load_model", 2, "fields", "a table of field = value", fields)
  local description = require("vramplan.models").describe(vramplan.home, spec)
  local origins = {}
  for k in pairs(fields or {}) do origins[k] = "vramplan.load_model" end
  return require("vramplan.arch").build(description, fields, origins)
end

-- vramplan.load_gpu(name) -> the GPU table estimate takes (hardware/gpus/).
function vramplan.load_gpu(name)
  check(type(name) == "string", "load_gpu", 1, "name", "a GPU name such as h100-80gb", name)
  return require("vramplan.hardware").gpu(vramplan.home, name)
end

-- vramplan.load_recipe(path) -> the keys of a recipe script.
function vramplan.load_recipe(path)
  check(type(path) == "string", "load_recipe", 1, "path", "a recipe script's path", path)
  return (require("vramplan.recipes").load(path))
end

-- vramplan.report(result, model_config [, gpu]) -> estimate --json's object
-- for a result of vramplan.estimate (config: load_model's second value).
function vramplan.report(result, config, gpu)
  check(type(result) == "table" and result.recipe ~= nil, "report", 1, "result", "a result of vramplan.estimate",
    result)
  check(type(config) == "table" and config.name ~= nil, "report", 2, "config", "load_model's second value", config)
  check(gpu == nil or type(gpu) == "table", "report", 3, "gpu", "a GPU table (load_gpu)", gpu)
  return require("vramplan.report").object({ result = result, gpu = gpu, model_name = config.name, layers = config.layers,
    version = vramplan.version })
end

-- vramplan.sweep(spec, on_row) -> the number of rows: spec is a sweep
-- script's table (model, recipe, gpu, set, vary, order, where, generate)
-- plus fields (a list) and shard ({k, n}); on_row(row) gets each row,
-- field -> value, in variant order.
function vramplan.sweep(spec, on_row)
  check(type(spec) == "table", "sweep", 1, "spec", "a table like a sweep script's", spec)
  check(type(on_row) == "function", "sweep", 2, "on_row", "a function(row)", on_row)
  local sweep, grid = require("vramplan.sweep"), require("vramplan.grid")
  local t = {}
  for k, v in pairs(spec) do if k ~= "fields" and k ~= "shard" then t[k] = v end end
  check(spec.fields == nil or is_names(spec.fields), "sweep", 1, "spec.fields", "a list of names", spec.fields)
  check(spec.shard == nil or is_shard(spec.shard), "sweep", 1, "spec.shard", "{ k, n } with whole 0 <= k < n",
    spec.shard)
  local plan = require("vramplan.sweep_script").from_table(vramplan.home, t, "vramplan.sweep")
  local fields = sweep.fields(plan, spec.fields)
  -- each variant's values made in C where every field can be (sweep.values_maker), or through the object
  local values_of = sweep.values_maker(plan, fields)
  if not values_of then
    local evaluate, varied = sweep.evaluator(plan, fields), {}
    for _, k in ipairs(plan.columns) do varied[k] = true end
    values_of = function(index, values)
      local object, message = evaluate(values)
      return sweep.row_values(fields, varied, index, values, object, sweep.one_line(message))
    end
  end
  local n = 0
  grid.each(plan, function(index, values)
    if not grid.owns(spec.shard, index) then return end
    local list = values_of(index, values)
    local row = {}
    for i, f in ipairs(fields) do row[f] = list[i] end
    on_row(row)
    n = n + 1
  end)
  return n
end

return vramplan
