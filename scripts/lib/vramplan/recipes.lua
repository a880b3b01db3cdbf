-- vramplan.recipes — recipe scripts (`return recipe { ... }`) and --set
-- values, checked key by key against the core's recipe declarations, each
-- error naming where the key was set.
local vramplan = require("vramplan")
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")

local recipes = {}

local function recipe_env()
  return sandbox.located(sandbox.env(), {
    recipe = function(where, t)
      if type(t) ~= "table" then error(where .. ": recipe takes a table of keys", 0) end
      return { keys = t, where = where }
    end,
  })
end

-- Where recipes are looked up by name in each root of the search path.
recipes.folders = { "scripts/recipes", "recipes" }

-- Every recipe name over the search path.
function recipes.list(home) return files.names(home, recipes.folders) end

-- A recipe by path, or by the name `list recipes` prints (scripts/recipes/NAME.lua).
function recipes.find(home, spec)
  -- a path (it has a folder or .lua) is left to recipes.load to open
  if files.is_file(spec) or spec:find("/", 1, true) or spec:match("%.lua$") then return spec end
  local path = files.find(home, recipes.folders, spec)
  if path then return path end
  local schema = require("vramplan.schema")
  local names = recipes.list(home)
  error(string.format("no recipe '%s': not a file, nor a name in %s/scripts/recipes%s", spec, home,
    schema.did_you_mean(schema.suggest_names(spec, names))), 0)
end

-- Reads a recipe script: returns keys (name -> value) and their origins.
-- Another tool's config file (DeepSpeed JSON, accelerate, axolotl or
-- LLaMA-Factory YAML: vramplan.configs) is read as one; it returns a third
-- value, the imported recipe (its model, its "auto" values).
function recipes.load(path)
  if require("vramplan.configs").handles(path) then
    local r = require("vramplan.configs").load(path)
    return r.keys, r.origins, r
  end
  local f = io.open(path, "r")
  if not f then error("cannot open recipe " .. path, 0) end
  f:close()
  local r = sandbox.run(path, recipe_env())
  if type(r) ~= "table" or type(r.keys) ~= "table" then
    error(path .. ": a recipe script must return recipe { ... }", 0)
  end
  return r.keys, sandbox.field_origins(r.where, r.keys)
end

-- The core's recipe keys are fixed when it is built: the set is made once
-- (vramplan.recipe_keys() builds a table of every key and its doc, too slow
-- to call for each key of each variant of a sweep).
local key_set
function recipes.is_key(name)
  if not key_set then
    key_set = {}
    for _, k in ipairs(vramplan.recipe_keys()) do key_set[k.name] = true end
  end
  if key_set[name] then return true end
  -- another tool's name for a key, or a key read in Lua (the stack)
  return require("vramplan.aliases").key(name) ~= nil or require("vramplan.stacks").keys[name] ~= nil
end

-- A --set value (always text) as the Lua value a recipe script would give
-- the key: a number for the numeric keys, a boolean for the flags, else
-- the text. Unknown keys and values that do not parse stay text (the core
-- names them when it checks the recipe).
local key_types
function recipes.typed(name, value)
  if type(value) ~= "string" then return value end
  if not key_types then
    key_types = {}
    for _, k in ipairs(vramplan.recipe_keys()) do key_types[k.name] = k.type end
  end
  local kind = key_types[name]
  if kind == "int" or kind == "number" then return tonumber(value) or value end
  if kind == "bool" then
    if value == "true" then return true end
    if value == "false" then return false end
  end
  return value
end

-- Before the core sees the keys: other tools' names and spellings become
-- ours (vramplan.aliases), the stack and its precision flags choose values
-- (vramplan.stacks), settings implied by others are filled, then the
-- stack's defaults, then an imported config's "auto" values that depend on
-- the model (`config`: the model's resolved fields). Returns what was
-- assumed about the stack and precision (for the report), or nil.
function recipes.normalize(keys, origins, imported, config)
  -- no keys: nothing to rename, imply or assume (and two modules not loaded)
  if next(keys) == nil and not imported then return nil end
  local aliases = require("vramplan.aliases")
  local stacks = require("vramplan.stacks")
  aliases.apply(keys, origins)
  local assumed = stacks.apply(keys, origins, config)
  aliases.imply(keys, origins)
  if assumed then stacks.defaults(keys, origins, assumed) end
  for _, d in ipairs(imported and imported.deferred or {}) do
    if keys[d.key] == nil and config and config.hidden then
      keys[d.key], origins[d.key] = d.from_hidden(config.hidden), d.origin
    end
  end
  return assumed
end

-- The recipe over a quantized checkpoint (models.describe's quantization):
-- fine-tuning defaults to qlora and must be it (transformers trains only
-- adapters over quantized weights), the checkpoint's storage format fills
-- quant and double_quant and may not be contradicted, its compute dtype is
-- a default. A checkpoint dequantized while loading (gpt-oss's MXFP4) only
-- fills its defaults.
function recipes.over_checkpoint(keys, origins, quantization)
  if not quantization then return end
  if quantization.dequantized then
    for key, value in pairs(quantization.keys) do
      if keys[key] == nil then keys[key], origins[key] = value, quantization.origins[key] end
    end
    return
  end
  local source = quantization.origins.quant
  if keys.finetune == nil then
    keys.finetune, origins.finetune = "qlora", source
  elseif keys.finetune ~= "qlora" then
    error(string.format("%s: finetune: %s is not possible over a checkpoint quantized by bitsandbytes (%s): " ..
      "only adapters train over it; use finetune = qlora", origins.finetune or "recipe", tostring(keys.finetune),
      source), 0)
  end
  for key, value in pairs(quantization.keys) do
    if keys[key] == nil then
      keys[key], origins[key] = value, quantization.origins[key]
    elseif quantization.fixed[key] and tostring(keys[key]) ~= tostring(value) then
      error(string.format("%s: %s: the checkpoint stores %s (%s)", origins[key] or "recipe", key, tostring(value),
        quantization.origins[key]), 0)
    end
  end
end

-- Checks each key on its own so that an error names its origin.
function recipes.check(keys, origins)
  for k, v in pairs(keys) do
    local ok, err = pcall(vramplan.check_recipe, { [k] = v }, true)
    if not ok then error(string.format("%s: %s", origins[k] or "recipe", tostring(err)), 0) end
  end
  -- combinations of keys: blamed on the first key the message names
  local ok, result = pcall(vramplan.check_recipe, keys)
  if not ok then
    local key = tostring(result):match("^([%w_]+):")
    error(string.format("%s: %s", origins[key] or "recipe", tostring(result)), 0)
  end
  return result
end

return recipes
