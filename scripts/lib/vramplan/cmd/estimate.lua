-- vramplan estimate: one recipe's memory on one GPU, as text or JSON.
local job = require("vramplan.job")
local report = require("vramplan.report")

local estimate = {
  usage = "estimate MODEL [--recipe FILE] [--set KEY=VALUE]... [--gpu NAME] [--json] [--timeline]\n"
    .. "estimate --recipe CONFIG.yaml [--model MODEL] ...   (a config file naming its model)",
  flags = { recipe = "value", gpu = "value", set = "set", json = "flag", timeline = "flag", model = "value" },
}

function estimate.run(opts, home)
  opts.target = opts.target or opts.model
  if not opts.target and not opts.recipe then require("vramplan.cli").fail_usage("estimate needs a MODEL") end
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
