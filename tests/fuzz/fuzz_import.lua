-- fuzz_import.lua — the Lua half of the fuzz target (fuzz_import.c): given
-- the tree's home and a private folder, returns run(selector, text), which
-- writes `text` where one importer reads it, runs that importer and then
-- the core on what it made, and discards the result. An importer's error
-- is a refusal and is caught here; run returns a message only when the
-- input changed the library's state for the next one (a finding).
--
-- selector % 6:  0 config.json (models.describe, arch.build, estimate)
--                1 model script (the same)
--                2 recipe script (recipes.load, normalize, check, estimate)
--                3 DeepSpeed JSON (the same)
--                4 accelerate / axolotl / LLaMA-Factory YAML (the same)
--                5 architecture script, then "\n--@model\n" and a model
--                  script whose family names all mean that architecture
local home, dir = ...

local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local models = require("vramplan.models")
local recipes = require("vramplan.recipes")
local sandbox = require("vramplan.sandbox")

-- the importers warn on stderr about keys they do not model: not here
-- (VRAMPLAN_FUZZ_DEBUG=1 prints each input's outcome, to see what a seed reaches)
local debug_out = os.getenv("VRAMPLAN_FUZZ_DEBUG") and io.stderr
io.stderr = { write = function(self) return self end }

-- Scripts get a smaller budget than the command's (2e8 instructions, 512
-- MiB), so that an endless loop costs a fraction of a second, not two. The
-- memory budget is 16 MiB (a model or recipe script uses well under one):
-- string.rep builds its result a piece at a time, each piece a memcpy that
-- AddressSanitizer checks, so filling 64 MiB that way took 13-17 s of one
-- input (tests/fuzz/regressions/pcall-catches-memory-budget), near the
-- 25 s timeout on a loaded machine; 16 MiB takes a quarter of that.
local run_script = vramplan.run_script
vramplan.run_script = function(path, env) return run_script(path, env, 5000000, 16 << 20) end

-- the YAML configs name DeepSpeed files beside them or in a folder above:
-- the fixtures' are there (the YAML itself is written to y/config.yaml)
local fixtures = home .. "/tests/fixtures/configs"
os.execute(string.format("mkdir -p '%s/models/arch' '%s/y' '%s/examples' && cp -r '%s/accelerate/examples/" ..
  "deepspeed_config_templates' '%s/' && cp -r '%s/llamafactory/examples/deepspeed' '%s/examples/'",
  dir, dir, dir, fixtures, dir, fixtures, dir))

local function write(name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

-- a small model and recipe for the estimates
local small_model = arch.build(models.describe(home, "smollm2-135m"))
local small_recipe = recipes.load(home .. "/scripts/recipes/full-bf16-adamw.lua")

local function estimate(model, keys)
  vramplan.estimate(model, keys, nil, { fold = true })
end

local function model_then_estimate(description)
  local model = arch.build(description)
  estimate(model, small_recipe)
end

local function recipe_then_estimate(path)
  local keys, origins, imported = recipes.load(path)
  recipes.normalize(keys, origins, imported, nil)
  recipes.check(keys, origins)
  estimate(small_model, keys)
end

-- arch.lua's text, run afresh for each architecture input: its cache of
-- loaded families must not keep one input's family for the next
local arch_chunk = assert(loadfile(package.searchpath("vramplan.arch", package.path), "t"))

local function architecture(text)
  local arch_text, model_text = text:match("^(.-)\n%-%-@model\n(.*)$")
  if not arch_text then arch_text, model_text = text, "return fz { }" end
  write("models/arch/fz.lua", arch_text)
  local fresh = arch_chunk("vramplan.arch")
  local family = fresh.load(dir, "fz")
  if not family then return end
  local env = setmetatable(sandbox.env(), {
    __index = function(_, name)
      if type(name) == "string" and name:match("^[%w_]+$") then
        return fresh.located(family, fresh.call_site(2))
      end
    end,
  })
  local description = sandbox.run(write("model.lua", model_text), env)
  if not fresh.is_description(description) then return end
  estimate(fresh.build(description), small_recipe)
end

local modes = {
  [0] = function(text) model_then_estimate(models.describe(home, write("config.json", text))) end,
  [1] = function(text) model_then_estimate(models.describe(home, write("model.lua", text))) end,
  [2] = function(text) recipe_then_estimate(write("recipe.lua", text)) end,
  [3] = function(text) recipe_then_estimate(write("ds.json", text)) end,
  [4] = function(text) recipe_then_estimate(write("y/config.yaml", text)) end,
  [5] = architecture,
}

-- One input must not change what the next one sees, or a finding would need
-- the inputs before it to reproduce: after each input, every table reachable
-- from package.loaded (each module's table and the tables in it, the globals
-- and the standard libraries among them) must hold the same fields as
-- before. A module loaded for the first time during an input joins the
-- watch; a changed field is a finding, reported on the input that made it
-- (run returns the message and the C half aborts). Upvalues (a module's
-- private caches) are not reached: the cache that matters, arch.lua's
-- loaded families, is made afresh for the architecture inputs above.
local watched, where = {}, {}
local function watch(t, path)
  if watched[t] then return end
  local fields = {}
  watched[t], where[t] = fields, path
  for k, v in next, t do
    fields[k] = v
    if type(v) == "table" then watch(v, path .. "." .. tostring(k)) end
    if type(k) == "table" then watch(k, path .. "[key]") end
  end
end

local function watch_new_modules()
  watched[package.loaded] = nil -- it grows as modules load; its entries are watched
  for name, m in pairs(package.loaded) do
    if type(m) == "table" then watch(m, name) end
  end
  watched[package.loaded] = false
end

local function changed_state()
  for t, fields in next, watched do
    if fields then
      for k, v in next, fields do
        if rawget(t, k) ~= v then return string.format("%s.%s changed", where[t], tostring(k)) end
      end
      for k in next, t do
        if fields[k] == nil then return string.format("%s.%s added", where[t], tostring(k)) end
      end
    end
  end
  for name, m in pairs(package.loaded) do
    if type(m) == "table" and watched[m] == nil then
      -- a module loaded during the input is new; one that replaced a watched module is not
      for t, _ in next, watched do
        if where[t] == name then return string.format("package.loaded[%q] was replaced", name) end
      end
    end
  end
end

watch_new_modules()

return function(selector, text)
  local ok, err = pcall(modes[selector % 6], text)
  if debug_out then
    debug_out:write(string.format("mode %d (Lua heap %.0f KiB): %s\n", selector % 6, collectgarbage("count"),
      ok and "ok" or tostring(err)))
  end
  local change = changed_state()
  watch_new_modules()
  return change
end
