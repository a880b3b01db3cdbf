-- vramplan.arch — architecture families: a script in models/arch/ declares
-- its configuration fields and a build function that arranges the core's
-- ops; model scripts then call the family with a configuration.
local vramplan = require("vramplan")
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")
local schema = require("vramplan.schema")


local arch = {}

local family_meta = {}

-- Where a script called us: "file:line" of the caller's caller.
local function call_site(level)
  local info = debug.getinfo(level + 1, "Sl")
  if info and info.currentline and info.currentline > 0 then
    return info.short_src .. ":" .. info.currentline
  end
  return "?"
end
arch.call_site = call_site

-- llama { hidden = 4096, ... } in a model script: a description that
-- remembers the family, the values and where they were written. `return
-- llama {...}` is a tail call, which leaves no frame to read the line from:
-- the environment notes where the name was looked up (arch.located).
family_meta.__call = function(family, values)
  local where = family.looked_up_at or call_site(2)
  if type(values) ~= "table" then
    error(string.format("%s: %s takes a table of fields: %s { hidden = ..., ... }", where, family.name, family.name), 0)
  end
  return { family = family, values = values, origins = sandbox.field_origins(where, values), where = where }
end

-- The names an op kind's enum field accepts, as the core lists them:
-- op_options("mlp", "activation") in a family's field declarations.
local function op_options(kind_name, field_name)
  local options = type(kind_name) == "string" and type(field_name) == "string"
    and vramplan.op_field_options(kind_name, field_name)
  if not options then
    error(string.format("op_options: %s has no enum field '%s'", tostring(kind_name), tostring(field_name)), 2)
  end
  return options
end

-- The libraries of block pieces this process loaded (vramplan.library),
-- made by the first script that names one.
local loaded_libraries
local function libraries()
  loaded_libraries = loaded_libraries or require("vramplan.library").new()
  return loaded_libraries
end

-- The libraries the scripts of `paths` use (library.used_by), for show.
function arch.libraries_used_by(paths) return loaded_libraries and loaded_libraries.used_by(paths) or {} end

