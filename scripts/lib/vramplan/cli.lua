-- vramplan.cli — the command line: parses arguments, runs the estimate,
-- prints the report; user errors become one message and a non-zero exit.
local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local hardware = require("vramplan.hardware")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local report = require("vramplan.report")

local cli = {}

local usage = [[
usage: vramplan estimate MODEL [--recipe FILE] [--set KEY=VALUE]... [--gpu NAME] [--json] [--timeline]
       vramplan list models|gpus|recipes
       vramplan keys            recipe keys, op fields and model families' fields, with their meaning
       vramplan --version

MODEL is a model script, a name in models/ (llama2-7b, gpt2, ...) or a Hugging
Face config.json (one saved with a bitsandbytes quantization_config makes
the recipe QLoRA over that format). --set sets a recipe key (micro_batch=4)
or a model field (hidden=1024); it may be repeated.]]

local UsageError = {}

local function fail_usage(msg) error(setmetatable({ msg = msg }, UsageError), 0) end

local function parse(args)
  local opts = { sets = {} }
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then fail_usage(flag .. " needs a value") end
    return args[i]
  end
  while i <= #args do
    local a = args[i]
    if a == "--json" then opts.json = true
    elseif a == "--timeline" then opts.timeline = true
    elseif a == "--recipe" then opts.recipe = value(a)
    elseif a == "--gpu" then opts.gpu = value(a)
    elseif a == "--set" then
      local kv = value(a)
      local k, v = kv:match("^([%w_]+)=(.*)$")
      if not k then fail_usage("--set takes KEY=VALUE (got '" .. kv .. "')") end
      opts.sets[#opts.sets + 1] = { k, v, "--set " .. kv }
    elseif a:sub(1, 2) == "--" then fail_usage("unknown option " .. a)
    elseif not opts.command then opts.command = a
    elseif not opts.target then opts.target = a
    else fail_usage("unexpected argument " .. a) end
    i = i + 1
  end
  return opts
end

local function estimate(opts, home)
  if not opts.target then fail_usage("estimate needs a MODEL") end
  local description = models.describe(home, opts.target)
  local keys, origins = {}, {}
  if opts.recipe then keys, origins = recipes.load(opts.recipe) end
  local overrides, override_origins = {}, {}
  for _, s in ipairs(opts.sets) do
    local k, v, origin = s[1], s[2], s[3]
    if description.family.schema.fields[k] then
      overrides[k], override_origins[k] = v, origin
    elseif recipes.is_key(k) then
      keys[k], origins[k] = v, origin
    else
      local names = {}
      for _, key in ipairs(vramplan.recipe_keys()) do names[#names + 1] = key.name end
      for _, f in ipairs(description.family.schema.order) do names[#names + 1] = f end
      local guess = require("vramplan.schema").suggest(k, names)
      error(string.format("%s: unknown key '%s': not a recipe key nor a field of %s%s", origin, k,
        description.family.name, guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
    end
  end
  local model, config = arch.build(description, overrides, override_origins)
  recipes.over_checkpoint(keys, origins, description.quantization)
  recipes.check(keys, origins)
  local gpu = opts.gpu and hardware.gpu(home, opts.gpu) or nil
  -- the timeline shows every layer: no folding of identical layers then
  local ok, result = pcall(vramplan.estimate, model, keys, gpu, { timeline = opts.timeline, fold = not opts.timeline })
  if not ok then
    -- a message about a recipe key blames where the key was set
    local key = tostring(result):match("^([%w_]+):")
    error(string.format("%s: %s", origins[key] or description.source, tostring(result)), 0)
  end
  local ctx = {
    result = result, gpu = gpu, model_name = config.name, arch = description.family.name, layers = config.layers,
    source = description.source, version = vramplan.version,
  }
  if opts.json then
    print(report.json(ctx))
  else
    print(report.human(ctx))
    if opts.timeline then
      print("")
      print(report.timeline(result))
    end
  end
  return 0
end

local function list(opts, home)
  local what = opts.target
  local names
  if what == "models" then names = models.list(home)
  elseif what == "gpus" then names = hardware.list(home)
  elseif what == "recipes" then names = require("vramplan.files").script_names(home .. "/scripts/recipes")
  else fail_usage("list what? models, gpus or recipes") end
  for _, n in ipairs(names) do print(n) end
  return 0
end

-- A field's documentation, led by the names it accepts when it lists them.
local function with_options(options, doc)
  return options and (table.concat(options, " | ") .. ": " .. doc) or doc
end

-- Every family's fields: what a model script sets, and --set overrides.
local function family_fields(home)
  local arch = require("vramplan.arch")
  print("model families and their fields (in a model script, or --set FIELD=VALUE over one):")
  for _, name in ipairs(require("vramplan.files").script_names(home .. "/models/arch")) do
    local family = arch.load(home, name)
    print(string.format("  %s — %s", family.name, family.doc))
    for _, f in ipairs(family.fields) do
      local default = type(f.default) == "function" and "derived" or f.default == nil and "required"
        or ("default " .. tostring(f.default))
      print(string.format("      %-20s %-6s %-16s %s", f[1], f[2], default, with_options(f.options, f.doc or "")))
    end
  end
end

local function keys(home)
  print("recipe keys (--set KEY=VALUE or in a recipe script):")
  for _, k in ipairs(vramplan.recipe_keys()) do
    print(string.format("  %-18s %s", k.name, with_options(k.choices, k.doc)))
  end
  print("")
  print("op kinds and their fields (for architecture scripts):")
  for _, kind in ipairs(vramplan.op_kinds()) do
    print(string.format("  %s — %s", kind.name, kind.doc))
    for _, f in ipairs(kind.fields) do
      local d = f.required and "required" or ("default " .. tostring(f.default))
      print(string.format("      %-16s %-6s %-14s %s", f.name, f.type, d, with_options(f.options, f.doc)))
    end
  end
  print("")
  family_fields(home)
  return 0
end

function cli.run(args, home)
  local opts = parse(args)
  if opts.command == "estimate" then return estimate(opts, home)
  elseif opts.command == "list" then return list(opts, home)
  elseif opts.command == "keys" then return keys(home)
  elseif opts.command == "--version" or opts.command == "version" then print("vramplan " .. vramplan.version) return 0
  elseif opts.command == nil or opts.command == "help" then print(usage) return opts.command and 0 or 2
  end
  fail_usage("unknown command " .. opts.command)
end

-- Returns the exit status: 0, 1 for bad input, 2 for bad usage.
function cli.main(args, home)
  for _, a in ipairs(args) do
    if a == "--help" or a == "-h" then print(usage) return 0 end
    if a == "--version" then print("vramplan " .. vramplan.version) return 0 end
  end
  local ok, err = pcall(cli.run, args, home)
  if ok then return err end
  if getmetatable(err) == UsageError then
    io.stderr:write("vramplan: ", err.msg, "\n", usage, "\n")
    return 2
  end
  io.stderr:write("vramplan: ", tostring(err), "\n")
  return 1
end

return cli
