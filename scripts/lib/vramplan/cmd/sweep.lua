-- vramplan sweep: one row per variant of a grid (or a sweep script), in
-- variant order, streamed as CSV or JSON lines; in parallel, in shards,
-- resumable.
local grid = require("vramplan.grid")
local progress = require("vramplan.progress")
local rows = require("vramplan.rows")
local sweep = require("vramplan.sweep")
local vramplan = require("vramplan")

local cmd = {
  usage = "sweep MODEL [--recipe FILE] [--gpu NAME] [--set KEY=VALUE]... --vary KEY=LIST [--vary KEY=LIST]... [OPTIONS]\n"
    .. "sweep SWEEP.lua [OPTIONS]",
  -- worker and done are the parent's instructions to its --jobs workers
  flags = { recipe = "value", gpu = "value", set = "set", vary = "list", format = "value", out = "value",
            fields = "value", jobs = "value", shard = "value", resume = "flag", worker = "flag", done = "value" },
  help = [[OPTIONS: --format csv|jsonl  --out FILE  --fields LIST  --jobs N  --shard K/N  --resume
LIST is v1,v2,... or a:b:step or a:b:*k; the first --vary varies slowest.
Rows are numbered from 0 (variant); --shard K/N (0 <= K < N) keeps the
variants whose number is K modulo N. See docs/sweep.md.]],
}

local function fail_usage(msg) require("vramplan.cli").fail_usage(msg) end

