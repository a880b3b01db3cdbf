-- vramplan list: the models, GPUs or recipes that can be named.
local files = require("vramplan.files")
local hardware = require("vramplan.hardware")
local models = require("vramplan.models")

local list = {
  usage = "list models|gpus|recipes",
  flags = {},
}

function list.run(opts, home)
  local what = opts.target
  local names
  if what == "models" then names = models.list(home)
  elseif what == "gpus" then names = hardware.list(home)
  elseif what == "recipes" then names = files.script_names(home .. "/scripts/recipes")
  else require("vramplan.cli").fail_usage("list what? models, gpus or recipes") end
  for _, n in ipairs(names) do print(n) end
  return 0
end

return list
