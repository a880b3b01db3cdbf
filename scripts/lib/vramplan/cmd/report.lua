-- vramplan report: a sweep's CSV or JSON lines (vramplan sweep) drawn as one HTML page:
-- the peak per GPU against one varied key, or a heat map over two.
local csv = require("vramplan.csv")
local files = require("vramplan.files")
local hardware = require("vramplan.hardware")
local html = require("vramplan.html")
local report = require("vramplan.report")
local sweep_plot = require("vramplan.sweep_plot")

local cmd = {
  usage = "report SWEEP.csv --x KEY [--y KEY] -o FILE.html",
  flags = { x = "value", y = "value", out = "value" },
  short = { o = "out" },
  help = "A line per model or GPU of the peak per GPU against --x, with each GPU's capacity; with --y, a heat map\n" ..
    "of how much room each pair of values leaves (or how much it lacks). -o (--out) names the page written.\n" ..
    "SWEEP.csv is what vramplan sweep writes, as CSV or as JSON lines (--format jsonl).",
}

-- A sweep's rows as CSV text would hold them ({ header, records }): its
-- CSV, or its JSON lines (--format jsonl), the values written as the CSV
-- writes them (integers without a fraction, null empty) and the columns in
-- the order of the first row's keys.
local function read_sweep(path)
  local f, why = io.open(path, "rb")
  if not f then error("cannot read " .. tostring(why), 0) end
  local first = f:read("l")
  f:close()
  if not first or first:sub(1, 1) ~= "{" then return csv.read(path) end
  local json = require("dkjson")
  local header, records, n = {}, {}, 0
  for line in io.lines(path) do
    n = n + 1
    if line ~= "" then
      local o = json.decode(line, 1, json.null)
      if type(o) ~= "table" then error(string.format("%s:%d: not a JSON object", path, n), 0) end
      if n == 1 then
        -- the columns in the order the sweep wrote them: where each "name": first appears
        local at = {}
        for k in pairs(o) do
          header[#header + 1] = k
          at[k] = line:find(json.encode(k) .. ":", 1, true) or math.huge
        end
        table.sort(header, function(a, b) return at[a] < at[b] end)
      end
      local rec = {}
      for _, k in ipairs(header) do
        local v = o[k]
        if v == nil or v == json.null then v = ""
        elseif math.type(v) == "integer" then v = string.format("%d", v)
        else v = tostring(v) end
        rec[k] = v
      end
      records[#records + 1] = rec
    end
  end
  return { header = header, records = records }
end

-- The columns every drawing reads (the sweep writes more).
local needed = { "model.name", "gpu.short_name", "per_gpu.peak_total_bytes", "fits", "headroom_bytes", "error" }

local function check_columns(sweep, path)
  local has = {}
  for _, h in ipairs(sweep.header) do has[h] = true end
  for _, name in ipairs(needed) do
    if not has[name] then error(string.format("%s: no column '%s' (is it a vramplan sweep CSV?)", path, name), 0) end
  end
  return has
end

-- The varied keys: the columns between `variant` and `model.name`, as the
-- sweep writes them.
local function varied_keys(header)
  local out, inside = {}, false
  for _, h in ipairs(header) do
    if h == "model.name" then break end
    if inside then out[#out + 1] = h end
    if h == "variant" then inside = true end
  end
  return out
end

local function check_key(flag, key, has, varied, path)
  if not has[key] then
    error(string.format("%s %s: not a column of %s (the varied keys: %s)", flag, key, path,
      #varied > 0 and table.concat(varied, ", ") or "none"), 0)
  end
end

-- The keys that tell the lines (or heat maps) apart: the other varied keys,
-- the model and the GPU, those that take more than one value.
local function group_keys(rows, varied, drawn)
  local out, candidates, named = {}, {}, {}
  for _, k in ipairs(varied) do candidates[#candidates + 1], named[k] = k, true end
  -- a sweep over `model` or `gpu` names them in its own column already
  if not named.model then candidates[#candidates + 1] = "model.name" end
  if not named.gpu then candidates[#candidates + 1] = "gpu.short_name" end
  for _, k in ipairs(candidates) do
    if not drawn[k] and #sweep_plot.values(rows, k) > 1 then out[#out + 1] = k end
  end
  return out
end

-- Columns whose values say what they are (a100-80gb, Llama-2-7B).
local names_itself = { model = true, gpu = true, ["model.name"] = true, ["gpu.short_name"] = true }

-- Rows split by their values of `keys`, in the sweep's order, each group
-- with a label.
local function groups(rows, keys)
  local out, by = {}, {}
  for _, row in ipairs(rows) do
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = names_itself[k] and row[k] or (k .. " " .. row[k]) end
    local label = #parts > 0 and table.concat(parts, ", ") or (row["model.name"] .. " on " .. row["gpu.short_name"])
    if not by[label] then
      by[label] = { label = label, rows = {} }
      out[#out + 1] = by[label]
    end
    table.insert(by[label].rows, row)
  end
  return out
end

-- Each GPU's capacity: the sweep's gpu.memory_bytes when it has one, else
-- the GPU's description in hardware/; nil for a sweep without a GPU.
local function capacity_finder(home)
  local cache = {}
  return function(row)
    local short = row["gpu.short_name"]
    if short == "" then return nil end
    if not cache[short] then
      local bytes = math.tointeger(tonumber(row["gpu.memory_bytes"] or ""))
      local name = short
      if not bytes then
        local gpu = hardware.gpu(home, short)
        bytes, name = gpu.memory_bytes, gpu.name
      end
      cache[short] = { label = name, bytes = bytes }
    end
    return cache[short]
  end
end

local function number(row, key, path)
  local v = math.tointeger(tonumber(row[key]))
  if not v then error(string.format("%s: variant %s: %s is not a whole number ('%s')", path, row.variant or "?", key,
    row[key]), 0) end
  return v
end

local function line_chart(rows, x, keys, capacity, path)
  local values = sweep_plot.values(rows, x)
  local pos = {}
  for i, v in ipairs(values) do pos[v] = i end
  local series, caps, seen = {}, {}, {}
  for _, g in ipairs(groups(rows, keys)) do
    local points = {}
    for _, row in ipairs(g.rows) do
      points[#points + 1] = { x = row[x], bytes = number(row, "per_gpu.peak_total_bytes", path) }
      local c = capacity(row)
      if c and not seen[c.label] then seen[c.label] = true caps[#caps + 1] = c end
    end
    table.sort(points, function(a, b) return pos[a.x] < pos[b.x] end)
    series[#series + 1] = { label = g.label, points = points }
  end
  return { sweep_plot.lines("Peak per GPU against " .. x, x, values, series, caps) }
end

local function heat_maps(all_rows, x, y, keys, capacity, path)
  local figures = {}
  local xs, ys = sweep_plot.values(all_rows, x), sweep_plot.values(all_rows, y)
  for _, g in ipairs(groups(all_rows, keys)) do
    local cells = {}
    for _, row in ipairs(g.rows) do
      cells[row[x]] = cells[row[x]] or {}
      local cell = {}
      if row.error ~= "" then cell.error = row.error
      else
        local c = capacity(row)
        if not c then error(path .. ": a heat map of the room left needs a GPU (gpu.short_name is empty)", 0) end
        cell.capacity, cell.headroom, cell.fits = c.bytes, number(row, "headroom_bytes", path), row.fits == "true"
      end
      cells[row[x]][row[y]] = cell
    end
    figures[#figures + 1] = sweep_plot.heat("Room left per GPU: " .. g.label, x, y, xs, ys, cells)
  end
  return figures
end

-- The table under the figures: every variant with what it needed.
local function table_rows(records, varied)
  local header = { "variant" }
  for _, k in ipairs(varied) do header[#header + 1] = k end
  for _, k in ipairs({ "model", "GPU", "peak per GPU", "fits", "headroom", "error" }) do header[#header + 1] = k end
  local out = {}
  for _, r in ipairs(records) do
    local cells = { r.variant or "" }
    for _, k in ipairs(varied) do cells[#cells + 1] = r[k] end
    local peak, headroom = math.tointeger(tonumber(r["per_gpu.peak_total_bytes"])), math.tointeger(tonumber(r.headroom_bytes))
    for _, v in ipairs({ r["model.name"], r["gpu.short_name"], peak and report.bytes(peak) or "", r.fits,
      headroom and report.bytes(headroom) or "", r.error }) do cells[#cells + 1] = v end
    out[#out + 1] = cells
  end
  return header, out
end

function cmd.run(opts, home)
  local fail_usage = require("vramplan.cli").fail_usage
  if not opts.target then fail_usage("report needs a SWEEP.csv") end
  if opts.positional[2] then fail_usage("unexpected argument " .. opts.positional[2]) end
  if not opts.x then fail_usage("report needs --x KEY") end
  if not opts.out then fail_usage("report needs -o FILE.html") end
  local path = opts.target
  local sweep = read_sweep(path)
  local has = check_columns(sweep, path)
  local varied = varied_keys(sweep.header)
  check_key("--x", opts.x, has, varied, path)
  if opts.y then check_key("--y", opts.y, has, varied, path) end
  local ok_rows = {}
  for _, r in ipairs(sweep.records) do if r.error == "" then ok_rows[#ok_rows + 1] = r end end
  if #ok_rows == 0 then error(path .. ": no variant without an error to draw", 0) end
  local capacity = capacity_finder(home)
  local keys = group_keys(sweep.records, varied, { [opts.x] = true, [opts.y or ""] = true })
  local figures = opts.y and heat_maps(sweep.records, opts.x, opts.y, keys, capacity, path)
    or line_chart(ok_rows, opts.x, keys, capacity, path)
  local header, rows = table_rows(sweep.records, varied)
  local title = "vramplan sweep: " .. path:match("[^/]*$")
  local subtitle = string.format("%d variants%s; peak per GPU as nvidia-smi would show it (allocated, allocator and runtime)",
    #sweep.records, #ok_rows < #sweep.records and string.format(" (%d failed)", #sweep.records - #ok_rows) or "")
  files.write(opts.out, html.sweep(title, subtitle, figures, header, rows))
  return 0
end

return cmd
