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

-- The origin of each key of a table a script passed to a constructor called
-- at `where` ("file:line"): "file:N" for the first line from there on that
-- writes `key =`, so that an error names the field's own line; `where` for
-- a key the text does not show (computed, quoted) or a file that cannot be
-- read again (a name Lua shortened with "..."). Plain searches only: the
-- strings' pattern matching is budgeted for scripts, and a script's line
-- may be long.
local function is_word_byte(b)
  return b and (b == 95 or (b >= 48 and b <= 57) or (b >= 65 and b <= 90) or (b >= 97 and b <= 122))
end

-- Does `line` (before any comment) assign the field `key` (key, spaces, "=" but not "==")?
local function assigns(line, key)
  local comment = line:find("--", 1, true)
  local from = 1
  while true do
    local s, e = line:find(key, from, true)
    if not s or (comment and s > comment) then return false end
    local i = e + 1
    while line:byte(i) == 32 or line:byte(i) == 9 do i = i + 1 end
    if not is_word_byte(line:byte(s - 1)) and line:byte(i) == 61 and line:byte(i + 1) ~= 61 then return true end
    from = e + 1
  end
end

function sandbox.field_origins(where, keys)
  local origins = {}
  for k in pairs(keys) do origins[k] = where end
  local file, start = tostring(where):match("^(.*):(%d+)$")
  local f = file and file:sub(1, 3) ~= "..." and io.open(file, "r")
  if not f then return origins end
  local lines = {}
  for line in f:lines() do lines[#lines + 1] = line end
  f:close()
  for k in pairs(keys) do
    if type(k) == "string" and #k > 0 and #k <= 128 then
      for n = math.tointeger(tonumber(start)), #lines do
        if assigns(lines[n], k) then
          origins[k] = file .. ":" .. n
          break
        end
      end
    end
  end
  return origins
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
