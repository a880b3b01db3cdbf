-- vramplan estimate: one recipe's memory on one GPU, as text or JSON.
local job = require("vramplan.job")
local report = require("vramplan.report")

local estimate = {
  usage = "estimate MODEL [--recipe FILE|NAME] [--set KEY=VALUE]... [--gpu GPU|NODE|INSTANCE] [--gpus N] [--json]"
    .. " [--timeline]",
  flags = { recipe = "value", gpu = "value", gpus = "value", set = "set", json = "flag", timeline = "flag" },
}

function estimate.run(opts, home)
  if not opts.target then require("vramplan.cli").fail_usage("estimate needs a MODEL") end
  if opts.positional[2] then require("vramplan.cli").fail_usage("unexpected argument " .. opts.positional[2]) end
  local j = job.load(home, opts)
  -- the timeline shows every layer: no folding of identical layers then
  local result = job.estimate(j, nil, { timeline = opts.timeline })
  local ctx = job.context(j, result)
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
