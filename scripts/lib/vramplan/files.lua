-- vramplan.files — the folders of scripts (which exist, their names) and the
-- one file a command writes.
local lfs = require("lfs")

local files = {}

function files.is_file(path) return lfs.attributes(path, "mode") == "file" end

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
