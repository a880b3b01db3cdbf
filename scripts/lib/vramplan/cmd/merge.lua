-- vramplan merge: the rows of several shards' files joined in variant
-- order, with missing and duplicated variants reported.
local rows = require("vramplan.rows")

local merge = {
  usage = "merge FILE... [--out FILE]",
  flags = { out = "value" },
}

-- At most this many ranges are named: a shard missing from a million
-- variants must not hold them all.
local MAX_RANGES = 20

-- A set of variant numbers given in increasing order, kept as ranges:
-- add(first, last), text() -> "3-5, 9" (and how many in all).
local function range_set()
  local set, ranges, count, dropped = {}, {}, 0, false
  function set.add(first, last)
    count = count + (last - first + 1)
    local previous = ranges[#ranges]
    if previous and previous[2] + 1 == first then previous[2] = last
    elseif #ranges < MAX_RANGES then ranges[#ranges + 1] = { first, last }
    else dropped = true end
  end
  function set.empty() return count == 0 end
  function set.text()
    local parts = {}
    for i, r in ipairs(ranges) do parts[i] = r[1] == r[2] and tostring(r[1]) or (r[1] .. "-" .. r[2]) end
    return table.concat(parts, ", ") .. (dropped and string.format(", ... (%d in all)", count) or "")
  end
  return set
end

-- Opens every file; checks they share one format and header.
local function open_all(paths)
  local readers = {}
  for i, path in ipairs(paths) do
    local r = rows.reader(path)
    if i > 1 and r.header ~= readers[1].header then
      error(string.format("%s: its columns differ from %s's", path, paths[1]), 0)
    end
    r.path, r.last = path, nil
    r.line, r.variant = r.next()
    readers[i] = r
  end
  return readers
end

-- The reader holding the smallest next variant, or nil when all are done.
local function smallest(readers)
  local best
  for _, r in ipairs(readers) do
    if r.line and (not best or r.variant < best.variant) then best = r end
  end
  return best
end

local function advance(r)
  local previous = r.variant
  r.line, r.variant = r.next()
  if r.line and r.variant <= previous then
    error(string.format("%s: variant %d after %d: not in variant order (is it a sweep's output?)", r.path, r.variant,
      previous), 0)
  end
end

function merge.run(opts)
  local paths = opts.positional
  if #paths == 0 then require("vramplan.cli").fail_usage("merge needs the FILEs to join") end
  local readers = open_all(paths)
  local out = io.stdout
  if opts.out then out = assert(io.open(opts.out, "w")) end
  if readers[1].header then out:write(readers[1].header, "\n") end
  local missing, duplicated, expected, last_duplicate = range_set(), range_set(), 0, nil
  while true do
    local r = smallest(readers)
    if not r then break end
    if r.variant < expected then
      if last_duplicate ~= r.variant then duplicated.add(r.variant, r.variant) end
      last_duplicate = r.variant
    else
      if r.variant > expected then missing.add(expected, r.variant - 1) end
      out:write(r.line, "\n")
      expected = r.variant + 1
    end
    advance(r)
  end
  if out ~= io.stdout then out:close() end
  local problems = {}
  if not missing.empty() then problems[#problems + 1] = "missing variants " .. missing.text() end
  if not duplicated.empty() then problems[#problems + 1] = "duplicated variants " .. duplicated.text() end
  if #problems > 0 then error("merge: " .. table.concat(problems, "; "), 0) end
  return 0
end

return merge
