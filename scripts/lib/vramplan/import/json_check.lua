-- vramplan.import.json_check — a strict reading of JSON's grammar (RFC 8259)
-- that finds the first byte where a file stops being JSON. dkjson, which
-- decodes the values, forgives a missing comma or colon and trailing
-- commas; a DeepSpeed config with them fails in Python's json, so vramplan
-- refuses it too, at that byte.
local check = {}

local function fail(at, message) error({ at = at, message = message }, 0) end

local function skip_space(text, i)
  return text:find("[^ \t\r\n]", i) or #text + 1
end

local value

local function string_at(text, i)
  -- text:sub(i, i) == '"'
  local j = i + 1
  while true do
    local c = text:sub(j, j)
    if c == "" then fail(i, "unterminated string") end
    if c == '"' then return j + 1 end
    if c == "\\" then
      local e = text:sub(j + 1, j + 1)
      if e == "u" then
        if not text:sub(j + 2, j + 5):match("^%x%x%x%x$") then fail(j, "bad \\u escape") end
        j = j + 6
      elseif e ~= "" and ('"\\/bfnrt'):find(e, 1, true) then
        j = j + 2
      else
        fail(j, "bad escape in a string")
      end
    elseif c:byte() < 32 then
      fail(j, "control character in a string")
    else
      j = j + 1
    end
  end
end

local function number_at(text, i)
  local j = i
  if text:sub(j, j) == "-" then j = j + 1 end
  local int = text:match("^%d+", j)
  if not int then fail(i, "no valid JSON value") end
  if #int > 1 and int:sub(1, 1) == "0" then fail(i, "a number may not start with 0") end
  j = j + #int
  if text:sub(j, j) == "." then
    local frac = text:match("^%d+", j + 1)
    if not frac then fail(j, "digits must follow the decimal point") end
    j = j + 1 + #frac
  end
  if text:sub(j, j):match("[eE]") then
    local exp = text:match("^[+-]?%d+", j + 1)
    if not exp then fail(j, "digits must follow the exponent") end
    j = j + 1 + #exp
  end
  return j
end

local function sequence(text, i, close, item)
  -- text:sub(i, i) is the opening bracket
  local j = skip_space(text, i + 1)
  if text:sub(j, j) == close then return j + 1 end
  while true do
    j = item(text, j)
    j = skip_space(text, j)
    local c = text:sub(j, j)
    if c == close then return j + 1 end
    if c ~= "," then fail(j, c == "" and "unexpected end of the file" or ("expected ',' or '" .. close .. "'")) end
    j = skip_space(text, j + 1)
    if text:sub(j, j) == close then fail(j, "a trailing comma") end
  end
end

-- An object's member; `seen` holds the object's keys so far (DeepSpeed
-- loads its config with a hook that refuses a key given twice).
local function member(text, j, seen)
  if text:sub(j, j) ~= '"' then fail(j, "expected a quoted key") end
  local after = string_at(text, j)
  local key = text:sub(j, after - 1)
  if seen[key] then fail(j, "duplicate key " .. key .. " (DeepSpeed refuses it)") end
  seen[key] = true
  j = skip_space(text, after)
  if text:sub(j, j) ~= ":" then fail(j, "expected ':' after the key") end
  return value(text, skip_space(text, j + 1))
end

function value(text, i)
  local c = text:sub(i, i)
  if c == "{" then
    local seen = {}
    return sequence(text, i, "}", function(t, j) return member(t, j, seen) end)
  end
  if c == "[" then return sequence(text, i, "]", function(t, j) return value(t, j) end) end
  if c == '"' then return string_at(text, i) end
  for _, word in ipairs({ "true", "false", "null" }) do
    if text:sub(i, i + #word - 1) == word then return i + #word end
  end
  if c == "" then fail(i, "unexpected end of the file") end
  return number_at(text, i)
end

-- nil when `text` is one JSON value; else the byte offset of the first
-- problem and what it is.
function check.problem(text)
  local ok, err = pcall(function()
    local j = skip_space(text, value(text, skip_space(text, 1)))
    if j <= #text then fail(j, "unexpected text after the JSON value") end
  end)
  if ok then return nil end
  if type(err) ~= "table" then error(err, 0) end
  return err.at, err.message
end

return check
