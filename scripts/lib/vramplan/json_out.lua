-- vramplan.json_out — dkjson's encoding with a key order, byte for byte
-- (json_out.encode(value, order, indent) is dkjson.encode(value, { indent
-- = indent, keyorder = order })), taking the short way for what the
-- estimate's objects hold: objects of string keys, arrays 1..n, numbers,
-- booleans, plain strings and JSON null. Anything else (a metatable, a
-- sparse or mixed table, a string to escape, a locale's decimal comma) is
-- handed to dkjson at its depth. dkjson spends most of `estimate --json`'s
-- time on escaping checks and on every key of the order for every object;
-- tests/lua/json_out_spec.lua compares the two.
local dkjson = require("dkjson")

local json_out = {}

local null = dkjson.null
local huge = math.huge
local rep, find, type, tostring, next, getmetatable = string.rep, string.find, type, tostring, next, getmetatable

-- What dkjson's quotestring changes: control characters, quotes,
-- backslash, DEL, and lead bytes of the Unicode characters it escapes.
local NEEDS_ESCAPE = '[%z\1-\31"\\\127\194\216\220\225\226\239]'

-- "object" (string keys but for `n`), "array" (keys 1..n) or nil (dkjson's).
local function shape(t)
  local n, strings = 0, false
  for k in pairs(t) do
    local tk = type(k)
    if tk == "string" then
      if k == "n" then return nil end -- dkjson's array length key
      strings = true
    elseif math.type(k) == "integer" and k >= 1 then
      n = n + 1
    else
      return nil
    end
  end
  if strings then return n == 0 and "object" or nil end
  return n == #t and "array" or nil
end

local encode

-- dkjson's own encoding of `value` at `level`, appended to `out`.
local function by_dkjson(value, order, indent, level, out)
  out[#out + 1] = dkjson.encode(value, { indent = indent, keyorder = order, level = level })
end

-- The tables being encoded (a table met again inside itself is a cycle:
-- dkjson names it)
local open = {}

encode = function(value, order, indent, level, out)
  local t = type(value)
  if t == "string" then
    if find(value, NEEDS_ESCAPE) then by_dkjson(value, order, indent, level, out)
    else out[#out + 1] = '"' .. value .. '"' end
  elseif t == "number" then
    if value ~= value or value >= huge or -value >= huge then
      out[#out + 1] = "null"
    else
      local s = tostring(value)
      if find(s, "[^%d%.eE%+%-]") then by_dkjson(value, order, indent, level, out)
      else out[#out + 1] = s end
    end
  elseif t == "boolean" then
    out[#out + 1] = value and "true" or "false"
  elseif value == null then
    out[#out + 1] = "null"
  elseif t == "table" and getmetatable(value) == nil and not open[value] then
    if next(value) == nil then
      out[#out + 1] = "[]"
      return
    end
    local kind = shape(value)
    open[value] = kind ~= nil or nil
    if kind == "array" then
      out[#out + 1] = "["
      for i = 1, #value do
        if i > 1 then out[#out + 1] = "," end
        encode(value[i], order, indent, level + 1, out)
      end
      out[#out + 1] = "]"
    elseif kind == "object" then
      local inner = level + 1
      local newline = indent and ("\n" .. rep("  ", inner)) or nil
      out[#out + 1] = "{"
      local used, first = {}, true
      local function pair(k, v)
        if not first then out[#out + 1] = "," end
        first = false
        if newline then out[#out + 1] = newline end
        if find(k, NEEDS_ESCAPE) then by_dkjson(k, order, indent, inner, out) else out[#out + 1] = '"' .. k .. '"' end
        out[#out + 1] = ":"
        encode(v, order, indent, inner, out)
      end
      for i = 1, order and #order or 0 do
        local k = order[i]
        local v = value[k]
        if v ~= nil then
          used[k] = true
          pair(k, v)
        end
      end
      for k, v in pairs(value) do
        if not used[k] then pair(k, v) end
      end
      if indent then out[#out + 1] = "\n" .. rep("  ", level) end
      out[#out + 1] = "}"
    else
      by_dkjson(value, order, indent, level, out)
    end
    open[value] = nil
  else
    by_dkjson(value, order, indent, level, out)
  end
end

-- dkjson.encode(value, { indent = indent, keyorder = order }), the text.
function json_out.encode(value, order, indent)
  local out = {}
  local ok, err = pcall(encode, value, order, indent or nil, 0, out)
  if not ok then
    open = {}
    error(err, 2)
  end
  return table.concat(out)
end

return json_out
