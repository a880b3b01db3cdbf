-- Benchmark, run on demand (`make bench`): the sweep command end to end
-- (the built binary, rows written to /dev/null), variants per second per
-- core and total time for issue 18's three cases: (a) Llama-2-7B over seven
-- recipe keys (172,032 variants), (b) a shape grid of 15,600 dense models
-- (every variant a model of its own), (c) (a) with --jobs 2. Per core is per CPU second of the processes (bench/measure.lua:
-- on a loaded machine the wall time waits for a CPU). Prints figures;
-- asserts nothing.
package.path = "bench/?.lua;" .. package.path
local measure = require("measure")

local bin = os.getenv("VRAMPLAN_BIN") or "build/vramplan" -- another build to compare with

local recipe_grid = {
  "llama2-7b", "--set", "framework=deepspeed", "--gpu", "a100-80gb",
  "--vary", "micro_batch=1:16", "--vary", "seq_len=512:16384:512", "--vary", "dp=1:64:*2", "--vary", "zero=0:3",
  "--vary", "checkpointing=none,full", "--vary", "attention=sdpa,eager",
  "--vary", "optimizer_impl=for-loop,foreach,fused",
}

local shape_grid = {
  "llama2-7b", "--gpu", "h100-80gb", "--set", "checkpointing=full", "--set", "seq_len=2048", "--set", "kv_heads=8",
  "--vary", "hidden=1024:8192:512", "--vary", "layers=4:80:4", "--vary", "heads=8,16,32,64",
  "--vary", "intermediate=4096:28672:2048",
}

local function count(args)
  local n = 1
  for i, a in ipairs(args) do
    if a == "--vary" then n = n * #require("vramplan.grid").parse_list(args[i + 1]:match("=(.*)$")) end
  end
  return n
end

local function run(name, args, jobs)
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = "'" .. a .. "'" end
  local command = string.format("%s sweep %s --jobs %d --out /dev/null", bin, table.concat(quoted, " "), jobs)
  local ok, seconds, cpu = measure.run(command)
  local n = count(args)
  print(string.format("%-34s %8d %5d %10.2f %10.2f %12.0f %16s%s", name, n, jobs, seconds, cpu or 0 / 0,
    n / seconds, cpu and string.format("%.0f", n / cpu) or "-", ok and "" or "  (failed)"))
end

print(string.format("%-34s %8s %5s %10s %10s %12s %16s", "sweep", "variants", "jobs", "wall s", "CPU s", "variants/s",
  "variants/CPU s"))
run("(a) llama2-7b, 7 recipe keys", recipe_grid, 1)
run("(b) dense shapes, 4 model fields", shape_grid, 1)
run("(c) (a) with --jobs 2", recipe_grid, 2)
