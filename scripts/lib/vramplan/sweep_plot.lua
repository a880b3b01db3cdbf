-- vramplan.sweep_plot — a sweep's variants drawn: the peak per GPU against
-- one varied key (a line per model or GPU, with the capacity), or whether
-- each pair of two keys fits, and by how much, as a heat map.
local svg = require("vramplan.svg")
local report = require("vramplan.report")

local sweep_plot = {}

local GiB = svg.GiB
local WIDTH = 1000

-- The distinct values of `key` over the rows: numbers in numeric order,
-- other text in the order the sweep has them.
function sweep_plot.values(rows, key)
  local seen, out, numeric = {}, {}, true
  for _, row in ipairs(rows) do
    local v = row[key]
    if not seen[v] then
      seen[v] = true
      out[#out + 1] = v
      if not tonumber(v) then numeric = false end
    end
  end
  if numeric then table.sort(out, function(a, b) return tonumber(a) < tonumber(b) end) end
  return out
end

local function position_of(values)
  local pos = {}
  for i, v in ipairs(values) do pos[v] = i end
  return pos
end

-- Evenly spaced categories along the x axis (a sweep's values are usually
-- doublings: equal steps read better than a linear scale); labels skipped
-- where they would touch.
local function x_axis(out, values, box, x_of, key)
  local bottom, last = box.y + box.h, -math.huge
  for i, v in ipairs(values) do
    local x = x_of(i)
    out[#out + 1] = svg.el("line", { x1 = x, x2 = x, y1 = bottom, y2 = bottom + 5, stroke = "#444" })
    local w = svg.text_width(v, 11)
    if x - w / 2 > last + 6 then
      out[#out + 1] = svg.text(x, bottom + 18, v, { ["text-anchor"] = "middle", ["font-size"] = 11, fill = "#333" })
      last = x + w / 2
    end
  end
  out[#out + 1] = svg.text(box.x + box.w / 2, bottom + 38, key, { ["text-anchor"] = "middle", fill = "#000" })
end

-- series: { { label, points = { {x = value, bytes = n}... } }... };
-- capacities: { { label, bytes }... }.
function sweep_plot.lines(title, key, values, series, capacities)
  local out = { svg.text(70, 24, title, { ["font-size"] = 15, ["font-weight"] = "bold", fill = "#000" }) }
  local box = { x = 70, y = 50, w = WIDTH - 90, h = 360 }
  local top = 1
  for _, s in ipairs(series) do for _, p in ipairs(s.points) do top = math.max(top, p.bytes) end end
  for _, c in ipairs(capacities) do top = math.max(top, c.bytes) end
  local step, axis_top = svg.ticks(top * 1.06, 6)
  local pos = position_of(values)
  local function x_of(i) return box.x + (#values == 1 and 0.5 or (i - 1) / (#values - 1) * 0.9 + 0.05) * box.w end
  local function y_of(b) return box.y + box.h - b / axis_top * box.h end
  out[#out + 1] = svg.y_axis(box, axis_top, step, y_of)
  out[#out + 1] = svg.el("rect", { x = box.x, y = box.y, width = box.w, height = box.h, fill = "none", stroke = "#444",
    ["stroke-width"] = 0.8 })
  x_axis(out, values, box, x_of, key)
  for k, c in ipairs(capacities) do
    local y = y_of(c.bytes)
    out[#out + 1] = svg.el("line", { class = "capacity", ["data-bytes"] = c.bytes, x1 = box.x, x2 = box.x + box.w,
      y1 = y, y2 = y, stroke = "#000", ["stroke-width"] = 1.2, ["stroke-dasharray"] = "8 4" })
    -- labels of several GPUs alternate ends so that close lines stay legible;
    local right = k % 2 == 0 -- the first at the left: sweeps mostly rise to the right
    out[#out + 1] = svg.text(right and box.x + box.w - 4 or box.x + 4, y - 4, c.label .. " " .. report.bytes(c.bytes),
      { ["text-anchor"] = right and "end" or "start", ["font-size"] = 11, stroke = "#fff", ["stroke-width"] = 3,
        ["paint-order"] = "stroke", fill = "#000" })
  end
  local legend = {}
  for k, s in ipairs(series) do
    local style = svg.series[(k - 1) % #svg.series + 1]
    local pts, marks = {}, {}
    for _, p in ipairs(s.points) do
      local x, y = x_of(pos[p.x]), y_of(p.bytes)
      pts[#pts + 1] = svg.num(x) .. "," .. svg.num(y)
      marks[#marks + 1] = svg.el("circle", { class = "point", ["data-series"] = s.label, ["data-x"] = p.x,
        ["data-bytes"] = p.bytes, cx = x, cy = y, r = 3.5, fill = style.colour, stroke = "#000", ["stroke-width"] = 0.6 },
        svg.el("title", nil, svg.escape(s.label .. ", " .. key .. " " .. p.x .. ": " .. report.bytes(p.bytes))))
    end
    out[#out + 1] = svg.el("polyline", { class = "series", points = table.concat(pts, " "), fill = "none",
      stroke = style.colour, ["stroke-width"] = 2, ["stroke-dasharray"] = style.dash })
    out[#out + 1] = table.concat(marks, "\n")
    legend[#legend + 1] = { label = s.label, colour = style.colour, dash = style.dash, line = true }
  end
  local items, y = svg.legend(legend, box.x, box.y + box.h + 62, box.x + box.w)
  out[#out + 1] = items
  return svg.document(WIDTH, math.ceil(y), out, title, false)
end

-- A cell's fill: Okabe-Ito blue for room to spare, vermillion for a
-- shortfall, paler the nearer to the edge (lightness carries the size, so
-- the map reads in grey; the sign is written in the cell).
local function cell_colour(headroom, capacity)
  local share = math.min(math.abs(headroom) / math.max(capacity, 1), 1) ^ 0.5
  local r, g, b = 0x00, 0x72, 0xB2
  if headroom < 0 then r, g, b = 0xD5, 0x5E, 0x00 end
  local function mix(c) return math.floor(255 + (c - 255) * (0.15 + 0.85 * share) + 0.5) end
  return string.format("#%02X%02X%02X", mix(r), mix(g), mix(b)), share > 0.55
end

-- cells: { [x value] = { [y value] = { headroom = bytes?, fits = bool?, capacity = bytes, error = text? } } }.
function sweep_plot.heat(title, xkey, ykey, xs, ys, cells)
  local out = { svg.text(80, 24, title, { ["font-size"] = 15, ["font-weight"] = "bold", fill = "#000" }) }
  local cell_w = math.max(math.min((WIDTH - 120) / #xs, 120), 56)
  local cell_h = 34
  local box = { x = 80, y = 46, w = cell_w * #xs, h = cell_h * #ys }
  for j, yv in ipairs(ys) do
    local y = box.y + (#ys - j) * cell_h -- the first value at the bottom, as on a y axis
    out[#out + 1] = svg.text(box.x - 8, y + cell_h / 2 + 4, yv, { ["text-anchor"] = "end", ["font-size"] = 11 })
    for i, xv in ipairs(xs) do
      local c = cells[xv] and cells[xv][yv]
      local x = box.x + (i - 1) * cell_w
      local fill, dark, label = "#ffffff", false, ""
      if c and c.headroom then
        fill, dark = cell_colour(c.headroom, c.capacity)
        label = (c.headroom >= 0 and "+" or "\u{2212}") .. string.format("%.1f", math.abs(c.headroom) / GiB)
      elseif c then fill, label = "#dddddd", "error" end
      out[#out + 1] = svg.el("rect", { class = "cell", x = x, y = y, width = cell_w, height = cell_h, fill = fill,
        stroke = "#ffffff", ["stroke-width"] = 1, ["data-x"] = xv, ["data-y"] = yv,
        ["data-fits"] = c and c.fits ~= nil and tostring(c.fits) or nil, ["data-headroom-bytes"] = c and c.headroom },
        svg.el("title", nil, svg.escape(string.format("%s %s, %s %s: %s", xkey, xv, ykey, yv,
          not c and "not in the sweep" or c.error or report.bytes(c.headroom) .. (c.fits and " to spare" or " short")))))
      out[#out + 1] = svg.text(x + cell_w / 2, y + cell_h / 2 + 4, label, { ["text-anchor"] = "middle",
        ["font-size"] = 11, fill = dark and "#ffffff" or "#000000" })
    end
  end
  local bottom = box.y + box.h
  for i, xv in ipairs(xs) do
    out[#out + 1] = svg.text(box.x + (i - 0.5) * cell_w, bottom + 16, xv, { ["text-anchor"] = "middle", ["font-size"] = 11 })
  end
  out[#out + 1] = svg.text(box.x + box.w / 2, bottom + 36, xkey, { ["text-anchor"] = "middle" })
  out[#out + 1] = svg.text(box.x - 60, box.y + box.h / 2, ykey, { ["text-anchor"] = "middle",
    transform = string.format("rotate(-90 %s %s)", svg.num(box.x - 60), svg.num(box.y + box.h / 2)) })
  local items, y = svg.legend({
    { label = "fits: GiB to spare (+)", colour = "#0072B2" }, { label = "does not fit: GiB short (\u{2212})", colour = "#D55E00" },
    { label = "failed", colour = "#dddddd" },
  }, box.x, bottom + 62, math.max(box.x + box.w, 600))
  out[#out + 1] = items
  return svg.document(math.max(math.ceil(box.x + box.w + 30), 640), math.ceil(y), out, title, false)
end

return sweep_plot
