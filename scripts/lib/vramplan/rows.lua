-- vramplan.rows — files of sweep rows read back: which variants a file
-- holds (--resume), and several files joined in variant order (merge).
-- A row is one line; a file's format is told by its first line (a JSON
-- object, else a CSV header).
local csv = require("vramplan.csv")
local json = require("dkjson")
local vramplan = require("vramplan")

local rows = {}

-- The variant of one row line, or nil.
local function variant_of(line, variant_column)
  if variant_column then
    local fields = csv.parse_line(line)
    return fields and math.tointeger(tonumber(fields[variant_column]))
  end
  local o = json.decode(line)
  return type(o) == "table" and math.tointeger(o.variant) or nil
end

-- The column of `variant` in a CSV header line, or raises.
local function variant_column(path, header)
  local fields = csv.parse_line(header) or {}
  for i, f in ipairs(fields) do
    if f == "variant" then return i end
  end
  error(path .. ": no variant column: rows cannot be matched to variants", 0)
end

-- A reader of a rows file: reader.header (CSV's header line or nil), and
-- reader.next() -> line, variant (nil at the end). A line without variant
-- is an error naming the file and line.
function rows.reader(path)
  local f, why = io.open(path, "r")
  if not f then error("cannot open " .. tostring(why), 0) end
  local reader, number = {}, 0
  -- a line without its end is what a killed run leaves: never taken for a row
  local function read_line()
    local line = f:read("L")
    if not line then return nil end
    number = number + 1
    if line:sub(-1) ~= "\n" then
      error(string.format("%s:%d: the last line is cut short (a run killed while writing it? --resume mends it)",
        path, number), 0)
    end
    return line:sub(1, -2)
  end
  local first = read_line()
  local column, pending
  if first and first:sub(1, 1) ~= "{" then
    reader.header, column = first, variant_column(path, first)
  else
    pending = first
  end
  function reader.next()
    local line = pending
    if line then pending = nil else line = read_line() end
    if not line then f:close() return nil end
    local v = variant_of(line, column)
    if not v then error(string.format("%s:%d: a row without a variant number", path, number), 0) end
    return line, v
  end
  return reader
end

-- Prepares `path` for --resume: cuts a partial last line (a sweep killed
-- while writing it), checks the header is `header` (CSV), and returns the
-- set of variants it holds and whether it holds nothing yet (then the
-- header is to be written).
function rows.resume(path, header)
  local f = io.open(path, "rb")
  if not f then return {}, true end
  local size, complete = 0, 0
  -- only the complete lines count: measured in bytes to cut the rest
  for line in f:lines("L") do
    size = size + #line
    if line:sub(-1) == "\n" then
      complete = size
    end
  end
  f:close()
  if complete < size then
    local ok, why = vramplan.truncate(path, complete)
    if not ok then error("cannot cut the partial last line of " .. tostring(why), 0) end
  end
  if complete == 0 then
    local g = assert(io.open(path, "w"))
    g:close()
    return {}, true
  end
  local reader = rows.reader(path)
  if header and not reader.header then error(path .. ": holds JSON lines, not CSV rows", 0) end
  if header and reader.header ~= header then
    error(string.format("%s: its columns are not this sweep's (header %s, this sweep writes %s)", path,
      tostring(reader.header), header), 0)
  end
  if not header and reader.header then error(path .. ": holds CSV rows, not JSON lines", 0) end
  local done = {}
  while true do
    local line, v = reader.next()
    if not line then break end
    done[v] = true
  end
  return done, false
end

return rows
