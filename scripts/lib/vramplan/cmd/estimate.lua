-- vramplan estimate: one recipe's memory on one GPU, as text or JSON, and
-- drawn (--plot FILE.svg, --report FILE.html).
local files = require("vramplan.files")
local job = require("vramplan.job")
local report = require("vramplan.report")

local estimate = {
  usage = "estimate MODEL [--recipe FILE|NAME] [--set KEY=VALUE]... [--gpu GPU|NODE|INSTANCE] [--gpus N] [--json]"
    .. " [--timeline]\n    [--plot FILE.svg] [--report FILE.html]\n"
    .. "estimate --recipe CONFIG.yaml [--model MODEL] ...   (a config file naming its model)",
  flags = { recipe = "value", gpu = "value", gpus = "value", set = "set", json = "flag", timeline = "flag",
            plot = "value", report = "value", model = "value" },
  examples = {
    "vramplan estimate llama3-8b --gpu h100-80gb --set micro_batch=4 --set seq_len=4096 --set checkpointing=full",
    "vramplan estimate llama2-7b --recipe qlora-all-linear-paged --gpu rtx4090 --json",
    "vramplan estimate llama2-7b --gpu a100-80gb --plot step.svg --report step.html",
  },
}

-- The drawings the user asked for, each written to the file named.
local function draw(ctx, opts)
  local plot = require("vramplan.plot")
  if opts.plot then files.write(opts.plot, plot.figure(ctx, true)) end
  if opts.report then files.write(opts.report, require("vramplan.html").estimate(ctx, plot.figure(ctx, false))) end
end

function estimate.run(opts, home)
  opts.target = opts.target or opts.model
  if not opts.target and not opts.recipe then require("vramplan.cli").fail_usage("estimate needs a MODEL") end
  if opts.positional[2] then require("vramplan.cli").fail_usage("unexpected argument " .. opts.positional[2]) end
  local j = job.load(home, opts)
  -- the timeline (printed or drawn) shows every layer: no folding of
  -- identical layers then
  local drawn = opts.plot or opts.report
  -- with the timeline (an unfolded evaluation already), the output also
  -- carries the caching allocator simulated over the step and over the
  -- whole run (per_gpu.peak_reserved_simulated_bytes,
  -- peak_reserved_run_bytes); allocator = simulated always does, and uses
  -- the step's
  local result = job.estimate(j, nil, { timeline = opts.timeline or drawn ~= nil,
                                        simulate_allocator = opts.timeline or drawn ~= nil })
  local ctx = job.context(j, result)
  if drawn then
    draw(ctx, opts)
    if not opts.timeline then result.timeline = nil end -- asked for to draw, not to print
  end
  if opts.json then
    print(report.json(ctx))
  else
    print(report.human(ctx))
    if opts.timeline then
      print("")
      print(report.timeline(result))
    end
  end
  return 0
end

return estimate
