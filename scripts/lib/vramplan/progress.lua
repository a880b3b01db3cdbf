-- vramplan.progress — a progress line on stderr (done/total, rate, ETA),
-- drawn only when stderr is a terminal: logs and pipes get nothing.
local vramplan = require("vramplan")

local progress = {}

-- the line is redrawn at most this often (seconds)
local REDRAW = 0.2

local function duration(seconds)
  seconds = math.floor(seconds + 0.5)
  if seconds >= 3600 then return string.format("%dh%02dm", seconds // 3600, seconds % 3600 // 60) end
  if seconds >= 60 then return string.format("%dm%02ds", seconds // 60, seconds % 60) end
  return string.format("%ds", seconds)
end

-- A bar for `total` variants (nil: unknown), or a silent one when stderr is
-- not a terminal or `quiet`.
function progress.new(total, quiet)
  local bar = { done = 0 }
  if quiet or not vramplan.isatty(2) then
    function bar.tick() end
    function bar.finish() end
    return bar
  end
  local start, drawn = vramplan.clock(), -math.huge
  local function draw(final)
    local now = vramplan.clock()
    if not final and now - drawn < REDRAW then return end
    drawn = now
    local elapsed = math.max(now - start, 1e-6)
    local rate = bar.done / elapsed
    local text = string.format("%d/%s variants, %.1f/s", bar.done, total and tostring(total) or "?", rate)
    if total and rate > 0 and not final then text = text .. ", ETA " .. duration((total - bar.done) / rate) end
    io.stderr:write("\r\27[K", text, final and "\n" or "")
    io.stderr:flush()
  end
  function bar.tick() bar.done = bar.done + 1; draw(false) end
  function bar.finish() draw(true) end
  return bar
end

return progress
