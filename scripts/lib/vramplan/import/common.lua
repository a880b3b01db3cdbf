-- vramplan.import.common — what the config importers share: reading a file,
-- byte offsets as line and column, the line a nested key is written on,
-- and a recipe under construction (keys, where each was set, what the
-- file holds that vramplan does not model).
local common = {}

function common.read(path)
  local f = io.open(path, "r")
  if not f then error("cannot open recipe " .. path, 0) end
  local text = f:read("a")
  f:close()
  return text
end

-- The line and column (both from 1) of byte `offset` of `text`.
function common.position(text, offset)
  local line, start = 1, 1
  for nl in text:sub(1, math.max(offset - 1, 0)):gmatch("()\n") do
    line, start = line + 1, nl + 1
  end
  return line, offset - start + 1
end

local function escape(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- The line where the key path { "zero_optimization", "stage" } is written:
-- each name looked for (as a quoted JSON key or a YAML key) after the one
-- before it; nil when not found.
function common.line_of(text, path)
  local from = 1
  for _, name in ipairs(path) do
    local n = escape(tostring(name))
    local at = text:find('"' .. n .. '"%s*:', from) or text:find("'" .. n .. "'%s*:", from)
      or text:find("%f[%w_%-]" .. n .. "%s*:", from)
    if not at then return nil end
    from = at + 1
  end
  return (common.position(text, from - 1))
end

-- A recipe under construction from the file at `path` (its text `text`).
function common.recipe(path, text)
  local r = { path = path, text = text, keys = {}, origins = {}, unmodelled = {}, deferred = {} }

  -- "file:line" of a key path, or the file's name alone
  function r.where(keypath)
    local line = keypath and common.line_of(text, keypath)
    return line and (path .. ":" .. line) or path
  end

  -- Sets a recipe key from the key path where the file holds it; a key
  -- already set is kept unless `override`.
  function r.set(key, value, keypath, override, note)
    if r.keys[key] ~= nil and not override then return end
    r.keys[key] = value
    r.origins[key] = r.where(keypath) .. (note and (" (" .. note .. ")") or "")
  end

  -- A key the file sets that vramplan does not model, named as a dotted path.
  function r.skip(keypath)
    r.unmodelled[#r.unmodelled + 1] = table.concat(keypath, ".")
  end

  return r
end

-- Prints one warning listing the keys of a file that were not modelled.
function common.warn(r, tool)
  if #r.unmodelled == 0 then return end
  table.sort(r.unmodelled)
  io.stderr:write(string.format("vramplan: warning: %s: %s keys not modelled (no effect on the estimate): %s\n",
    r.path, tool, table.concat(r.unmodelled, ", ")))
end

-- True when `value` is the string "auto" (resolved from the rest of the run).
function common.is_auto(value) return type(value) == "string" and value:lower() == "auto" end

-- A JSON or YAML number as a Lua number (5e8 is an integer count of elements).
function common.count(value)
  local n = tonumber(value)
  if n and n == math.floor(n) and math.abs(n) < 2 ^ 53 then return math.tointeger(n) end
  return n
end

return common
