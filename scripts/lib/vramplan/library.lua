-- vramplan.library — libraries of block pieces shared between scripts:
-- `local L = library "name"` in an architecture, blocks or library script
-- runs NAME.lua (beside that script: lib/NAME.lua, then NAME.lua; then
-- models/lib/NAME.lua over the search path, files.roots) in the sandbox,
-- once per process, and hands each call a read-only view of the table it
-- returns (docs/writing-blocks.md, "Libraries of block pieces").
local files = require("vramplan.files")
local sandbox = require("vramplan.sandbox")

local library = {}

function library.find(home, name, near) return files.find_near(home, near, "lib", "models/lib", name) end

-- A view of `t` that reads through to it (tables within it as views of
-- their own) and refuses writes: no user changes a library for the
-- scripts that run after it. `rawset` on a view changes that view alone.
local function view(t, what)
  local views = {}
  local function wrap(k, v)
    if type(v) ~= "table" then return v end
    if not views[k] then views[k] = view(v, what .. "." .. tostring(k)) end
    return views[k]
  end
  return setmetatable({}, {
    __index = function(_, k) return wrap(k, t[k]) end,
    __newindex = function(_, k)
      error(string.format("%s is read-only (setting '%s')", what, tostring(k)), 2)
    end,
    __pairs = function()
      return function(_, k)
        local nk, nv = next(t, k)
        return nk, wrap(nk, nv)
      end, nil, nil
    end,
    __len = function() return #t end,
  })
end

-- The libraries of one process: arch.lua makes one beside its cache of
-- families (the fuzzer runs arch.lua afresh per input, and these with it).
function library.new()
  -- path -> { value = the library's table } or { err = why it did not load };
  -- a failure is kept too, so that a script catching it (pcall) cannot make
  -- the library run again: each file runs at most once, under its own budget
  local loaded = {}
  local loading = {} -- the paths being loaded now, outermost first
  local uses = {}    -- a requiring file -> { { name =, path = }, ... } in first-use order
  local self = {}

  -- library "name" as `user` (the requiring file) called it at `where`
  -- ("file:line"); make_env(path, home) builds a library's environment.
  function self.use(home, user, where, name, make_env)
    if type(name) ~= "string" or not name:match("^[%a_][%w_%-]*$") then
      error(string.format("%s: library: takes a library's name (letters, digits, '_' and '-'), got %s", where,
        type(name) == "string" and ("'" .. name .. "'") or type(name)), 0)
    end
    local path = library.find(home, name, files.dirname(user))
    if not path then
      error(string.format("%s: library '%s': no such file (lib/%s.lua or %s.lua beside %s, or models/lib/%s.lua "
        .. "on the search path)", where, name, name, name, user, name), 0)
    end
    local list = uses[user] or {}
    uses[user] = list
    local listed = false
    for _, u in ipairs(list) do listed = listed or u.path == path end
    if not listed then list[#list + 1] = { name = name, path = path } end
    for i, p in ipairs(loading) do
      if p == path then
        local chain = {}
        for j = i, #loading do chain[#chain + 1] = loading[j] end
        chain[#chain + 1] = path
        error(string.format("%s: library '%s': a cycle of libraries: %s", where, name, table.concat(chain, " -> ")), 0)
      end
    end
    local entry = loaded[path]
    if not entry then
      loading[#loading + 1] = path
      local ok, value = pcall(sandbox.run, path, make_env(path, home))
      loading[#loading] = nil
      if ok and type(value) ~= "table" then
        ok, value = false, path .. ": a library returns a table of its pieces ({ rms_norm = function ... end, ... })"
      end
      entry = ok and { value = value } or { err = tostring(value) }
      loaded[path] = entry
    end
    if entry.err then error(string.format("%s: library '%s': %s", where, name, entry.err), 0) end
    return view(entry.value, string.format("library '%s' (%s)", name, path))
  end

  -- The libraries the files of `paths` use, and those they use in turn:
  -- { { name =, source = its file, used_by = the file that first named it },
  -- ... }, each library once, in first-use order.
  function self.used_by(paths)
    local out, seen = {}, {}
    local function walk(user)
      for _, u in ipairs(uses[user] or {}) do
        if not seen[u.path] then
          seen[u.path] = true
          out[#out + 1] = { name = u.name, source = u.path, used_by = user }
          walk(u.path)
        end
      end
    end
    for _, p in ipairs(paths) do if p then walk(p) end end
    return out
  end

  return self
end

return library
