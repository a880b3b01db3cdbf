-- vramplan export: a recipe (script or another tool's config) written as a
-- DeepSpeed, accelerate, axolotl or LLaMA-Factory config (vramplan.export).
local export = require("vramplan.export")
local recipes = require("vramplan.recipes")

local cmd = {
  usage = "export --format deepspeed|accelerate|axolotl|llama-factory [RECIPE-OR-CONFIG] [--set KEY=VALUE]... " ..
    "[--model MODEL] [--deepspeed FILE] [--output FILE]",
  flags = { format = "value", set = "set", model = "value", output = "value", deepspeed = "value" },
  help = "Writes the recipe as the named tool's config (stdout, or --output FILE); importing it back with\n" ..
    "--recipe gives the same recipe. Keys the format cannot hold are listed on stderr.\n" ..
    "--deepspeed FILE (llama-factory, axolotl, accelerate): the DeepSpeed config it names (`deepspeed:`, " ..
    "`deepspeed_config_file`), written with --format deepspeed.",
}

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.format then cli.fail_usage("export needs --format deepspeed, accelerate, axolotl or llama-factory") end
  if not opts.target and #opts.sets == 0 then cli.fail_usage("export needs a RECIPE, a config file or --set keys") end
  if opts.positional[2] then cli.fail_usage("unexpected argument " .. opts.positional[2]) end
  if not export.formats[opts.format] then
    cli.fail_usage("unknown format " .. opts.format .. " (deepspeed, accelerate, axolotl or llama-factory)")
  end
  if opts.deepspeed and opts.format == "deepspeed" then
    cli.fail_usage("--deepspeed FILE names the DeepSpeed config of a llama-factory, axolotl or accelerate export")
  end
  -- a path, a name `list recipes` prints, or only --set keys
  local keys, origins, imported = {}, {}, nil
  if opts.target then keys, origins, imported = recipes.load(recipes.find(home, opts.target)) end
  for _, s in ipairs(opts.sets) do
    if not recipes.is_key(s[1]) then error(string.format("%s: unknown recipe key '%s'", s[3], s[1]), 0) end
    keys[s[1]], origins[s[1]] = s[2], s[3]
  end
  recipes.normalize(keys, origins, imported, nil)
  recipes.check(keys, origins)
  -- the config writes numbers and booleans as such, whether a script or --set gave them
  for k, v in pairs(keys) do keys[k] = recipes.typed(k, v) end
  -- what the GPU count implies is the run's, not the config's
  for k, origin in pairs(origins) do
    if tostring(origin):find("(implied by global_batch)", 1, true) or tostring(origin):find("(implied by gpus)", 1, true) then
      keys[k] = nil
    end
  end
  local autos = {}
  for _, d in ipairs(imported and imported.deferred or {}) do
    if keys[d.key] == nil then autos[d.key] = true end
  end
  local model = opts.model or (imported and imported.model)
  local hub_id = model and (export.hub_id(model) or nil)
  local what = opts.target or "--set"
  local text, rest = export.write(opts.format, keys, autos, what, { hub_id = hub_id, deepspeed = opts.deepspeed })
  if #rest > 0 then
    io.stderr:write(string.format("vramplan: warning: %s: not expressible in the %s format (left out): %s\n", what,
      opts.format, table.concat(rest, ", ")))
  end
  if opts.output then
    local f, err = io.open(opts.output, "w")
    if not f then error("cannot write " .. tostring(err), 0) end
    f:write(text)
    f:close()
  else
    io.write(text)
  end
  return 0
end

return cmd
