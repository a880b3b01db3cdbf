-- vramplan.sandbox — environments for shared scripts: the safe parts of the
-- standard library and the names the caller adds, nothing else (no io, os,
-- load, require, debug, metatables or coroutines).
local vramplan = require("vramplan")

local sandbox = {}

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local safe_globals = {
  "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring",
  "type", "rawequal", "rawlen", "rawget", "rawset",
}

-- A fresh environment holding the safe globals, copies of math, string
-- (its matching functions bounded, string.dump removed), table and utf8,
-- and `names`.
function sandbox.env(names)
  local env = {}
  for _, name in ipairs(safe_globals) do env[name] = _G[name] end
  -- pcall and xpcall that cannot catch the error of a spent budget
  env.pcall, env.xpcall = vramplan.script_pcall, vramplan.script_xpcall
  env.math = copy(math)
  env.string = copy(vramplan.script_string()) -- find, match, gmatch, gsub bounded
  env.string.dump = nil
  env.table = copy(table)
  env.utf8 = copy(utf8)
  for k, v in pairs(names or {}) do env[k] = v end
  return env
end

-- Adds constructors that learn where the script called them: each
-- constructors[name](where, ...) gets "file:line" of the line that named
-- it, which survives the tail call of `return name { ... }`. `lazy` (if
-- given) maps further names to functions that make their value the first
-- time a script reads the name (a library few scripts need is loaded only
-- for those).
function sandbox.located(env, constructors, lazy)
  return setmetatable(env, {
    __index = function(t, name)
      local make = constructors[name]
      if make then
        local info = debug.getinfo(2, "Sl")
        local where = info and info.currentline > 0 and (info.short_src .. ":" .. info.currentline) or "?"
        return function(...) return make(where, ...) end
      end
      local value = lazy and lazy[name] and lazy[name]()
      if value ~= nil then rawset(t, name, value) end
      return value
    end,
  })
end

-- Runs a script file in `env` under the instruction and memory budgets.
function sandbox.run(path, env)
  return vramplan.run_script(path, env)
end

-- Calls a function a script defined, under the same budgets.
function sandbox.call(fn, arg)
  return vramplan.call_budgeted(fn, arg)
end

return sandbox
