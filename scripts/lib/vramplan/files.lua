-- vramplan.files — the folders of scripts (which exist, their names) and the
-- one file a command writes.
local vramplan = require("vramplan")

local files = {}

-- (the core's stat: loading LuaFileSystem, a shared library, is a good
-- part of a command's start-up; folders are listed with it when asked)
files.is_file = vramplan.is_file

-- Where models, families, recipes and hardware are looked up, first to last:
-- the folders of `--path DIR` (the command line puts them in
-- vramplan.search_path), those of $VRAMPLAN_PATH (colon-separated), then
-- the installation's own (`home`). Each folder is laid out as the
-- installation is: models/, models/arch/, models/blocks/, scripts/recipes/ (or recipes/),
-- hardware/gpus|nodes|instances/.
function files.roots(home)
  local roots, seen = {}, {}
  local function add(dir)
    if dir and dir ~= "" and not seen[dir] then
      seen[dir] = true
      roots[#roots + 1] = dir
    end
  end
  for _, dir in ipairs(vramplan.search_path or {}) do add(dir) end
  for dir in (os.getenv("VRAMPLAN_PATH") or ""):gmatch("[^:]+") do add(dir) end
  add(home)
  return roots
end

-- The first ROOT/SUBDIR/NAME.lua over the roots (any of `subdirs`, a list
-- or one), or nil.
function files.find(home, subdirs, name)
  if type(subdirs) == "string" then subdirs = { subdirs } end
  for _, root in ipairs(files.roots(home)) do
    for _, subdir in ipairs(subdirs) do
      local path = root .. "/" .. subdir .. "/" .. name .. ".lua"
      if files.is_file(path) then return path end
    end
  end
end

-- A script beside the file that names it (NEAR/SUB/NAME.lua, then
-- NEAR/NAME.lua, when `near` is given), else files.find(home, under, name).
function files.find_near(home, near, sub, under, name)
  if near then
    for _, path in ipairs({ near .. "/" .. sub .. "/" .. name .. ".lua", near .. "/" .. name .. ".lua" }) do
      if files.is_file(path) then return path end
    end
  end
  return files.find(home, under, name)
end

-- The script names in SUBDIR over every root, sorted, each once.
function files.names(home, subdirs)
  if type(subdirs) == "string" then subdirs = { subdirs } end
  local names, seen = {}, {}
  for _, root in ipairs(files.roots(home)) do
    for _, subdir in ipairs(subdirs) do
      for _, n in ipairs(files.script_names(root .. "/" .. subdir)) do
        if not seen[n] then
          seen[n] = true
          names[#names + 1] = n
        end
      end
    end
  end
  table.sort(names)
  return names
end

-- The folder a file is in ("." for a bare name).
function files.dirname(path) return path:match("^(.*)/[^/]*$") or "." end

-- The names of the Lua scripts in a folder (file names without .lua), sorted.
-- Writes `text` to the file the user named, and nowhere else; a path that
-- cannot be written is the user's error, in one line.
function files.write(path, text)
  local f, err = io.open(path, "wb")
  if not f then error("cannot write " .. (err or path), 0) end
  local ok, werr = f:write(text)
  f:close()
  if not ok then error("cannot write " .. path .. ": " .. tostring(werr), 0) end
end

function files.script_names(dir)
  local lfs = require("lfs")
  local names = {}
  if lfs.attributes(dir, "mode") ~= "directory" then return names end
  for entry in lfs.dir(dir) do
    local name = entry:match("^(.+)%.lua$")
    if name then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

return files
