-- vramplan.configs — other tools' configuration files as recipes: a
-- DeepSpeed config (.json), and YAML files of accelerate, axolotl and
-- LLaMA-Factory (.yaml, .yml), told apart by the keys each tool requires.
local common = require("vramplan.import.common")

local configs = {}

-- True when `path` names a file this module reads (by its extension).
function configs.handles(path)
  local ext = path:match("%.([%w]+)$")
  ext = ext and ext:lower()
  return ext == "json" or ext == "yaml" or ext == "yml"
end

-- Loads a configuration file: returns its recipe (import.common.recipe:
-- keys, origins, deferred "auto" values, the model it names) after
-- warning on stderr about every key it holds that vramplan does not model.
function configs.load(path)
  local ext = path:match("%.([%w]+)$"):lower()
  local r, tool
  if ext == "json" then
    r, tool = require("vramplan.import.deepspeed").load(path), "DeepSpeed"
  else
    r, tool = require("vramplan.import.yaml").load(path)
  end
  common.warn(r, tool)
  return r
end

return configs
