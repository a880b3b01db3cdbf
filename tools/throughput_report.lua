-- tools/throughput_report.lua: vramplan's step time against the published
-- throughput rows of tests/reference/throughput.json, one line a row, and
-- the median and worst error. Run from the repository root after `make`:
--   lua5.4 tools/throughput_report.lua [--markdown]
package.cpath = "./build/?.so;" .. package.cpath
package.path = "./scripts/lib/?.lua;./?.lua;" .. package.path
local rows = require("tests.lua.throughput_rows")

local markdown = arg[1] == "--markdown"
local results = rows.compare(".")
local errors = {}
if markdown then
  print("| id | printed | published time | vramplan | vramplan / published | why they differ |")
  print("|---|---|---|---|---|---|")
end
for _, r in ipairs(results) do
  local row = r.row
  if r.skipped then
    print(markdown and string.format("| %s | %s | skipped | | | %s |", row.id, row.value_raw .. " " .. row.unit, r.skipped)
      or string.format("%-16s skipped: %s", row.id, r.skipped))
  else
    errors[#errors + 1] = math.abs(r.ratio - 1)
    local unit = row.vramplan.measure == "layer" and " (one layer)" or ""
    if markdown then
      print(string.format("| %s | %s | %.4g s%s | %.4g s | %.2f | %s |", row.id, row.value_raw .. " " .. row.unit,
        row.published_time_s, unit, r.modelled, r.ratio, row.difference or ""))
    else
      print(string.format("%-16s published %9.4g s%s  vramplan %9.4g s  ratio %.2f%s", row.id, row.published_time_s, unit,
        r.modelled, r.ratio, math.abs(r.ratio - 1) > 0.25 and "  OUTSIDE 25 %" or ""))
    end
  end
end
local worst = 0
local within = 0
for _, e in ipairs(errors) do
  if e > worst then worst = e end
  if e <= 0.25 then within = within + 1 end
end
print(string.format("%s%d rows compared, median error %.1f %%, worst %.1f %%, %d within 25 %%", markdown and "\n" or "",
  #errors, 100 * rows.median(errors), 100 * worst, within))