-- The constructors an architecture script sees: one per op kind, plus
-- `decoder`, `architecture`, `op_options`, `block` and its vocabulary `F`,
-- and `library` (vramplan.library: a file of shared block pieces, found
-- from `path` and `home`). An op the core refuses is reported at the
-- script's line that built it.
local function arch_env(path, home)
  local names = {}
  names.decoder = function(t) return t end
  names.op_options = op_options
  local located = {}
  for _, name in ipairs(vramplan.op_kind_names()) do
    located[name] = function(where, fields)
      local ok, op = pcall(vramplan.op, name, fields)
      if not ok then error(where .. ": " .. tostring(op), 0) end
      return op
    end
  end
  -- a block written in Lua (vramplan.block), in place of the core's op of
  -- that name; the library is loaded by the scripts that write one
  located.block = function(...) return require("vramplan.block").new(...) end
  located.library = function(where, name) return libraries().use(home, path, where, name, arch_env) end
  located.architecture = function(where, def)
    if type(def) ~= "table" or type(def.name) ~= "string" or type(def.fields) ~= "table"
        or type(def.build) ~= "function" then
      error(where .. ": architecture needs name, fields and build", 0)
    end
    local declarations = { { "name", "string", default = def.name, doc = "display name" },
      { "checkpoint_dtype", "string", default = "unknown", options = { "unknown", "fp32", "bf16", "fp16" },
        doc = "the dtype the published checkpoint's weights are in (config.json torch_dtype): what transformers 5's "
          .. "from_pretrained loads by default" } }
    for i, d in ipairs(def.fields) do
      local problem = schema.declaration_problem(d)
      if problem then error(string.format("%s: %s: fields[%d]: %s", where, def.name, i, problem), 0) end
      declarations[#declarations + 1] = d
    end
    return setmetatable({
      name = def.name, doc = def.doc or "", schema = schema.new(def.name, declarations), fields = def.fields,
      check = def.check, build = def.build, source = path,
    }, family_meta)
  end
  return sandbox.located(sandbox.env(names), located, {
    F = function() return require("vramplan.block").vocabulary() end, -- blocks' tensor vocabulary, read-only
  })
end

-- Where a family's script is: beside the model script that names it
-- (`near`: NEAR/arch/NAME.lua, NEAR/NAME.lua), then models/arch/NAME.lua
-- over the search path (files.roots). nil when none has it.
function arch.find(home, name, near) return files.find_near(home, near, "arch", "models/arch", name) end

-- Loads a family's script (arch.find), once per process and file.
local loaded = {}
function arch.load(home, name, near)
  local path = arch.find(home, name, near)
  if not path then return nil end
  if loaded[path] then return loaded[path] end
  local family = sandbox.run(path, arch_env(path, home))
  if getmetatable(family) ~= family_meta then
    error(path .. ": an architecture script must return architecture { ... }", 0)
  end
  family.home = home
  loaded[path] = family
  return family
end

-- A family's Lua blocks: the script its `lua_blocks` field names, beside
-- the model script (NEAR/blocks/NAME.lua) or in models/blocks/ over the
-- search path, run with an architecture script's names. It returns
-- { check = function(c) ... end, build = function(c) ... end }: check
-- returns a field and a problem (or nothing), build a table of
-- constructors (attention = function() return block { ... } end, mlp,
-- rmsnorm, ...) the family calls in place of its ops. Once per file.
local loaded_blocks = {}
function arch.find_blocks(home, name, near)
  if near and files.is_file(near .. "/blocks/" .. name .. ".lua") then return near .. "/blocks/" .. name .. ".lua" end
  return files.find(home, "models/blocks", name)
end
local function load_blocks(home, name, near, where)
  local path = arch.find_blocks(home, name, near)
  if not path then
    error(string.format("%s: lua_blocks: no blocks script '%s' (blocks/%s.lua beside the model, or models/blocks/)",
      where, name, name), 0)
  end
  if not loaded_blocks[path] then
    local def = sandbox.run(path, arch_env(path, home))
    if type(def) ~= "table" or type(def.build) ~= "function" or (def.check ~= nil and type(def.check) ~= "function") then
      error(path .. ": a blocks script must return { check = function(c) ... end, build = function(c) ... end }", 0)
    end
    loaded_blocks[path] = def
  end
  return loaded_blocks[path]
end

-- A model type's preset (vramplan.presets) as a model script calls it:
-- `gemma2 { hidden = 3584, ... }` is the preset's family with the preset's
-- values under the script's. nil when `name` is no preset.
local preset_meta = {}
preset_meta.__call = function(p, values)
  local where = p.looked_up_at or call_site(2)
  p.family.looked_up_at = where
  local description = p.family(values)
  description.where = where
  description.from_preset = {}
  for k, v in pairs(p.values) do
    if description.values[k] == nil then
      description.values[k] = v
      description.origins[k] = where .. ": " .. p.name .. " preset"
      description.from_preset[k] = true
    end
  end
  return description
end

function arch.preset(home, name, near)
  local p = require("vramplan.presets")[name]
  if type(p) ~= "table" or not p.values then return nil end
  local family = arch.load(home, p.family, near)
  return setmetatable({ name = name, family = family, values = p.values }, preset_meta)
end

-- Marks a family as just looked up at `where` (by a script environment).
function arch.located(family, where)
  if family then family.looked_up_at = where end
  return family
end

function arch.is_description(v)
  return type(v) == "table" and getmetatable(v.family) == family_meta
end

-- Resolves the description's fields with `overrides` (name -> string value,
-- from --set) on top, checks them, and builds the core's model.
-- `override_origins` (name -> where it was set) is optional: without it an
-- override's errors are blamed on "overrides".
function arch.build(description, overrides, override_origins)
  if not arch.is_description(description) then
    error("arch.build: argument 1 (description) must be a model description (models.describe's)", 2)
  end
  if overrides ~= nil and type(overrides) ~= "table" then
    error("arch.build: argument 2 (overrides) must be a table of field = value", 2)
  end
  if override_origins ~= nil and type(override_origins) ~= "table" then
    error("arch.build: argument 3 (override_origins) must be a table of field = origin", 2)
  end
  local family = description.family
  local values, origins = {}, {}
  for k, v in pairs(description.values) do values[k], origins[k] = v, description.origins[k] end
  for k, v in pairs(overrides or {}) do values[k], origins[k] = v, override_origins and override_origins[k] or "overrides" end
  -- defaults and checks are the architecture script's code: budgeted too
  local config = sandbox.call(function(v) return schema.resolve(family.schema, v, origins, description.where) end,
    values)
  if family.check then
    local found = sandbox.call(function(c) return { family.check(c) } end, config)
    if found[1] then
      error(string.format("%s: %s: %s", origins[found[1]] or description.where, found[1], found[2]), 0)
    end
  end
  local blocks
  if type(config.lua_blocks) == "string" and config.lua_blocks ~= "" then
    local where = origins.lua_blocks or description.where
    local def = load_blocks(family.home, config.lua_blocks, description.source and files.dirname(description.source),
      where)
    if def.check then
      local found = sandbox.call(function(c) return { def.check(c) } end, config)
      if found[1] then
        error(string.format("%s: %s: %s (lua_blocks = %s)", origins[found[1]] or where, found[1], found[2],
          config.lua_blocks), 0)
      end
    end
    local made, made_blocks = pcall(sandbox.call, def.build, config)
    if not made then error(string.format("%s: lua_blocks %s: %s", where, config.lua_blocks, tostring(made_blocks)), 0) end
    blocks = made_blocks
  end
  local ok, built = pcall(sandbox.call, function(c) return family.build(c, blocks) end, config)
  if not ok then
    error(string.format("%s: building %s: %s", description.where, family.name, tostring(built)), 0)
  end
  built.name = config.name
  local ok2, model = pcall(vramplan.model, built)
  if not ok2 then error(string.format("%s: %s", description.where, tostring(model)), 0) end
  return model, config
end

return arch
