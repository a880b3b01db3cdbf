-- vramplan.csv — RFC 4180 as the sweeps write and the reports read it: a
-- header row, fields optionally in double quotes (a quote inside doubled),
-- quoted fields free to hold commas and line breaks; CRLF or LF ends a row.
-- The sweep writes one row per line ("\n"; its fields hold no line breaks)
-- so that files can be read back line by line.
local vramplan = require("vramplan")

local csv = {}

-- One field from position i: its text and the position after it.
local function field(text, i, where)
  if text:sub(i, i) ~= '"' then
    local j = text:find("[,\r\n]", i) or #text + 1
    local value = text:sub(i, j - 1)
    if value:find('"', 1, true) then error(where() .. ": a quote inside an unquoted field", 0) end
    return value, j
  end
  local parts, j = {}, i + 1
  while true do
    local q = text:find('"', j, true)
    if not q then error(where() .. ": a quoted field is not closed", 0) end
    parts[#parts + 1] = text:sub(j, q - 1)
    if text:sub(q + 1, q + 1) ~= '"' then
      local after = text:sub(q + 1, q + 1)
      if after ~= "" and after ~= "," and after ~= "\r" and after ~= "\n" then
        error(where() .. ": text after a closing quote", 0)
      end
      return table.concat(parts), q + 1
    end
    parts[#parts + 1] = '"'
    j = q + 2
  end
end

-- The rows of `text` as lists of fields; `name` is said in errors.
function csv.parse(text, name)
  local rows, row, i = {}, {}, 1
  local function where() return string.format("%s: row %d", name, #rows + 1) end
  if text:sub(1, 3) == "\239\187\191" then i = 4 end -- a byte-order mark some spreadsheets write
  while i <= #text do
    local value
    value, i = field(text, i, where)
    row[#row + 1] = value
    local c = text:sub(i, i)
    if c == "," then
      i = i + 1
      if i > #text then row[#row + 1] = "" end
    else -- the end of a row (CRLF, LF) or of the text
      rows[#rows + 1] = row
      row = {}
      i = i + (text:sub(i, i + 1) == "\r\n" and 2 or 1)
    end
  end
  if #row > 0 then rows[#rows + 1] = row end
  return rows
end

-- A file's header and records: { header = {...}, records = { {name = value}... } };
-- every record must have the header's number of fields.
function csv.read(path)
  local f, err = io.open(path, "rb")
  if not f then error("cannot read " .. err, 0) end
  local text = f:read("a")
  f:close()
  local rows = csv.parse(text, path)
  if #rows == 0 then error(path .. ": empty, no header row", 0) end
  local header, records = rows[1], {}
  for r = 2, #rows do
    local row = rows[r]
    if not (#row == 1 and row[1] == "") then -- a blank line
      if #row ~= #header then
        error(string.format("%s: row %d has %d fields, the header %d", path, r, #row, #header), 0)
      end
      local rec = {}
      for k, name in ipairs(header) do rec[name] = row[k] end
      records[#records + 1] = rec
    end
  end
  return { header = header, records = records }
end


-- The fields of one line, or nil and a message (a row read back line by
-- line: --resume, merge).
function csv.parse_line(line)
  local ok, parsed = pcall(csv.parse, line, "line")
  if not ok then return nil, parsed end
  return parsed[1] or { "" }
end

-- One value as a CSV field: nil (and JSON null) empty, integers exact,
-- other numbers with the digits that read back equal, text quoted when it
-- must be (the rules: engine/lua/lua_csv.c, in C for a sweep's rows).
csv.field = vramplan.csv_field

-- A list of `n` values as one line (without its end).
csv.line = vramplan.csv_line

return csv
