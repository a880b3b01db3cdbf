-- The README and docs/ link only inside the repository (issue 20: "No link
-- leaves the repository"): every relative link names a file or folder that
-- exists, without climbing out of the tree; web links (sources) are allowed.
local helper = require("tests.lua.helper")
local lfs = require("lfs")

local function read(path)
  local f = assert(io.open(path, "r"))
  local s = f:read("a")
  f:close()
  return s
end

-- the markdown files a user reads: README.md and docs/*.md
local function pages()
  local list = {"README.md"}
  for name in lfs.dir(helper.root .. "/docs") do
    if name:match("%.md$") then list[#list + 1] = "docs/" .. name end
  end
  table.sort(list)
  return list
end

-- the link targets of [text](target) outside code spans and blocks
local function links(text)
  local found = {}
  text = text:gsub("```.-```", ""):gsub("`[^`\n]*`", "")
  for target in text:gmatch("%]%(([^)%s]+)%)") do found[#found + 1] = target end
  return found
end

-- a relative path joined to its page's folder, "." and ".." resolved; nil
-- when it climbs above the repository's root
local function resolve(folder, target)
  local parts = {}
  for part in (folder .. "/" .. target):gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return table.concat(parts, "/")
end

describe("the README's and docs' links", function()
  it("are found (the scan sees the README's links to docs/)", function()
    assert.is_true(#links(read(helper.root .. "/README.md")) > 10)
  end)

  for _, page in ipairs(pages()) do
    it("in " .. page .. " stay inside the repository and name what exists", function()
      local folder = page:match("^(.*)/") or "."
      for _, target in ipairs(links(read(helper.root .. "/" .. page))) do
        if not target:match("^https?://") and not target:match("^#") then
          local path = target:gsub("#.*$", "")
          assert.is_nil(path:match("^/"), page .. ": an absolute link " .. target)
          local inside = resolve(folder, path)
          assert.is_not_nil(inside, page .. ": " .. target .. " leaves the repository")
          assert.is_not_nil(lfs.attributes(helper.root .. "/" .. inside),
            page .. ": " .. target .. " names nothing (" .. inside .. ")")
        end
      end
    end)
  end
end)
