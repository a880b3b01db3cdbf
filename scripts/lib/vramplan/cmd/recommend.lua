-- vramplan recommend: every GPU, node and instance of the catalog for one
-- recipe, the fewest that fit, time and cost; cheapest first.
local job = require("vramplan.job")
local recommend = require("vramplan.recommend")
local report = require("vramplan.report")

local cmd = {
  usage = "recommend MODEL [--recipe FILE] [--set KEY=VALUE]... [--tokens N] [--max-gpus N] [--json]",
  help = [[For every GPU, node and cloud instance in hardware/: the fewest that fit the recipe (with the
recipe's framework, or else DDP, FSDP full_shard or ZeRO-3, whichever needs fewest), whole nodes and
instances; the step time and the hours to train on N tokens (default 1e9); the cost at the
published on-demand and spot prices. Cheapest first.]],
  flags = { recipe = "value", set = "set", json = "flag", tokens = "value", ["max-gpus"] = "value" },
  examples = {
    "vramplan recommend llama3-8b --set finetune=lora --set precision=bf16 --tokens 2e9",
  },
}

local function money(v) return v and string.format("%.0f", v) or "-" end

local function hours(h)
  if not h then return "-" end
  if h >= 48 then return string.format("%.1f d", h / 24) end
  return string.format("%.1f h", h)
end

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.target and not opts.recipe then cli.fail_usage("recommend needs a MODEL") end
  local tokens = cli.positive(opts, "tokens")
  local j = job.load(home, opts)
  local rows = recommend.recommend(j, { tokens = tokens, max_gpus = cli.positive(opts, "max_gpus", true) })
  tokens = tokens or 1e9
  if opts.json then
    local json = require("dkjson")
    print(json.encode({ model = { name = j.config.name, source = j.description.source }, tokens = tokens,
                        recommend = rows }, { indent = true }))
    return 0
  end
  print(string.format("%s: the fewest of each that fit, and %s training tokens on them", j.config.name,
    report.count(tokens)))
  print(string.format("%-32s %-9s %6s %-17s %11s %9s %9s %9s %9s", "hardware", "kind", "GPUs", "sharding", "needs/GPU",
    "time", "$/hour", "$ total", "$ spot"))
  for _, r in ipairs(rows) do
    if r.gpus then
      -- several nodes or instances: "4 x name"
      local name = r.units > 1 and r.kind ~= "gpu" and string.format("%d x %s", r.units, r.name) or r.name
      print(string.format("%-32s %-9s %6d %-17s %11s %9s %9s %9s %9s", name, r.kind, r.gpus, r.sharding,
        report.bytes(r.peak_total_bytes), hours(r.hours), money(r.price_per_hour and r.price_per_hour * r.units),
        money(r.cost), money(r.spot_cost)))
    end
  end
  local refused = {}
  for _, r in ipairs(rows) do if not r.gpus then refused[#refused + 1] = r end end
  if #refused > 0 then
    print("")
    print("not possible:")
    for _, r in ipairs(refused) do print(string.format("  %-30s %s", r.name, r.reason)) end
  end
  return 0
end

return cmd
