-- bench/measure.lua — what the benchmarks measure a command with: wall
-- time, and the CPU time (user + system) of the processes it started, read
-- from /proc/self/stat (fields 16 and 17, cutime and cstime, in clock
-- ticks; proc(5)), which a loaded machine does not inflate as it does the
-- wall time.
package.cpath = "build/?.so;" .. package.cpath
package.path = "scripts/lib/?.lua;" .. package.path
local vramplan = require("vramplan")

local measure = {}

local function clock_ticks()
  local p = io.popen("getconf CLK_TCK 2>/dev/null")
  local t = p and tonumber(p:read("l") or "")
  if p then p:close() end
  return t or 100
end

local ticks = clock_ticks()

-- The CPU seconds of this process's waited-for children, or nil.
function measure.children_cpu()
  local f = io.open("/proc/self/stat")
  if not f then return nil end
  local stat = f:read("a")
  f:close()
  -- the command name (field 2) may hold spaces: count the fields after its ')'
  local fields = {}
  for v in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = v end
  return (tonumber(fields[14]) + tonumber(fields[15])) / ticks
end

-- Runs `command` (a shell line) once: ok, wall seconds, CPU seconds (nil
-- where /proc is not).
function measure.run(command)
  local cpu0, t0 = measure.children_cpu(), vramplan.clock()
  local ok = os.execute(command)
  local wall, cpu1 = vramplan.clock() - t0, measure.children_cpu()
  return ok, wall, cpu0 and cpu1 - cpu0
end

return measure
