-- vramplan list: the models (as a table: family, size, shape, context),
-- GPUs or recipes that can be named.
local arch = require("vramplan.arch")
local files = require("vramplan.files")
local hardware = require("vramplan.hardware")
local models = require("vramplan.models")
local report = require("vramplan.report")

local list = {
  usage = "list models|gpus|recipes [--json]",
  help = "models: a table of every model in models/ (family, parameters, layers, hidden, heads / KV heads,\n" ..
    "context); gpus and recipes: their names. --json prints the same as a JSON array.",
  flags = { json = "flag" },
}

-- One model's row: its name and what sets its size, from its resolved fields.
local function model_row(home, name)
  local description = models.describe(home, name)
  local model, config = arch.build(description)
  return { name = name, display_name = config.name, family = description.family.name, params = model:params(),
           layers = config.layers, hidden = config.hidden, heads = config.heads,
           kv_heads = config.kv_heads or config.heads, context = config.max_positions }
end

function list.run(opts, home)
  local what = opts.target
  local names
  if what == "models" then names = models.list(home)
  elseif what == "gpus" then names = hardware.list(home)
  elseif what == "recipes" then names = require("vramplan.recipes").list(home)
  else require("vramplan.cli").fail_usage("list what? models, gpus or recipes") end
  if what ~= "models" then
    if opts.json then print(require("dkjson").encode(names)) else for _, n in ipairs(names) do print(n) end end
    return 0
  end
  local rows = {}
  for _, n in ipairs(names) do rows[#rows + 1] = model_row(home, n) end
  if opts.json then
    print(require("dkjson").encode(rows, { indent = true, keyorder = { "name", "display_name", "family", "params",
      "layers", "hidden", "heads", "kv_heads", "context" } }))
    return 0
  end
  print(string.format("%-22s %-10s %10s %7s %7s %11s %8s", "model", "family", "params", "layers", "hidden",
    "heads / KV", "context"))
  for _, r in ipairs(rows) do
    print(string.format("%-22s %-10s %10s %7s %7s %11s %8s", r.name, r.family, report.count(r.params), r.layers or "-",
      r.hidden or "-", string.format("%s / %s", r.heads or "-", r.kv_heads or "-"), r.context or "-"))
  end
  return 0
end

return list
