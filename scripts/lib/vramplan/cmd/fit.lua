-- vramplan fit: the largest micro-batch, the longest sequence and the
-- fewest GPUs that fit the given GPU, the rest of the recipe fixed.
local fit = require("vramplan.fit")
local job = require("vramplan.job")
local report = require("vramplan.report")

local cmd = {
  usage = "fit MODEL [--recipe FILE] [--set KEY=VALUE]... --gpu NAME [--max-seq N] [--max-gpus N] [--json]",
  help = [[With everything else in the recipe fixed: the largest micro_batch that fits (with global_batch set,
the grad_accum that keeps it and whether it divides evenly), the longest seq_len (up to the model's
position limit or --max-seq) and the fewest GPUs (the smallest dp; with framework = megatron the
smallest tp x pp x dp; with global_batch set, whether it divides it too). Each answer is what
`estimate` gives when trying every value.]],
  flags = { recipe = "value", gpu = "value", set = "set", json = "flag", ["max-seq"] = "value", ["max-gpus"] = "value" },
  examples = {
    "vramplan fit mistral-7b --gpu a100-80gb --set framework=deepspeed --set zero=3 --set dp=8 --set seq_len=4096 --set checkpointing=full",
    "vramplan fit llama3-70b --gpu h100-80gb --set framework=fsdp --set checkpointing=full --json",
  },
}

local function describe(what, a, unit_of, next_word)
  if a.value == nil then
    return string.format("%-16s none: %s%s", what, a.reason,
      a.short_by_bytes and (" (short by " .. report.bytes(a.short_by_bytes) .. ")") or "")
  end
  local s = string.format("%-16s %s (needs %s, %s to spare)", what, unit_of(a), report.bytes(a.peak_total_bytes),
    report.bytes(a.headroom_bytes))
  if a.next_short_by_bytes then s = s .. string.format("; %s is short by %s", next_word or "one more", report.bytes(a.next_short_by_bytes))
  elseif a.next_error then s = s .. string.format("; %s is refused: %s", next_word or "one more", a.next_error) end
  return s
end

-- The JSON answer: {value, peak_total_bytes, next_short_by_bytes, ...} or
-- {value = null, reason}.
local function answer_object(a, json)
  local o = {}
  for k, v in pairs(a) do o[k] = v end
  if o.value == nil then o.value = json.null end
  if o.next_short_by_bytes == nil and a.value ~= nil then o.next_short_by_bytes = json.null end
  return o
end

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.target and not opts.recipe then cli.fail_usage("fit needs a MODEL") end -- a config may name it
  if not opts.gpu then cli.fail_usage("fit needs --gpu NAME") end
  local j = job.load(home, opts)
  local base = job.estimate(j)
  local answers = {
    micro_batch = fit.micro_batch(j),
    seq_len = fit.seq_len(j, { max = cli.positive(opts, "max_seq", true) }),
    gpus = fit.gpus(j, { max = cli.positive(opts, "max_gpus", true) }),
  }
  if opts.json then
    local json = require("dkjson")
    local o = report.object(job.context(j, base))
    o.fit = {
      micro_batch = answer_object(answers.micro_batch, json), seq_len = answer_object(answers.seq_len, json),
      gpus = answer_object(answers.gpus, json),
    }
    print(json.encode(o, { indent = true }))
    return 0
  end
  local r = base.recipe
  print(string.format("%s on %s: %s, %s, micro_batch %d x seq_len %d, checkpointing %s, %s dp %d%s",
    j.config.name, j.gpu.name, r.precision, r.optimizer, r.micro_batch, r.seq_len, r.checkpointing, r.framework, r.dp,
    r.framework == "deepspeed" and (", ZeRO-" .. r.zero) or ""))
  print(report.verdict(base, j.gpu))
  print("")
  local mb = answers.micro_batch
  print(describe("micro_batch", mb, function(a)
    local s = tostring(a.value)
    if a.grad_accum then
      s = s .. string.format(" with grad_accum %d (%s global_batch %d)", a.grad_accum,
        a.divides and "keeps" or "rounds up to", a.global_batch)
      if not a.divides and a.dividing then
        s = s .. string.format("; %d x %d keeps it exactly", a.dividing.value, a.dividing.grad_accum)
      end
    end
    return s
  end))
  print(describe("seq_len", answers.seq_len, function(a)
    return string.format("%d%s", a.value, a.value == a.limit and " (the limit)" or string.format(" (limit %d)", a.limit))
  end))
  print(describe("GPUs", answers.gpus, function(a)
    local l = a.layout
    local s = string.format("%d (dp %d%s%s%s)", a.value, l.dp, l.tp > 1 and (" x tp " .. l.tp) or "",
      l.pp > 1 and (" x pp " .. l.pp) or "", l.cp > 1 and (" x cp " .. l.cp) or "")
    if a.grad_accum then
      s = s .. string.format(" with grad_accum %d (%s global_batch %d)", a.grad_accum,
        a.divides and "keeps" or "rounds up to", a.global_batch)
      if not a.divides and a.dividing then
        s = s .. string.format("; %d (dp %d, grad_accum %d) keep it exactly", a.dividing.value, a.dividing.dp,
          a.dividing.grad_accum)
      end
    end
    return s
  end, "one fewer"))
  return 0
end

return cmd
