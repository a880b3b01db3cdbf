-- Benchmark, run on demand (`make bench`): where a sweep's time goes, per
-- variant, on a sample of issue 18's grid (a) (Llama-2-7B, folded, on an
-- A100 80GB: 8,064 variants). Each part is timed on its own over the same
-- variants, as the sweep command runs it (os.clock: CPU time):
--   enumerating   grid.each
--   job           the variant's job in Lua: keys and origins, cached model,
--                 description and GPU (the evaluator less the two below)
--   engine        vramplan.estimate alone: recipe read, the simulation, the
--                 step-time model, the result's Lua tables
--   GPU check     job.try around it (keys copied, pcall, hardware.unsupported)
--   object        report.object, the parts the columns read
--   row           lookups and the CSV line
-- and, apart, what the command runs where every column can be filled in C
-- (sweep.row_maker: the job, then vramplan.estimate_row, no object).
-- docs/sweep.md (Performance) has the figures and the instruction counts.
-- Prints figures; asserts nothing.
package.cpath = "build/?.so;" .. package.cpath
package.path = "scripts/lib/?.lua;" .. package.path
local vramplan = require("vramplan")
local grid = require("vramplan.grid")
local job = require("vramplan.job")
local report = require("vramplan.report")
local sweep = require("vramplan.sweep")

local home = os.getenv("VRAMPLAN_HOME") or "."

local plan = sweep.from_args(home, {
  target = "llama2-7b", gpu = "a100-80gb", sets = { { "framework", "deepspeed", "--set framework=deepspeed" } },
  vary = { "micro_batch=1:16:5", "seq_len=512:16384:3072", "dp=1:64:*2", "zero=0:3", "checkpointing=none,full",
           "attention=sdpa,eager", "optimizer_impl=for-loop,foreach,fused" },
})
local fields = sweep.fields(plan)
-- (nil in a build before sweeps made only the parts their columns read:
-- VRAMPLAN_HOME=that tree's root, run from it, measures it as it was)
local parts = sweep.object_parts and sweep.object_parts(plan, fields)
local options = parts and sweep.estimate_options(parts)
local varied = {}
for _, k in ipairs(plan.columns) do varied[k] = true end
local format = sweep.format("csv")

local variants = {}
grid.each(plan, function(index, values) variants[#variants + 1] = { index, values } end)
local n = #variants

local function time(f)
  collectgarbage()
  local t0 = os.clock()
  f()
  return (os.clock() - t0) / n * 1e6
end

local t_enum = time(function() grid.each(plan, function() end) end)

local evaluate = sweep.evaluator(plan, fields)
local t_evaluate = time(function()
  for _, v in ipairs(variants) do evaluate(v[2]) end
end)

-- the engine and job.try on the same recipes (the keys a variant's job holds)
local j0 = job.load(home, { target = "llama2-7b", gpu = "a100-80gb", sets = {} })
local keys = {}
for i, v in ipairs(variants) do
  keys[i] = { framework = "deepspeed" }
  for k, x in pairs(v[2]) do keys[i][k] = x end
end
local t_engine = time(function()
  for i = 1, n do pcall(vramplan.estimate, j0.model, keys[i], j0.gpu, { fold = true, echo = options and options.echo }) end
end)
local function try(i)
  return job.try({ model = j0.model, keys = keys[i], origins = {}, description = j0.description, gpu = j0.gpu },
    nil, options)
end
local t_try = time(function()
  for i = 1, n do try(i) end
end)
-- (nothing kept: a list of 8,064 results or objects would leave the
-- garbage collector's work to whichever part runs next)
local t_try_object = time(function()
  for i = 1, n do
    local r = try(i)
    if r then report.object(job.context(j0, r), parts) end
  end
end)
local t_object = t_try_object - t_try
local objects = {}
for i = 1, n do
  local r = try(i)
  objects[i] = r and report.object(job.context(j0, r), parts)
end
local t_row = time(function()
  for i, v in ipairs(variants) do
    format.row(fields, sweep.row_values(fields, varied, v[1], v[2], objects[i] or nil, nil))
  end
end)

print(string.format("%d variants of grid (a), us per variant (CPU):", n))
local function line(name, us) print(string.format("  %-40s %8.2f", name, us)) end
line("enumerating (grid.each)", t_enum)
line("job (keys, origins, caches; Lua)", t_evaluate - t_try - t_object)
line("engine (vramplan.estimate)", t_engine)
line("GPU check (job.try around it)", t_try - t_engine)
line("object (report.object)", t_object)
line("row (lookups, CSV line)", t_row)
local total = t_enum + t_evaluate + t_row
print(string.format("  %-40s %8.2f  (%.0f variants per CPU second)", "total", total, 1e6 / total))

-- the rows in C: the same variants through the row maker (a build before it: skipped)
local row = sweep.row_maker and sweep.row_maker(plan, fields, "csv")
if row then
  local t_rows_c = time(function()
    for _, v in ipairs(variants) do row(v[1], v[2]) end
  end) + t_enum
  print(string.format("  %-40s %8.2f  (%.0f variants per CPU second)", "total with rows in C (the command's path)",
    t_rows_c, 1e6 / t_rows_c))
end
