-- vramplan.html — the report page: one self-contained HTML file (inline CSS
-- and SVG, nothing fetched, no script) for an estimate or a sweep.
local svg = require("vramplan.svg")
local report = require("vramplan.report")

local html = {}

local escape = svg.escape

-- Kept short and system-font only: the page must render offline.
local CSS = [[
body { font-family: "DejaVu Sans", Arial, sans-serif; color: #1a1a1a; margin: 24px auto; max-width: 1140px;
  padding: 0 16px; line-height: 1.4; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
.sub { color: #555; margin: 0 0 12px; }
.verdict { font-size: 17px; padding: 10px 14px; border-left: 6px solid; margin: 12px 0; }
.fits { border-color: #0072B2; background: #eaf3fa; }
.nofit { border-color: #D55E00; background: #fbeee6; }
.none { border-color: #999; background: #f3f3f3; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { padding: 3px 10px; text-align: left; border-bottom: 1px solid #e2e2e2; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.sum td { font-weight: bold; border-top: 1px solid #888; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 6px; border: 1px solid #555;
  vertical-align: -1px; }
.recipe { columns: 3 260px; font-size: 12px; }
.recipe div { break-inside: avoid; }
.recipe span { color: #666; }
figure { margin: 8px 0; }
svg { max-width: 100%; height: auto; }
footer { color: #777; font-size: 12px; margin-top: 30px; }
]]

-- A whole page around `body` (a list of HTML fragments), well-formed XML
-- as well as HTML (every element closed) so that an XML parser checks it.
function html.page(title, body)
  return table.concat({
    "<!DOCTYPE html>", '<html xmlns="http://www.w3.org/1999/xhtml" lang="en">', "<head>", '<meta charset="utf-8"/>',
    '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
    "<title>" .. escape(title) .. "</title>", "<style>" .. CSS .. "</style>", "</head>", "<body>",
    table.concat(body, "\n"), "</body>", "</html>", "",
  }, "\n")
end

local function row(cells, class)
  local out = { class and ('<tr class="' .. class .. '">') or "<tr>" }
  for _, c in ipairs(cells) do
    local numeric = type(c) == "table" and c.n
    local text = type(c) == "table" and c[1] or c
    out[#out + 1] = (numeric and '<td class="n">' or "<td>") .. text .. "</td>"
  end
  out[#out + 1] = "</tr>"
  return table.concat(out)
end

local function verdict_class(r, gpu)
  if not gpu then return "none" end
  return r.fits and "fits" or "nofit"
end

-- The breakdown at the peak, then what the allocator and runtime add.
local function breakdown(r)
  local out = { '<table><tr><th>at the peak</th><th class="n">bytes</th><th class="n">share</th></tr>' }
  for _, c in ipairs(svg.categories) do
    local v = r.peak_breakdown[c.key] or 0
    if v > 0 then
      out[#out + 1] = row({ '<span class="swatch" style="background:' .. c.colour .. '"></span>' .. escape(c.label),
        { report.bytes(v), n = true }, { string.format("%.1f %%", 100 * v / r.peak_allocated_bytes), n = true } })
    end
  end
  out[#out + 1] = row({ "= allocated (tensors live at the peak)", { report.bytes(r.peak_allocated_bytes), n = true },
    { "", n = true } }, "sum")
  out[#out + 1] = row({ "+ caching allocator", { report.bytes(r.allocator_bytes), n = true }, { "", n = true } })
  local runtime = "+ " .. report.runtime_label(r) .. ((r.nccl_bytes or 0) > 0 and " and NCCL's buffers" or "")
  if (r.symm_mem_bytes or 0) > 0 then runtime = runtime .. " (with async TP's symmetric memory)" end
  out[#out + 1] = row({ runtime, { report.bytes(r.runtime_bytes), n = true },
    { "", n = true } })
  out[#out + 1] = row({ "= total (what nvidia-smi would show)", { report.bytes(r.peak_total_bytes), n = true },
    { "", n = true } }, "sum")
  out[#out + 1] = "</table>"
  return table.concat(out, "\n")
end

local function where(st)
  local parts = { st.peak_phase }
  if st.peak_layer then parts[#parts + 1] = "layer " .. st.peak_layer end
  if st.peak_op and st.peak_op ~= "" then parts[#parts + 1] = st.peak_op end
  return escape(table.concat(parts, ", "))
end

local function ranks_table(r)
  local out = { '<table><tr><th>stage</th><th>layers</th><th class="n">in flight</th><th class="n">allocated</th>' ..
    '<th class="n">total</th><th>peak</th></tr>' }
  for _, st in ipairs(r.ranks) do
    out[#out + 1] = row({ tostring(st.stage) .. (st.stage == r.stage and " (worst)" or ""),
      string.format("%d-%d", st.first_layer, st.first_layer + st.layers - 1), { string.format("%g", st.in_flight), n = true },
      { report.bytes(st.peak_allocated_bytes), n = true }, { report.bytes(st.peak_total_bytes), n = true }, where(st) })
  end
  out[#out + 1] = "</table>"
  return table.concat(out, "\n")
end

-- Every key of the recipe as the engine resolved it (defaults included).
local function recipe_list(recipe)
  local keys = {}
  for k in pairs(recipe) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = { '<div class="recipe">' }
  for _, k in ipairs(keys) do
    local v = recipe[k]
    -- whole numbers as integers (1000000000, not 1000000000.0)
    if math.type(v) == "float" then v = math.tointeger(v) or string.format("%.6g", v) end
    out[#out + 1] = "<div><span>" .. escape(k) .. "</span> = " .. escape(tostring(v)) .. "</div>"
  end
  out[#out + 1] = "</div>"
  return table.concat(out, "\n")
end

-- The page of one estimate: ctx as report.human's, its result with the
-- timeline; `figure` the inline timeline SVG.
function html.estimate(ctx, figure)
  local r, gpu = ctx.result, ctx.gpu
  local title = string.format("vramplan: %s%s", ctx.model_name, gpu and (" on " .. gpu.name) or "")
  local summary = report.human(ctx)
  local body = {
    "<h1>" .. escape(title) .. "</h1>",
    '<p class="sub">' .. escape(summary:match("^[^\n]*")) .. "</p>",
    '<div class="verdict ' .. verdict_class(r, gpu) .. '">' .. escape(report.verdict(r, gpu)) .. "</div>",
    "<h2>At the peak: " .. where(r) .. (#r.ranks > 1 and (" (stage " .. r.stage .. ")") or "") .. "</h2>",
    breakdown(r),
    "<p>model states: parameters " .. report.bytes(r.params_bytes) .. ", gradients " .. report.bytes(r.grads_bytes) ..
      ", master weights " .. report.bytes(r.master_bytes) .. ", optimizer states " .. report.bytes(r.optimizer_bytes) ..
      "; activations at the end of forward " .. report.bytes(r.activations_bytes) .. ".</p>",
    "<h2>Timeline</h2>",
    "<figure>" .. figure .. "</figure>",
  }
  if #r.ranks > 1 then
    body[#body + 1] = "<h2>Pipeline stages</h2>"
    body[#body + 1] = ranks_table(r)
  end
  body[#body + 1] = "<h2>Recipe</h2>"
  body[#body + 1] = "<pre>" .. escape(summary:match("^[^\n]*\n(.-)\n\n") or "") .. "</pre>"
  body[#body + 1] = recipe_list(r.recipe)
  body[#body + 1] = "<footer>vramplan " .. escape(ctx.version) .. " — model from " .. escape(ctx.source) ..
    "</footer>"
  return html.page(title, body)
end

-- The page of a sweep: its figures (inline SVGs) and a table of the rows.
function html.sweep(title, subtitle, figures, header, rows)
  local body = { "<h1>" .. escape(title) .. "</h1>", '<p class="sub">' .. escape(subtitle) .. "</p>" }
  for _, f in ipairs(figures) do body[#body + 1] = "<figure>" .. f .. "</figure>" end
  body[#body + 1] = "<h2>Variants</h2>"
  local t = { "<table><tr>" }
  for _, h in ipairs(header) do t[#t + 1] = "<th>" .. escape(h) .. "</th>" end
  t[#t + 1] = "</tr>"
  for _, cells in ipairs(rows) do
    local escaped = {}
    for i, c in ipairs(cells) do escaped[i] = escape(c) end
    t[#t + 1] = row(escaped)
  end
  t[#t + 1] = "</table>"
  body[#body + 1] = table.concat(t, "\n")
  return html.page(title, body)
end

return html
