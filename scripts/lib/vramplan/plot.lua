-- vramplan.plot — the timeline as a picture: live bytes over one step's
-- events, stacked by category, with the step's phases, the layer
-- boundaries, the GPU's capacity and the peak; with pipeline stages, a
-- panel per stage and a bar per stage at its peak.
local svg = require("vramplan.svg")
local report = require("vramplan.report")

local plot = {}

local WIDTH = 1100

-- The running bytes of every category after each event.
local function running(timeline)
  local by, states = {}, {}
  for i, e in ipairs(timeline) do
    by[e.category] = (by[e.category] or 0) + e.delta
    local s = {}
    for k, v in pairs(by) do s[k] = v end
    states[i] = s
  end
  return states
end

-- The columns drawn: { index, x0, x1 }, an event each when there is room,
-- else one a pixel showing the highest of the events it covers (a memory
-- profile is read for its highs: the peak and every maximum survive,
-- troughs narrower than a pixel do not). The file then stays some tens of
-- KiB however long the step: an unfolded 80-layer model has 22,000 events.
local function columns_of(timeline, box)
  local n, pixels, out = #timeline, math.floor(box.w), {}
  if n <= pixels then
    for i = 1, n do out[i] = { index = i, x0 = box.x + (i - 1) / n * box.w, x1 = box.x + i / n * box.w } end
    return out
  end
  for p = 0, pixels - 1 do
    local first, last = math.floor(p * n / pixels) + 1, math.floor((p + 1) * n / pixels)
    if last >= first then
      local top = first
      for i = first + 1, last do if timeline[i].live > timeline[top].live then top = i end end
      out[#out + 1] = { index = top, x0 = box.x + p, x1 = box.x + p + 1 }
    end
  end
  out[#out].x1 = box.x + box.w
  return out
end

-- The index of the step's peak: the first event at the highest live bytes.
function plot.peak_index(timeline)
  local top = 1
  for i, e in ipairs(timeline) do if e.live > timeline[top].live then top = i end end
  return top
end

-- Runs of one phase: { phase, first, last } event indices.
function plot.bands(timeline)
  local out = {}
  for i, e in ipairs(timeline) do
    local b = out[#out]
    if b and b.phase == e.phase then b.last = i else out[#out + 1] = { phase = e.phase, first = i, last = i } end
  end
  return out
end

-- Where a layer starts: the first event of each run of one layer.
local function layer_starts(timeline)
  local out, previous = {}, nil
  for i, e in ipairs(timeline) do
    if e.layer and e.layer ~= previous then out[#out + 1] = { index = i, layer = e.layer } end
    previous = e.layer
  end
  return out
end

local function present_categories(states)
  local seen, out = {}, {}
  for _, s in ipairs(states) do for k, v in pairs(s) do if v ~= 0 then seen[k] = true end end end
  for _, c in ipairs(svg.categories) do if seen[c.key] then out[#out + 1] = c end end
  return out
end

local function where(phase, layer, op)
  local parts = { phase }
  if layer then parts[#parts + 1] = "layer " .. layer end
  if op and op ~= "" then parts[#parts + 1] = op end
  return table.concat(parts, ", ")
end

-- The bands behind the areas and their names where there is room.
local function draw_bands(out, timeline, box, x_of)
  for _, b in ipairs(plot.bands(timeline)) do
    local x1, x2 = x_of(b.first - 1), x_of(b.last)
    out[#out + 1] = svg.el("rect", { class = "band", ["data-phase"] = b.phase, x = x1, y = box.y, width = x2 - x1,
      height = box.h, fill = svg.phases[b.phase] or "#f0f0f0" }, svg.el("title", nil, svg.escape(b.phase)))
    if svg.text_width(b.phase, 11) + 6 < x2 - x1 then
      out[#out + 1] = svg.text((x1 + x2) / 2, box.y + 14, b.phase, { ["text-anchor"] = "middle", ["font-size"] = 11,
        fill = "#555" })
    end
  end
end

-- One area per category, from the axis up to the running total of it and
-- every category under it, drawn top category first so that each lower one
-- covers the rest (one outline a path instead of two). Steps: a value holds
-- until the next event.
local function draw_areas(out, columns, states, categories, peak, y_of)
  for c = #categories, 1, -1 do
    local d, level, reach = { "M" .. svg.num(columns[1].x0) .. "," .. svg.num(y_of(0)) }, nil, nil
    for _, col in ipairs(columns) do
      local total = 0
      for u = 1, c do total = total + (states[col.index][categories[u].key] or 0) end
      local y = svg.num(y_of(total))
      if y ~= level then -- a level held over several columns is one segment
        if reach then d[#d + 1] = "H" .. reach end
        d[#d + 1] = "V" .. y
        level = y
      end
      reach = svg.num(col.x1)
    end
    d[#d + 1] = "H" .. reach .. "V" .. svg.num(y_of(0)) .. "Z"
    local cat = categories[c]
    local at_peak = states[peak][cat.key] or 0
    out[#out + 1] = svg.el("path", { class = "area", ["data-category"] = cat.key, ["data-bytes-at-peak"] = at_peak,
      d = table.concat(d), fill = cat.colour },
      svg.el("title", nil, svg.escape(cat.label .. ": " .. report.bytes(at_peak) .. " at the peak")))
  end
end

-- Every layer start gets a tick; labels go on multiples of 1, 2, 5, 10, ...
-- layers, the smallest that leaves room between them.
local function label_every(starts, x_of)
  local narrowest = math.huge
  for k = 2, #starts do narrowest = math.min(narrowest, x_of(starts[k].index) - x_of(starts[k - 1].index)) end
  for _, every in ipairs({ 1, 2, 5, 10, 20, 50, 100, 200, 500 }) do
    if narrowest * every >= svg.text_width("000", 9) + 4 then return every end
  end
  return 1000
end

local function draw_layer_ticks(out, timeline, box, x_of)
  local bottom, starts = box.y + box.h, layer_starts(timeline)
  local every, last_label = label_every(starts, x_of), -math.huge
  for _, s in ipairs(starts) do
    local x = x_of(s.index - 1)
    out[#out + 1] = svg.el("line", { class = "layer-tick", x1 = x, x2 = x, y1 = bottom, y2 = bottom + 4,
      stroke = "#666", ["stroke-width"] = 0.6 })
    local label = tostring(s.layer)
    -- recompute and backward revisit a layer: no second label that close
    if s.layer % every == 0 and x - last_label > svg.text_width(label, 9) + 4 then
      out[#out + 1] = svg.text(x, bottom + 14, label, { ["text-anchor"] = "middle", ["font-size"] = 9, fill = "#555" })
      last_label = x
    end
  end
  out[#out + 1] = svg.text(box.x + box.w / 2, bottom + 30,
    "the step's events in order (ticks: where a layer starts, labelled with its number)",
    { ["text-anchor"] = "middle", fill = "#333", ["font-size"] = 11 })
end

-- A horizontal reference line with its label at the right or left end, a
-- halo behind the text so that it reads over the areas.
local function reference_line(out, class, y, label, box, anchor, dash, data, below)
  local attrs = { class = class, x1 = box.x, x2 = box.x + box.w, y1 = y, y2 = y, stroke = svg.capacity_colour,
    ["stroke-width"] = 1.4, ["stroke-dasharray"] = dash }
  for k, v in pairs(data or {}) do attrs[k] = v end
  out[#out + 1] = svg.el("line", attrs)
  local x = anchor == "end" and box.x + box.w - 4 or box.x + 4
  out[#out + 1] = svg.text(x, below and y + 13 or y - 4, label, { ["text-anchor"] = anchor, ["font-size"] = 11, fill = "#000",
    stroke = "#ffffff", ["stroke-width"] = 3, ["paint-order"] = "stroke" })
end

-- The peak: a dot where it is, a leader up to the strip above the plot
-- where its label sits (no area or line can hide it there).
local function draw_peak(out, e, index, peak_label, box, column, y_of)
  local x, y = (column.x0 + column.x1) / 2, y_of(e.live)
  out[#out + 1] = svg.el("line", { x1 = x, x2 = x, y1 = box.y - 14, y2 = y, stroke = svg.peak_colour,
    ["stroke-width"] = 0.8, ["stroke-dasharray"] = "3 2" })
  out[#out + 1] = svg.el("circle", { class = "peak", cx = x, cy = y, r = 4.5, fill = "#ffffff",
    stroke = svg.peak_colour, ["stroke-width"] = 2, ["data-peak-bytes"] = e.live, ["data-event"] = index,
    ["data-phase"] = e.phase, ["data-layer"] = e.layer or "", ["data-op"] = e.op },
    svg.el("title", nil, svg.escape(peak_label)))
  local w = svg.text_width(peak_label, 11)
  local anchor, tx = "middle", x
  if x - w / 2 < box.x then anchor, tx = "start", box.x
  elseif x + w / 2 > box.x + box.w then anchor, tx = "end", box.x + box.w end
  out[#out + 1] = svg.text(tx, box.y - 18, peak_label, { ["text-anchor"] = anchor, ["font-size"] = 11,
    ["font-weight"] = "bold", fill = "#000" })
end

-- One stage's timeline panel in box (x, y, w, h: the plotting area).
-- opts: capacity (bytes or nil), capacity_label, reserved (bytes or nil),
-- peak_note (a sentence after the peak's place).
function plot.timeline_panel(timeline, box, opts)
  local out = {}
  local n = #timeline
  local states = running(timeline)
  local peak = plot.peak_index(timeline)
  local columns = columns_of(timeline, box)
  local top = math.max(timeline[peak].live, opts.capacity or 0, opts.reserved or 0, 1)
  local step, axis_top = svg.ticks(top * 1.06, 6)
  local function x_of(i) return box.x + i / n * box.w end
  local function y_of(bytes) return box.y + box.h - bytes / axis_top * box.h end
  draw_bands(out, timeline, box, x_of)
  out[#out + 1] = svg.y_axis(box, axis_top, step, y_of)
  local categories = present_categories(states)
  draw_areas(out, columns, states, categories, peak, y_of)
  draw_layer_ticks(out, timeline, box, x_of)
  out[#out + 1] = svg.el("rect", { x = box.x, y = box.y, width = box.w, height = box.h, fill = "none",
    stroke = "#444", ["stroke-width"] = 0.8 })
  local capacity_y = opts.capacity and y_of(opts.capacity)
  if opts.reserved then
    local y = y_of(opts.reserved)
    local near = capacity_y and math.abs(y - capacity_y) < 16
    -- close to the capacity line: its label goes under the line
    reference_line(out, "reserved", y, "peak reserved by the caching allocator " .. report.bytes(opts.reserved),
      box, "start", "2 3", { ["data-bytes"] = opts.reserved }, near)
  end
  if opts.capacity then
    reference_line(out, "capacity", capacity_y, opts.capacity_label, box, "end", "8 4",
      { ["data-bytes"] = opts.capacity })
  end
  local e = timeline[peak]
  local label = "peak " .. report.bytes(e.live) .. " allocated: " .. where(e.phase, e.layer, e.op) .. (opts.peak_note or "")
  local column
  for _, col in ipairs(columns) do if col.index == peak then column = col end end
  draw_peak(out, e, peak, label, box, column, y_of)
  return table.concat(out, "\n"), categories
end

-- The peak of every pipeline stage as one stacked bar each, with the
-- capacity: each stage's peak includes the micro-batches it holds in
-- flight, which its timeline panel does not draw.
function plot.stage_panel(ranks, box, capacity, capacity_label)
  local out = {}
  local top = math.max(capacity or 0, 1)
  for _, st in ipairs(ranks) do top = math.max(top, st.peak_allocated_bytes) end
  local step, axis_top = svg.ticks(top * 1.06, 5)
  local function y_of(bytes) return box.y + box.h - bytes / axis_top * box.h end
  out[#out + 1] = svg.y_axis(box, axis_top, step, y_of)
  local slot = box.w / #ranks
  local bar = math.min(slot * 0.6, 90)
  for i, st in ipairs(ranks) do
    local x, below = box.x + (i - 0.5) * slot - bar / 2, 0
    local parts = {}
    for _, c in ipairs(svg.categories) do
      local v = st.peak_breakdown[c.key] or 0
      if v > 0 then
        parts[#parts + 1] = svg.el("rect", { class = "stage-part", ["data-category"] = c.key, ["data-bytes"] = v,
          x = x, y = y_of(below + v), width = bar, height = math.max(y_of(below) - y_of(below + v), 0),
          fill = c.colour, stroke = "#ffffff", ["stroke-width"] = 0.4 },
          svg.el("title", nil, svg.escape(c.label .. ": " .. report.bytes(v))))
        below = below + v
      end
    end
    out[#out + 1] = svg.el("g", { class = "stage", ["data-stage"] = st.stage,
      ["data-peak-bytes"] = st.peak_allocated_bytes }, parts)
    local cx = box.x + (i - 0.5) * slot
    out[#out + 1] = svg.text(cx, y_of(below) - 5, report.bytes(st.peak_allocated_bytes),
      { ["text-anchor"] = "middle", ["font-size"] = 10, fill = "#000" })
    out[#out + 1] = svg.text(cx, box.y + box.h + 14, string.format("stage %d", st.stage),
      { ["text-anchor"] = "middle", ["font-size"] = 11, fill = "#222" })
    out[#out + 1] = svg.text(cx, box.y + box.h + 27, string.format("layers %d-%d, %s", st.first_layer,
      st.first_layer + st.layers - 1, where(st.peak_phase, st.peak_layer, nil)),
      { ["text-anchor"] = "middle", ["font-size"] = 9, fill = "#555" })
  end
  out[#out + 1] = svg.el("rect", { x = box.x, y = box.y, width = box.w, height = box.h, fill = "none",
    stroke = "#444", ["stroke-width"] = 0.8 })
  if capacity then reference_line(out, "capacity", y_of(capacity), capacity_label, box, "end", "8 4",
    { ["data-bytes"] = capacity }) end
  return table.concat(out, "\n")
end

local function legend_items(categories)
  local items = {}
  for _, c in ipairs(categories) do items[#items + 1] = { label = c.label, colour = c.colour } end
  return items
end

local function phase_items(timeline)
  local items, seen = {}, {}
  for _, e in ipairs(timeline) do
    if not seen[e.phase] then
      seen[e.phase] = true
      items[#items + 1] = { label = "phase: " .. e.phase, colour = svg.phases[e.phase] or "#f0f0f0" }
    end
  end
  return items
end

-- The whole figure for one estimate (ctx as report.human's, its result
-- carrying the timeline). `standalone` writes an XML document (the --plot
-- file); otherwise an inline <svg> for the report page.
function plot.figure(ctx, standalone)
  local r, gpu = ctx.result, ctx.gpu
  assert(r.timeline and #r.timeline > 0, "plot.figure needs a result with its timeline")
  local out = {}
  local margin_left, margin_right = 64, 20
  local w = WIDTH - margin_left - margin_right
  local title = string.format("%s: memory over one training step%s", ctx.model_name,
    gpu and (" on " .. gpu.name) or "")
  out[#out + 1] = svg.text(margin_left, 24, title, { ["font-size"] = 15, ["font-weight"] = "bold", fill = "#000" })
  local recipe = r.recipe
  out[#out + 1] = svg.text(margin_left, 42, string.format("%s, %s, micro_batch %d x seq_len %d, checkpointing %s; %s",
    recipe.precision, recipe.optimizer, recipe.micro_batch, recipe.seq_len, recipe.checkpointing,
    report.verdict(r, gpu)), { ["font-size"] = 11, fill = "#333" })
  local pipeline = #r.ranks > 1
  local y = 78
  local capacity_label = gpu and (gpu.name .. " capacity " .. report.bytes(gpu.memory_bytes))
  -- one panel per pipeline stage, each from its own event log; the other
  -- micro-batches a stage holds in flight are added to its peak, not drawn
  local drawn = {}
  local stages = pipeline and r.ranks or { { timeline = r.timeline } }
  for _, st in ipairs(stages) do
    if pipeline then
      out[#out + 1] = svg.text(margin_left, y - 8, string.format("stage %d (layers %d-%d)", st.stage, st.first_layer,
        st.first_layer + st.layers - 1), { ["font-size"] = 12, fill = "#000" })
      y = y + 30
    end
    local box = { x = margin_left, y = y, w = w, h = pipeline and 260 or 380 }
    local note = pipeline and string.format("; the stage peaks at %s with %g micro-batches in flight",
      report.bytes(st.peak_allocated_bytes), st.in_flight) or nil
    local panel, used = plot.timeline_panel(st.timeline, box, {
      capacity = gpu and gpu.memory_bytes, capacity_label = capacity_label,
      reserved = not pipeline and r.peak_reserved_bytes or nil, peak_note = note,
    })
    for _, c in ipairs(used) do drawn[c.key] = true end
    out[#out + 1] = svg.el("g", { class = "panel", ["data-stage"] = pipeline and st.stage or nil }, panel)
    y = box.y + box.h + 56
  end
  -- the legend: every category some panel drew, in the palette's order
  local categories = {}
  for _, c in ipairs(svg.categories) do if drawn[c.key] then categories[#categories + 1] = c end end
  local legend
  legend, y = svg.legend(legend_items(categories), margin_left, y, margin_left + w)
  out[#out + 1] = legend
  -- the bands too: a narrow one (recompute between backward's layers) has
  -- no room for its name
  legend, y = svg.legend(phase_items(r.timeline), margin_left, y, margin_left + w)
  out[#out + 1] = legend
  if pipeline then
    y = y + 20
    out[#out + 1] = svg.text(margin_left, y, "every stage at its peak (allocated bytes, by category)",
      { ["font-size"] = 12, fill = "#000" })
    local stages = { x = margin_left, y = y + 16, w = w, h = 220 }
    out[#out + 1] = svg.el("g", { class = "panel stages" },
      plot.stage_panel(r.ranks, stages, gpu and gpu.memory_bytes, capacity_label))
    y = stages.y + stages.h + 40
  end
  return svg.document(WIDTH, math.ceil(y), out, title, standalone)
end

return plot
