-- vramplan.models — finding and loading a model: a Lua model script, a name
-- in models/, or a Hugging Face config.json.
local arch = require("vramplan.arch")
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")

local models = {}

local is_file = files.is_file

local model_env

-- The model scripts being run, by path (a script that takes its fields
-- from one that takes them from it is a cycle).
local running = {}

-- Runs the model script at `path` (marked as running meanwhile) and returns
-- its description.
local function run_model(home, path)
  running[path] = true
  local ok, description = pcall(sandbox.run, path, model_env(home, files.dirname(path)))
  running[path] = nil
  if not ok then error(description, 0) end
  if not arch.is_description(description) then
    error(path .. ": a model script must return an architecture call such as llama { ... }", 0)
  end
  return description
end

-- fields_of(name) in a model script: a copy of the fields another model
-- script gives (a name in models/ or beside this script, or a path), without
-- those its family's preset filled in, so a variant of a model (the same
-- checkpoint under another implementation, a revision of the same shape)
-- writes only what differs: `local f = fields_of "deepseek-v2"; f.name =
-- "DeepSeek-V2.5"; return deepseek_v2(f)`.
local function fields_of(home, near)
  return function(name)
    if type(name) ~= "string" then error("fields_of: needs a model's name", 2) end
    local path = (is_file(name) and name) or (near and is_file(near .. "/" .. name .. ".lua") and near .. "/" .. name .. ".lua")
      or files.find(home, "models", name)
    if not path or path:match("%.json$") then error(string.format("fields_of: no model script '%s'", name), 2) end
    if running[path] then error(string.format("fields_of: '%s' takes its fields from itself", name), 2) end
    local description = run_model(home, path)
    local fields = {}
    for k, v in pairs(description.values) do
      if not (description.from_preset and description.from_preset[k]) then fields[k] = v end
    end
    return fields
  end
end

-- The environment of a model script: family names (llama, gpt2, ...) are
-- looked up in models/arch/ when first used, model types' presets
-- (gemma2, qwen2, ...) in vramplan.presets; fields_of (above).
model_env = function(home, near)
  local env = sandbox.env({ fields_of = fields_of(home, near) })
  return setmetatable(env, {
    __index = function(_, name)
      if type(name) == "string" and name:match("^[%w_]+$") then
        return arch.located(arch.load(home, name, near) or arch.preset(home, name, near), arch.call_site(2))
      end
    end,
  })
end

-- Every model name in models/ (file names without .lua), sorted.
function models.list(home) return files.names(home, "models") end

-- A description ready for arch.build: from a path (.lua or .json) or a name.
function models.describe(home, spec)
  local path = spec
  if not is_file(path) then
    path = files.find(home, "models", spec)
    if not path then
      local guess = require("vramplan.schema").suggest(spec, models.list(home))
      error(string.format("no model '%s': not a file, nor a name in %s%s", spec,
        table.concat(require("vramplan.files").roots(home), "/models, ") .. "/models",
        guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
    end
  end
  if path:match("%.json$") then
    -- (required here: a model script needs no JSON reader)
    local family_name, values, origins, quantization = require("vramplan.hf").load(path)
    local family = arch.load(home, family_name)
    return { family = family, values = values, origins = origins, where = path, source = path,
             quantization = quantization }
  end
  local description = run_model(home, path)
  description.source = path
  return description
end

return models
