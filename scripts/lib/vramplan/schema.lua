-- vramplan.schema — configuration fields declared once, as data: type,
-- range, default, documentation. Validates a table (and --set strings),
-- fills defaults, and names the field and where it was set on any error.
local schema = {}

local function suggest(word, names)
  local best, best_d = nil, 3
  for _, name in ipairs(names) do
    -- edit distance, small words only. It is at least the difference in
    -- length, so a name that much longer or shorter is not compared: a
    -- long word costs a length check per name, not #word * #name steps
    -- (a 2,000-letter field name took 9 s, found by fuzzing)
    local a, b = word, name
    if math.abs(#a - #b) < best_d then
      local prev = {}
      for j = 0, #b do prev[j] = j end
      for i = 1, #a do
        local cur = { [0] = i }
        for j = 1, #b do
          local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
          cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        end
        prev = cur
      end
      if prev[#b] < best_d then best, best_d = name, prev[#b] end
    end
  end
  return best
end
schema.suggest = suggest

-- Names worth offering for a mistyped one, best first (at most four):
-- those that contain it, letters and digits only and case aside (a100 ->
-- a100-40gb and a100-80gb, 4090 -> rtx4090), before those a typo or two
-- away (a10g is one edit from a100, but a different GPU).
function schema.suggest_names(word, names)
  local function plain(s) return (s:lower():gsub("[^%w]", "")) end
  local w = plain(word)
  local found = {}
  if #w >= 2 then
    for _, name in ipairs(names) do
      if plain(name):find(w, 1, true) then found[#found + 1] = name end
    end
  end
  if #found == 0 then
    local close = suggest(word:lower(), names)
    if close then found[1] = close end
  end
  -- where the word starts, then alphabetical (rtx4090 before the nodes
  -- named after it, h100-80gb before h100-nvl)
  local function rank(name) return plain(name):find(w, 1, true) or 0 end
  table.sort(found, function(a, b)
    if rank(a) ~= rank(b) then return rank(a) < rank(b) end
    return a < b
  end)
  return table.move(found, 1, math.min(#found, 4), 1, {})
end

-- " (did you mean 'a' or 'b'?)" for schema.suggest_names' list, or "".
function schema.did_you_mean(list)
  if #list == 0 then return "" end
  local quoted = {}
  for i, n in ipairs(list) do quoted[i] = "'" .. n .. "'" end
  local last = table.remove(quoted)
  return " (did you mean " .. (#quoted > 0 and (table.concat(quoted, ", ") .. " or ") or "") .. last .. "?)"
end

-- A value as an error message shows it: a string as it is unless blank
-- (then quoted, to stay visible), a table (a config.json's array or
-- object) by its kind, not its address.
local function shown(v)
  if type(v) == "string" then return v:find("^%s*$") and string.format("%q", v) or v end
  if type(v) == "table" then
    return next(v) == nil and "an empty list or object" or (v[1] ~= nil and "a list" or "an object")
  end
  return tostring(v)
end
schema.shown = shown

-- Converts v to the field's type; returns the value or nil and a message.
local function coerce(field, v)
  local kind = field.type
  if kind == "int" then
    local n = math.tointeger(tonumber(v))
    if not n then return nil, "must be a whole number (got " .. shown(v) .. ")" end
    local min, max = field.min or 1, field.max or 2 ^ 40
    if n < min or n > max then
      return nil, string.format("must be between %s and %s (got %d)", min, math.floor(max), n)
    end
    return n
  elseif kind == "number" then
    local n = tonumber(v)
    if not n or n ~= n then return nil, "must be a number (got " .. shown(v) .. ")" end
    if (field.min and n < field.min) or (field.max and n > field.max) then
      return nil, string.format("must be between %s and %s (got %s)", field.min or "-inf", field.max or "inf", n)
    end
    return n
  elseif kind == "bool" then
    if v == true or v == "true" then return true end
    if v == false or v == "false" then return false end
    return nil, "must be true or false (got " .. shown(v) .. ")"
  elseif kind == "string" then
    if type(v) ~= "string" then return nil, "must be a string (got " .. shown(v) .. ")" end
    if field.options then
      for _, o in ipairs(field.options) do if o == v then return v end end
      return nil, "must be one of " .. table.concat(field.options, ", ") .. " (got " .. shown(v) .. ")"
    end
    return v
  end
  error("schema: unknown field type " .. tostring(kind))
end

local field_types = { int = true, number = true, bool = true, string = true }

-- What is wrong with one declaration, or nil.
function schema.declaration_problem(d)
  if type(d) ~= "table" then return "must be a table { name, type, ... }" end
  if type(d[1]) ~= "string" or not d[1]:match("^[%a_][%w_]*$") then
    return "its name must be a word (got " .. shown(d[1]) .. ")"
  end
  if not field_types[d[2]] then
    return d[1] .. ": type must be int, number, bool or string (got " .. shown(d[2]) .. ")"
  end
  for _, bound in ipairs({ "min", "max" }) do
    local v = d[bound]
    if v ~= nil and (type(v) ~= "number" or v ~= v) then return d[1] .. ": " .. bound .. " must be a number" end
  end
  if d.options ~= nil then
    if type(d.options) ~= "table" or #d.options == 0 then return d[1] .. ": options must be a list of names" end
    for _, o in ipairs(d.options) do
      if type(o) ~= "string" then return d[1] .. ": options must be a list of names" end
    end
  end
  if d.doc ~= nil and type(d.doc) ~= "string" then return d[1] .. ": doc must be a string" end
end

-- A schema from a list of declarations { name, type, default=, min=, max=,
-- options=, doc= }; defaults may be functions of the fields before them.
-- Declarations from scripts are checked first (schema.declaration_problem,
-- which arch.lua calls with the script's place of each).
function schema.new(title, declarations)
  local s = { title = title, fields = {}, order = {} }
  for _, d in ipairs(declarations) do
    local f = { name = d[1], type = d[2], default = d.default, min = d.min, max = d.max,
                options = d.options, doc = d.doc or "" }
    s.fields[f.name] = f
    s.order[#s.order + 1] = f.name
  end
  return s
end

function schema.has(s, name) return s.fields[name] ~= nil end

-- Checks `values` (name -> value) whose origins (name -> "file:line" or
-- "--set k=v") say where each came from; returns the complete config.
function schema.resolve(s, values, origins, where)
  local config = {}
  for name, v in pairs(values) do
    if type(name) ~= "string" then
      error(string.format("%s: %s fields are named (key = value)", where, s.title), 0)
    end
    local field = s.fields[name]
    if not field then
      local guess = suggest(name, s.order) or schema.suggest_names(name, s.order)[1]
      error(string.format("%s: unknown field '%s' in %s%s", origins[name] or where, name, s.title,
        guess and (" (did you mean '" .. guess .. "'?)") or ""), 0)
    end
    local value, problem = coerce(field, v)
    if problem then error(string.format("%s: %s: %s", origins[name] or where, name, problem), 0) end
    config[name] = value
  end
  for _, name in ipairs(s.order) do
    local field = s.fields[name]
    if config[name] == nil then
      local d = field.default
      if type(d) == "function" then d = d(config) end
      if d == nil then
        error(string.format("%s: %s needs field '%s' (%s)", where, s.title, name, field.doc), 0)
      end
      config[name] = d
    end
  end
  return config
end

return schema
