-- vramplan.files — the folders of scripts: which exist, and their names.
local lfs = require("lfs")

local files = {}

function files.is_file(path) return lfs.attributes(path, "mode") == "file" end

-- The names of the Lua scripts in a folder (file names without .lua), sorted.
function files.script_names(dir)
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
