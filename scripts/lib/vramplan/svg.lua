-- vramplan.svg — the drawing primitives the plots share: elements written as
-- text, axes in GiB with round ticks, the colours of the categories.
local svg = {}

local GiB = 1024 ^ 3
svg.GiB = GiB

-- Text and attribute values escaped for XML (the model's and recipe's names
-- come from user files).
function svg.escape(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
    ["'"] = "&#39;" }))
end

-- A coordinate with at most one decimal: enough for a pixel, and short.
function svg.num(x)
  local s = string.format("%.1f", x)
  return (s:gsub("%.0$", ""))
end

-- An element: attributes in name order so that the output is reproducible;
-- `body` (already escaped text or elements) makes it a container.
function svg.el(tag, attrs, body)
  local names = {}
  for k in pairs(attrs or {}) do names[#names + 1] = k end
  table.sort(names)
  local parts = { "<", tag }
  for _, k in ipairs(names) do
    local v = attrs[k]
    if type(v) == "number" and math.type(v) == "float" then v = svg.num(v) end
    parts[#parts + 1] = string.format(' %s="%s"', k, svg.escape(v))
  end
  if body == nil then parts[#parts + 1] = "/>" return table.concat(parts) end
  parts[#parts + 1] = ">"
  parts[#parts + 1] = type(body) == "table" and table.concat(body, "\n") or body
  parts[#parts + 1] = "</" .. tag .. ">"
  return table.concat(parts)
end

function svg.text(x, y, s, attrs)
  attrs = attrs or {}
  attrs.x, attrs.y = x, y
  return svg.el("text", attrs, svg.escape(s))
end

-- A standalone document (the --plot file) or an inline figure (the report
-- page: no XML declaration, the page's CSS applies).
function svg.document(width, height, body, title, standalone)
  local root = svg.el("svg", {
    xmlns = "http://www.w3.org/2000/svg", width = width, height = height,
    viewBox = string.format("0 0 %d %d", width, height), role = "img", ["font-family"] = "DejaVu Sans, Arial, sans-serif",
    ["font-size"] = 12,
  }, { svg.el("title", nil, svg.escape(title)), table.concat(body, "\n") })
  if standalone then return '<?xml version="1.0" encoding="UTF-8"?>\n' .. root .. "\n" end
  return root
end

-- The width a label takes, roughly: DejaVu Sans averages about 0.6 em a
-- character; used only to keep labels from overlapping, so it errs wide.
function svg.text_width(s, size) return #tostring(s) * (size or 12) * 0.62 end

-- Round tick steps: 1, 2 or 5 times a power of ten GiB, about `n` of them
-- up to `top` bytes. Returns the step in GiB and the axis' top in bytes.
function svg.ticks(top, n)
  local raw = math.max(top / GiB / (n or 6), 1 / 1024)
  local power = 10 ^ math.floor(math.log(raw, 10))
  local step = power * 10
  for _, m in ipairs({ 1, 2, 5 }) do
    if raw <= m * power then step = m * power break end
  end
  local count = math.ceil(top / GiB / step - 1e-9)
  return step, math.max(count, 1) * step * GiB
end

-- A tick's label: as few decimals as the step needs.
function svg.gib_label(gib, step)
  local decimals = step >= 1 and 0 or math.min(3, math.ceil(-math.log(step, 10) - 1e-9))
  return string.format("%." .. decimals .. "f", gib)
end

-- Colours of the memory categories: Okabe and Ito's colour-blind-safe
-- qualitative palette ("Color Universal Design", Okabe & Ito 2008), ordered
-- so that neighbouring bands alternate dark and light and stay apart when
-- printed in grey; buffers (usually tiny) take a neutral grey.
svg.categories = {
  { key = "params", label = "parameters", colour = "#0072B2" },
  { key = "buffers", label = "buffers", colour = "#999999" },
  { key = "grads", label = "gradients", colour = "#56B4E9" },
  { key = "master", label = "master weights", colour = "#D55E00" },
  { key = "optimizer", label = "optimizer states", colour = "#E69F00" },
  { key = "activations", label = "activations", colour = "#009E73" },
  { key = "transient", label = "transient", colour = "#F0E442" },
  { key = "comm", label = "communication buffers", colour = "#CC79A7" },
  { key = "workspace", label = "cuBLAS workspaces", colour = "#000000" },
}

-- Phase bands are pale tints (behind the areas) in two alternating greys
-- and blues so that the step's parts read in grey too.
svg.phases = {
  setup = "#eeeeee", forward = "#e3eef8", loss = "#fbe9d8", backward = "#f4f4f4",
  recompute = "#e6f4ec", optimizer = "#f6e7f0",
}

-- Lines drawn over the areas: the capacity, the peak marker.
svg.capacity_colour = "#000000"
svg.peak_colour = "#000000"

-- Series colours for line charts: Paul Tol's "bright" scheme (Tol 2021,
-- "Colour schemes", SRON/EPS/TN/09-002), with a dash pattern each so that
-- lines stay apart in grey.
svg.series = {
  { colour = "#4477AA", dash = nil }, { colour = "#EE6677", dash = "6 3" }, { colour = "#228833", dash = "2 2" },
  { colour = "#CCBB44", dash = "8 3 2 3" }, { colour = "#66CCEE", dash = "4 4" }, { colour = "#AA3377", dash = "1 3" },
  { colour = "#BBBBBB", dash = "10 2" },
}

-- The y axis: grid lines and labels in GiB for bytes 0..top over the box
-- (x, y, w, h: y grows down). `scale(bytes)` gives the pixel row.
function svg.y_axis(box, top, step, scale)
  local out = {}
  local gib = 0
  while gib * GiB <= top + 1 do
    local y = scale(gib * GiB)
    out[#out + 1] = svg.el("line", { x1 = box.x, x2 = box.x + box.w, y1 = y, y2 = y, stroke = "#d0d0d0",
      ["stroke-width"] = 0.6 })
    out[#out + 1] = svg.text(box.x - 6, y + 4, svg.gib_label(gib, step), { ["text-anchor"] = "end", fill = "#333" })
    gib = gib + step
  end
  out[#out + 1] = svg.text(box.x - 44, box.y + box.h / 2, "GiB", { ["text-anchor"] = "middle", fill = "#333",
    transform = string.format("rotate(-90 %s %s)", svg.num(box.x - 44), svg.num(box.y + box.h / 2)) })
  return table.concat(out, "\n")
end

-- A legend row of swatches and labels from x, wrapping at `right`; returns
-- the elements and the y under the last row.
function svg.legend(items, x, y, right)
  local out, cx = {}, x
  for _, it in ipairs(items) do
    local w = 16 + svg.text_width(it.label, 11) + 14
    if cx + w > right and cx > x then cx, y = x, y + 18 end
    if it.dash ~= nil or it.line then
      out[#out + 1] = svg.el("line", { x1 = cx, x2 = cx + 12, y1 = y - 4, y2 = y - 4, stroke = it.colour,
        ["stroke-width"] = 2, ["stroke-dasharray"] = it.dash or nil })
    else
      out[#out + 1] = svg.el("rect", { x = cx, y = y - 10, width = 12, height = 12, fill = it.colour, stroke = "#333",
        ["stroke-width"] = 0.5 })
    end
    out[#out + 1] = svg.text(cx + 16, y, it.label, { ["font-size"] = 11, fill = "#222" })
    cx = cx + w
  end
  return table.concat(out, "\n"), y + 18
end

return svg