local function split(text)
  local list = {}
  for item in text:gmatch("[^,]+") do list[#list + 1] = item end
  return list
end

-- Does the file look like a sweep script rather than a model (which needs
-- --vary)? Its text calls sweep.
local function is_sweep_script(path)
  local f = io.open(path, "r")
  local text = f and f:read(1 << 20) or ""
  if f then f:close() end
  return text:find("sweep%s*[{(]") ~= nil
end

-- The plan: a grid from --vary, or a sweep script.
local function plan_of(opts, home)
  -- a config file given as --recipe may name the model (estimate's rule), --vary model=... the models
  if not opts.target and not opts.vary then fail_usage("sweep needs a MODEL with --vary, or a sweep script") end
  if opts.positional[2] then fail_usage("unexpected argument " .. opts.positional[2]) end
  if opts.vary then
    local plan = sweep.from_args(home, opts)
    -- the workers' MODEL: the plan's, or (only a default then) the first varied one
    for _, axis in ipairs(plan.axes) do
      if not plan.model and axis.key == "model" then opts.target = axis.values[1] end
    end
    opts.target = plan.model or opts.target
    return plan
  end
  if not require("vramplan.files").is_file(opts.target) or not is_sweep_script(opts.target) then
    fail_usage("sweep " .. opts.target .. ": give --vary KEY=LIST, or a sweep script (return sweep { ... })")
  end
  if opts.recipe or opts.gpu or #opts.sets > 0 then
    fail_usage("a sweep script says its recipe, GPUs and keys itself (no --recipe, --gpu, --set)")
  end
  return require("vramplan.sweep_script").from_script(home, opts.target)
end

-- The command line of worker `j` of `jobs`: the same sweep on a finer shard.
local function worker_command(opts, fields, format, shard, j, jobs, done_path, err_path)
  local args = { vramplan.executable(), "sweep", opts.target }
  local function add(...) for _, a in ipairs({ ... }) do args[#args + 1] = a end end
  -- the workers look things up where this process does
  for _, dir in ipairs(vramplan.search_path or {}) do add("--path", dir) end
  if opts.recipe then add("--recipe", opts.recipe) end
  if opts.gpu then add("--gpu", opts.gpu) end
  for _, s in ipairs(opts.sets) do add("--set", s[1] .. "=" .. tostring(s[2])) end
  for _, v in ipairs(opts.vary or {}) do add("--vary", v) end
  add("--format", format, "--fields", table.concat(fields, ","), "--jobs", "1", "--worker",
    "--shard", string.format("%d/%d", shard[1] + shard[2] * j, shard[2] * jobs))
  if done_path then add("--done", done_path) end
  for i, a in ipairs(args) do args[i] = "'" .. a:gsub("'", "'\\''") .. "'" end
  return table.concat(args, " ") .. " 2>" .. err_path
end

-- Writes the done set for the workers (one variant a line).
local function write_done(done)
  if next(done) == nil then return nil end
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  for v in pairs(done) do f:write(v, "\n") end
  f:close()
  return path
end

local function read_done(path)
  local done = {}
  for line in io.lines(path) do done[math.tointeger(tonumber(line))] = true end
  return done
end

-- The output stream, the variants it already holds and whether the header
-- is still to be written.
local function open_output(opts, header)
  if opts.worker then return io.stdout, opts.done and read_done(opts.done) or {}, false end
  if not opts.out then
    if opts.resume then fail_usage("--resume needs --out FILE") end
    return io.stdout, {}, true
  end
  if not opts.resume then
    local f, why = io.open(opts.out, "w")
    if not f then error("cannot write " .. tostring(why), 0) end
    return f, {}, true
  end
  local done, fresh = rows.resume(opts.out, header)
  local f, why = io.open(opts.out, "a")
  if not f then error("cannot write " .. tostring(why), 0) end
  return f, done, fresh
end

-- Starts the workers; returns them ({ pipe, err_path }).
local function start_workers(opts, fields, format, shard, jobs, done)
  local done_path = write_done(done)
  local workers = { done_path = done_path }
  for j = 0, jobs - 1 do
    local err_path = os.tmpname()
    local pipe = io.popen(worker_command(opts, fields, format, shard, j, jobs, done_path, err_path), "r")
    workers[j] = { pipe = pipe, err_path = err_path }
  end
  return workers
end

local function read_all(path)
  local f = io.open(path, "r")
  local s = f and f:read("a") or ""
  if f then f:close() end
  return s
end

-- Closes the workers; when `check`, raises if one failed or wrote too much.
local function stop_workers(workers, jobs, check)
  local problem
  for j = 0, jobs - 1 do
    local w = workers[j]
    local extra = check and w.pipe:read("l")
    local ok = w.pipe:close()
    if check and not problem and (extra or not ok) then
      problem = string.format("worker %d of %d failed: %s", j, jobs, read_all(w.err_path):gsub("\n+$", ""))
    end
    os.remove(w.err_path)
  end
  if workers.done_path then os.remove(workers.done_path) end
  if problem then error(problem, 0) end
end

-- Where rows come from: emit(index, values) -> the row's line, evaluated
-- here (--jobs 1) or read from the worker whose turn it is (workers own
-- every jobs-th variant of the shard, so their turns come round-robin);
-- and the workers, if any.
local function row_source(plan, opts, fields, format_name, shard, jobs, done)
  if jobs > 1 then
    local workers = start_workers(opts, fields, format_name, shard, jobs, done)
    return function(index)
      local w = workers[(index // shard[2]) % jobs]
      local line = w.pipe:read("l")
      if not line then
        local why = read_all(w.err_path):gsub("\n+$", "")
        error(string.format("variant %d: its worker stopped early: %s", index, why), 0)
      end
      return line
    end, workers
  end
  -- the row made in C where every column can be (the estimate's figures)
  local row = sweep.row_maker(plan, fields, format_name)
  if row then return row end
  local format, evaluate = sweep.format(format_name), sweep.evaluator(plan, fields)
  local varied = {}
  for _, k in ipairs(plan.columns) do varied[k] = true end
  return function(index, values)
    local object, message = evaluate(values)
    return format.row(fields, sweep.row_values(fields, varied, index, values, object, sweep.one_line(message)))
  end
end

-- The number of variants this run will write (for the progress bar).
local function count(plan, shard, done)
  local n = 0
  grid.each(plan, function(index) if grid.owns(shard, index) and not done[index] then n = n + 1 end end)
  return n
end

function cmd.run(opts, home)
  local plan = plan_of(opts, home)
  local fields = sweep.fields(plan, opts.fields and split(opts.fields))
  local format_name = opts.format or (opts.out and opts.out:match("%.jsonl$") and "jsonl") or "csv"
  local format = sweep.format(format_name)
  local shard = opts.shard and grid.parse_shard(opts.shard) or { 0, 1 }
  local jobs = require("vramplan.cli").positive(opts, "jobs", true) or vramplan.cpu_count()
  local header = format.header(fields)
  if opts.resume then
    local has_variant = false
    for _, f in ipairs(fields) do has_variant = has_variant or f == "variant" end
    if not has_variant then fail_usage("--resume needs the variant field") end
  end
  local out, done, fresh = open_output(opts, header)
  if fresh and header then out:write(header, "\n"); out:flush() end
  local bar = progress.new(vramplan.isatty(2) and not opts.worker and count(plan, shard, done) or nil, opts.worker)

  local emit, workers = row_source(plan, opts, fields, format_name, shard, jobs, done)
  local ok, err = pcall(grid.each, plan, function(index, values)
    if not grid.owns(shard, index) or done[index] then return end
    out:write(emit(index, values), "\n")
    out:flush()
    bar.tick()
  end)
  if workers then
    local stopped, problem = pcall(stop_workers, workers, jobs, ok)
    if ok and not stopped then ok, err = false, problem end
  end
  bar.finish()
  if out ~= io.stdout then out:close() end
  if not ok then error(err, 0) end
  return 0
end

return cmd
