-- vramplan.csv — RFC 4180 rows: a field holding a comma, a quote or a line
-- break is quoted, its quotes doubled; lines end in CRLF-free "\n" (the
-- sweep's fields never hold line breaks, so one row is one line and files
-- can be read back line by line).
local csv = {}

-- One value as a CSV field: nil (and JSON null) empty, integers exact,
-- other numbers with the digits that read back equal.
function csv.field(v)
  local t = type(v)
  if v == nil or t == "function" or t == "userdata" then return "" end
  if t == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%.1f", v) end
    -- the shortest of 15 or 17 digits that reads back equal: 0.05, not 0.050000000000000003
    local short = string.format("%.15g", v)
    return tonumber(short) == v and short or string.format("%.17g", v)
  end
  local s = tostring(v)
  if s:find('[,"\r\n]') then return '"' .. s:gsub('"', '""') .. '"' end
  return s
end

-- A list of `n` values as one line (without its end).
function csv.line(values, n)
  local fields = {}
  for i = 1, n or #values do fields[i] = csv.field(values[i]) end
  return table.concat(fields, ",")
end

-- The fields of one line (quoted fields unquoted), or nil and a message.
function csv.parse(line)
  local fields, i = {}, 1
  while true do
    if line:sub(i, i) == '"' then
      local parts, j = {}, i + 1
      while true do
        local q = line:find('"', j, true)
        if not q then return nil, "an unterminated quoted field" end
        parts[#parts + 1] = line:sub(j, q - 1)
        if line:sub(q + 1, q + 1) == '"' then
          parts[#parts + 1] = '"'
          j = q + 2
        else
          i = q + 1
          break
        end
      end
      fields[#fields + 1] = table.concat(parts)
      local c = line:sub(i, i)
      if c == "" then return fields end
      if c ~= "," then return nil, "text after a quoted field" end
      i = i + 1
    else
      local comma = line:find(",", i, true)
      fields[#fields + 1] = line:sub(i, (comma or #line + 1) - 1)
      if not comma then return fields end
      i = comma + 1
    end
  end
end

return csv
