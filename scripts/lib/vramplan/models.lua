-- vramplan.models — finding and loading a model: a Lua model script, a name
-- in models/, or a Hugging Face config.json.
local arch = require("vramplan.arch")
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")

local models = {}

local is_file = files.is_file

-- The environment of a model script: family names (llama, gpt2, ...) are
-- looked up in models/arch/ when first used, model types' presets
-- (gemma2, qwen2, ...) in vramplan.presets.
local function model_env(home, near)
  local env = sandbox.env()
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
  local description = sandbox.run(path, model_env(home, files.dirname(path)))
  if not arch.is_description(description) then
    error(path .. ": a model script must return an architecture call such as llama { ... }", 0)
  end
  description.source = path
  return description
end

return models
