-- vramplan.job — what every command starts from: a model (script, name or
-- config.json) with its --set field overrides, a recipe (script and --set
-- keys, each remembering where it was set) and an optional GPU; and one
-- estimate of it, with errors blamed on where the offending key came from.
local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local hardware = require("vramplan.hardware")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local schema = require("vramplan.schema")

local job = {}

local DEFAULT_SEQ_LEN = 2048 -- the core's (engine/policy/recipe.c)

-- Puts one --set KEY=VALUE among the model's fields (overrides) or the
-- recipe keys; raises for anything else.
function job.split_set(description, k, v, origin, keys, origins, overrides, override_origins)
  if description.family.schema.fields[k] then
    overrides[k], override_origins[k] = v, origin
  elseif recipes.is_key(k) then
    keys[k], origins[k] = v, origin
  else
    local names = {}
    for _, key in ipairs(vramplan.recipe_keys()) do names[#names + 1] = key.name end
    for _, f in ipairs(description.family.schema.order) do names[#names + 1] = f end
    local guess = schema.suggest(k, names)
    error(string.format("%s: unknown key '%s': not a recipe key nor a field of %s%s", origin, k,
      description.family.name, guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
  end
end

-- Splits --set KEY=VALUE pairs ({ key, value, origin }) between the model's
-- fields and recipe keys.
local function split_sets(description, sets, keys, origins)
  local overrides, override_origins = {}, {}
  for _, s in ipairs(sets) do
    job.split_set(description, s[1], s[2], s[3], keys, origins, overrides, override_origins)
  end
  return overrides, override_origins
end
job.split_sets = split_sets

local function whole(v) return math.tointeger(tonumber(v)) end

-- --gpus N sets dp to N over the other parallel sizes (tp x pp x cp); a
-- node or instance named by --gpu sets gpus_per_node: its GPUs, or fewer
-- when the job has fewer ranks (again whenever a search changes the ranks:
-- job.keys_with). Returns whether it set gpus_per_node.
local function place(keys, origins, count, host, host_name)
  local split = 1
  for _, k in ipairs({ "tp", "pp", "cp" }) do split = split * (whole(keys[k] or 1) or 1) end
  if count then
    local n = whole(count)
    if not n or n < 1 then error("--gpus: a whole number of GPUs, 1 or more (got " .. tostring(count) .. ")", 0) end
    if n % split ~= 0 then
      error(string.format("--gpus %d: not a multiple of tp x pp x cp (%d)", n, split), 0)
    end
    local dp = n // split
    if keys.dp ~= nil and whole(keys.dp) ~= dp then
      error(string.format("%s: dp: %s, but --gpus %d makes dp %d", origins.dp or "recipe", tostring(keys.dp), n, dp), 0)
    end
    keys.dp, origins.dp = dp, "--gpus " .. count
  end
  if host and keys.gpus_per_node == nil then
    local ranks = (whole(keys.dp or 1) or 1) * split
    keys.gpus_per_node, origins.gpus_per_node = math.min(host.gpus, ranks), "--gpu " .. host_name
    return true
  end
  return false
end

local LAYOUT_KEYS = { "dp", "tp", "pp", "cp" }

-- Completes the recipe keys (and their origins) of a model once it is built,
-- as every command sees them: other tools' names and the stack's defaults
-- (recipes.normalize), the model's position limit as seq_len, a quantized
-- checkpoint's keys, the layout --gpus and a node or instance set. c = {
-- description, config (the model's resolved fields), imported (a config
-- file's recipe)?, gpus?, host?, host_name? }. Returns what was assumed
-- about the stack (the report's) or nil, and whether the node or instance
-- set gpus_per_node. `sweep` completes each variant with it, so that its
-- rows are `estimate`'s.
function job.complete(keys, origins, c)
  local assumed = recipes.normalize(keys, origins, c.imported, c.config)
  -- the core's seq_len default (2048) is longer than a learned position
  -- table of 1024 (GPT-2) or 512 (BERT): a recipe that names no seq_len
  -- gets the model's own limit then
  local limit = math.tointeger(c.config.max_positions)
  if keys.seq_len == nil and limit and limit < DEFAULT_SEQ_LEN then
    keys.seq_len, origins.seq_len = limit, c.description.source .. ": max_positions"
  end
  recipes.over_checkpoint(keys, origins, c.description.quantization)
  return assumed, place(keys, origins, c.gpus, c.host, c.host_name)
end

-- job.load(home, spec): spec = { target = MODEL, recipe = FILE or NAME?, sets = {{k, v, origin}...},
-- gpu = NAME?, gpus = N? } (NAME: a GPU, a node or an instance).
-- Returns a job: the built model, its resolved config, the recipe keys and
-- their origins (checked), the GPU (or nil), the node or instance (or nil).
function job.load(home, spec)
  local keys, origins, imported = {}, {}, nil
  if spec.recipe then keys, origins, imported = recipes.load(recipes.find(home, spec.recipe)) end
  -- a config file may name its model (axolotl's base_model, ...)
  local target = spec.target or (imported and imported.model)
  if not target then error((imported and imported.model_note) or "no MODEL given", 0) end
  local description = models.describe(home, target)
  local overrides, override_origins = split_sets(description, spec.sets or {}, keys, origins)
  local model, config = arch.build(description, overrides, override_origins)
  local hw = spec.gpu and hardware.resolve(home, spec.gpu) or {}
  local assumed, host_places = job.complete(keys, origins, { description = description, config = config,
    imported = imported, gpus = spec.gpus, host = hw.host, host_name = spec.gpu })
  recipes.check(keys, origins)
  return { home = home, description = description, model = model, config = config, keys = keys, origins = origins,
           gpu = hw.gpu, host = hw.host, assumed = assumed, host_places = host_places }
end

-- A value in `changes` that removes the key (back to the engine's default).
job.unset = setmetatable({}, { __tostring = function() return "unset" end })

-- The job's recipe keys with `changes` (key -> value, or job.unset) on top.
-- Where the node or instance set gpus_per_node (not the recipe), changes to
-- the layout place the ranks again as --gpus N does: fit's and advise's
-- dp 2 on a DGX is two GPUs of one node, as `estimate --set dp=2` has it.
function job.keys_with(j, changes)
  local keys = {}
  for k, v in pairs(j.keys) do keys[k] = v end
  for k, v in pairs(changes or {}) do
    if v == job.unset then keys[k] = nil else keys[k] = v end
  end
  if j.host_places and changes and changes.gpus_per_node == nil then
    local ranks, moved = 1, false
    for _, k in ipairs(LAYOUT_KEYS) do
      ranks = ranks * (whole(keys[k] or 1) or 1)
      moved = moved or changes[k] ~= nil
    end
    if moved then keys.gpus_per_node = math.min(j.host.gpus, ranks) end
  end
  return keys
end

-- A job like `j` with `changes` made to its recipe keys, blamed on `origin`.
function job.derive(j, changes, origin)
  local d = {}
  for k, v in pairs(j) do d[k] = v end
  d.keys = job.keys_with(j, changes)
  d.origins = {}
  for k, v in pairs(j.origins) do d.origins[k] = v end
  for k in pairs(changes) do d.origins[k] = origin or "derived" end
  return d
end

-- The job's recipe with the engine's defaults filled in, its keys checked
-- one by one only: the combination may be what a search is to repair (as
-- micro_batch 1 under sequence parallelism over an odd seq_len).
function job.resolved_recipe(j)
  return vramplan.check_recipe(job.keys_with(j), true)
end

-- A text naming a set of changes, the same for the same changes (a
-- cache or seen-set key): "k1=v1 k2=v2" sorted.
function job.changes_key(changes)
  local parts = {}
  for k, v in pairs(changes) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table.sort(parts)
  return table.concat(parts, " ")
end

-- The message of an estimate's error `err`, blamed on where the offending
-- key was set (a key in `changes` as if the user had set it).
function job.blame(j, changes, err)
  local key = tostring(err):match("^([%w_]+):")
  local origin = changes and changes[key] ~= nil and string.format("--set %s=%s", key, tostring(changes[key]))
    or j.origins[key] or j.description.source
  return string.format("%s: %s", origin, tostring(err))
end

-- The first thing of the resolved `recipe` the job's GPU cannot run, blamed
-- on where it was set; nil when it can run all of it (or there is no GPU).
function job.gpu_problem(j, changes, recipe)
  if not j.gpu then return nil end
  local key, problem = hardware.unsupported(j.gpu, recipe)
  if not key then return nil end
  local origin = changes and changes[key] ~= nil and "searched" or j.origins[key] or "the default recipe"
  return string.format("%s: %s", origin, problem)
end

-- One estimate of the job (with `changes` on its keys): the core's result
-- table, or raises a message blaming where the offending key was set.
-- options as vramplan.estimate's (timeline, fold); folding by default.
function job.estimate(j, changes, options)
  options = options or {}
  if options.fold == nil then options.fold = not options.timeline end
  local ok, result = pcall(vramplan.estimate, j.model, job.keys_with(j, changes), j.gpu, options)
  if not ok then error(job.blame(j, changes, result), 0) end
  local problem = job.gpu_problem(j, changes, result.recipe)
  if problem then error(problem, 0) end
  return result
end

-- Like job.estimate, but returns nil and the message instead of raising.
function job.try(j, changes, options)
  local ok, result = pcall(job.estimate, j, changes, options)
  if ok then return result end
  return nil, tostring(result)
end

-- The report's context (report.human / report.json) for one result.
function job.context(j, result)
  return {
    result = result, gpu = j.gpu, host = j.host, model_name = j.config.name, arch = j.description.family.name,
    layers = j.config.layers, source = j.description.source, version = vramplan.version, assumed = j.assumed,
  }
end

return job
