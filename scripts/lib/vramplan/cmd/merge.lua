-- vramplan merge: the rows of several shards' files joined in variant
-- order, with missing and duplicated variants reported.
local rows = require("vramplan.rows")

local merge = {
  usage = "merge FILE... [--out FILE]",
  flags = { out = "value" },
}

-- "3-5, 9" for a sorted list of numbers.
local function ranges(list)
  local parts, i = {}, 1
  while i <= #list do
    local j = i
    while j < #list and list[j + 1] == list[j] + 1 do j = j + 1 end
    parts[#parts + 1] = i == j and tostring(list[i]) or (list[i] .. "-" .. list[j])
    i = j + 1
  end
  return table.concat(parts, ", ")
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
  local missing, duplicated, expected = {}, {}, 0
  while true do
    local r = smallest(readers)
    if not r then break end
    if r.variant < expected then
      if duplicated[#duplicated] ~= r.variant then duplicated[#duplicated + 1] = r.variant end
    else
      for v = expected, r.variant - 1 do missing[#missing + 1] = v end
      out:write(r.line, "\n")
      expected = r.variant + 1
    end
    advance(r)
  end
  if out ~= io.stdout then out:close() end
  local problems = {}
  if #missing > 0 then problems[#problems + 1] = "missing variants " .. ranges(missing) end
  if #duplicated > 0 then problems[#problems + 1] = "duplicated variants " .. ranges(duplicated) end
  if #problems > 0 then error("merge: " .. table.concat(problems, "; "), 0) end
  return 0
end

return merge
