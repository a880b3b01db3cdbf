-- vramplan.grid — the variants of a sweep: LIST syntax (v1,v2 / a:b:step /
-- a:b:*k), the cartesian product of the varied keys in a fixed order, values
-- derived from the others, a filter, and which variants a shard owns.
local sandbox = require("vramplan.sandbox")

local grid = {}

-- A bound on one LIST, so that a typo (1:1e9) fails at once instead of
-- enumerating for hours.
local MAX_LIST = 1000000

-- "4" -> 4, "0.1" -> 0.1, "true" -> true, anything else stays a string: the
-- value a script would have written.
function grid.value(text)
  if text == "true" then return true end
  if text == "false" then return false end
  local n = math.tointeger(tonumber(text))
  if n and text:match("^[+-]?%d+$") then return n end
  local f = tonumber(text)
  if f and text:match("^[+-]?[%d.]+[eE]?[+-]?%d*$") then return f end
  return text
end

local function range(text, a, b, step)
  local first, last = math.tointeger(tonumber(a)), math.tointeger(tonumber(b))
  if not first or not last then error(string.format("'%s': a range's bounds are whole numbers", text), 0) end
  if first > last then error(string.format("'%s': the range is empty (%d > %d)", text, first, last), 0) end
  local values = {}
  local geometric = step:match("^%*(.+)$")
  local by = math.tointeger(tonumber(geometric or step))
  if geometric then
    if not by or by < 2 or first < 1 then
      error(string.format("'%s': a geometric range a:b:*k needs a >= 1 and a whole k >= 2", text), 0)
    end
    local v = first
    while v <= last do values[#values + 1] = v; v = v * by end
  else
    if not by or by < 1 then error(string.format("'%s': a range's step is a whole number >= 1", text), 0) end
    if (last - first) // by >= MAX_LIST then
      error(string.format("'%s': more than %d values", text, MAX_LIST), 0)
    end
    for v = first, last, by do values[#values + 1] = v end
  end
  return values
end

-- Parses a LIST: "a:b:step" or "a:b:*k" (integers, both ends included when
-- reached), "a:b" (step 1), or "v1,v2,...". Raises a message without origin.
function grid.parse_list(text)
  local a, b, step = text:match("^([^,:]+):([^,:]+):([^,:]+)$")
  if not a then
    a, b = text:match("^([^,:]+):([^,:]+)$")
    step = "1"
  end
  if a then return range(text, a, b, step) end
  local values = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    if item == "" then error(string.format("'%s': an empty value in the list", text), 0) end
    values[#values + 1] = grid.value(item)
  end
  return values
end

-- The number of combinations of `axes` ({ {key=, values=}, ... }).
function grid.size(axes)
  local n = 1
  for _, axis in ipairs(axes) do n = n * #axis.values end
  return n
end

-- The combination at `index` (0-based): the first axis varies slowest, the
-- last fastest, like nested loops written in the axes' order.
function grid.at(axes, index)
  local values = {}
  for i = #axes, 1, -1 do
    local axis = axes[i]
    local n = #axis.values
    values[axis.key] = axis.values[index % n + 1]
    index = index // n
  end
  return values
end

-- Does shard { k, n } own variant `index`? Variants are dealt round-robin:
-- shard k (0-based) owns index k, k + n, k + 2n, ...
function grid.owns(shard, index)
  return shard == nil or index % shard[2] == shard[1]
end

-- Parses "K/N" (0 <= K < N).
function grid.parse_shard(text)
  local k, n = text:match("^(%d+)/(%d+)$")
  k, n = math.tointeger(tonumber(k)), math.tointeger(tonumber(n))
  if not k or n < 1 or k >= n then
    error(string.format("--shard takes K/N with 0 <= K < N (got '%s')", text), 0)
  end
  return { k, n }
end

-- A copy of a variant's values: a script's function gets its own table.
local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- Completes one candidate: derived values in order, then the filter.
-- Returns the values, or nil when the filter drops it. A script's error
-- becomes "variant N: file:line: ..." and stops the sweep.
local function complete(plan, values, index)
  for _, d in ipairs(plan.derived) do
    local ok, v = pcall(sandbox.call, d.fn, copy(values))
    if not ok then error(string.format("variant %d: %s", index, tostring(v)), 0) end
    values[d.key] = v
  end
  if plan.where then
    local ok, keep = pcall(sandbox.call, plan.where, copy(values))
    if not ok then error(string.format("variant %d: %s", index, tostring(keep)), 0) end
    if not keep then return nil end
  end
  return values
end

-- Calls fn(index, values) for each variant in order (index 0-based, counting
-- only the variants the filter keeps). plan: { axes, derived, where } or
-- { generated = list of values, derived, where }.
function grid.each(plan, fn)
  local index = 0
  local count = plan.generated and #plan.generated or grid.size(plan.axes)
  for i = 0, count - 1 do
    local values = plan.generated and copy(plan.generated[i + 1]) or grid.at(plan.axes, i)
    values = complete(plan, values, index)
    if values then
      fn(index, values)
      index = index + 1
    end
  end
  return index
end

return grid
