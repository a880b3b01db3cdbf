-- vramplan advise: what binds at the peak of a recipe that does not fit
-- (or barely does), and the recipe changes that make it fit.
local advise = require("vramplan.advise")
local job = require("vramplan.job")
local report = require("vramplan.report")

local cmd = {
  usage = "advise MODEL [--recipe FILE] [--set KEY=VALUE]... --gpu NAME [--json]",
  help = [[The binding term at the peak (rank, phase, layer, op, category) and fixes: single recipe changes
first, then the best combinations of two or three that fit, each with its peak and headroom from a
full estimate; changes that alter what is trained (LoRA, QLoRA, 8-bit optimizers, precision) are
listed apart; changes that would not help are named.]],
  flags = { recipe = "value", gpu = "value", set = "set", json = "flag" },
  examples = {
    "vramplan advise llama2-13b --gpu a100-80gb --set framework=deepspeed --set zero=2 --set dp=4 --set micro_batch=4 --set seq_len=4096",
  },
}

local function set_lines(changes)
  local keys = {}
  for k in pairs(changes) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = string.format("--set %s=%s", k, tostring(changes[k])) end
  return table.concat(parts, " ")
end

-- "stage 0, backward of layer 3, attention.softmax: activations 146.2 GiB of 224.1 GiB"
local function binding_text(b, stages)
  local place = {}
  if stages > 1 then place[#place + 1] = "stage " .. b.rank end
  place[#place + 1] = b.layer and string.format("%s of layer %d", b.phase, b.layer) or b.phase
  local where = table.concat(place, ", ")
  if b.op and b.op ~= "" then where = where .. ", " .. b.op end
  return string.format("%s: %s %s of %s allocated (%s in all)", where, b.category, report.bytes(b.bytes),
    report.bytes(b.peak_allocated_bytes), report.bytes(b.peak_total_bytes))
end

local function fix_line(f)
  local ratio = f.step_time_ratio and string.format("  step x%.2f", f.step_time_ratio) or ""
  return string.format("  %-4s %11s %12s  %s%s\n         %s", f.fits and "fits" or "no", report.bytes(f.peak_total_bytes),
    (f.headroom_bytes >= 0 and "+" or "-") .. report.bytes(math.abs(f.headroom_bytes)), set_lines(f.changes), ratio,
    f.note)
end

local function fix_object(f, json)
  return {
    changes = f.changes, peak_total_bytes = f.peak_total_bytes, fits = f.fits, headroom_bytes = f.headroom_bytes,
    step_time_ratio = f.step_time_ratio or json.null, changes_training = f.changes_training, note = f.note,
  }
end

function cmd.run(opts, home)
  local cli = require("vramplan.cli")
  if not opts.target and not opts.recipe then cli.fail_usage("advise needs a MODEL") end -- a config may name it
  if not opts.gpu then cli.fail_usage("advise needs --gpu NAME") end
  local j = job.load(home, opts)
  local advice, base = advise.advise(j)
  if opts.json then
    local json = require("dkjson")
    local o = report.object(job.context(j, base))
    local b = advice.binding
    local fixes, no_help = {}, {}
    for i, f in ipairs(advice.fixes) do fixes[i] = fix_object(f, json) end
    for i, f in ipairs(advice.no_help) do
      no_help[i] = { changes = f.changes, saves_bytes = f.saves_bytes, note = f.why_not or f.note }
    end
    o.advice = {
      binding = { rank = b.rank, phase = b.phase, layer = b.layer == nil and json.null or b.layer, op = b.op,
                  category = b.category, bytes = b.bytes },
      fixes = fixes, no_help = no_help, refused = advice.refused,
    }
    print(json.encode(o, { indent = true }))
    return 0
  end
  print(report.human(job.context(j, base)):match("^(.-)\n\n"))
  print(report.verdict(base, j.gpu))
  print("")
  print("binding: " .. binding_text(advice.binding, #base.ranks))
  if advice.fits then
    print(string.format("the recipe fits with %s to spare; the changes below would free more", report.bytes(advice.headroom_bytes)))
  end
  local same, other = {}, {}
  for _, f in ipairs(advice.fixes) do
    if f.changes_training then other[#other + 1] = f else same[#same + 1] = f end
  end
  print("")
  print("fixes that keep the training as it is (peak, headroom, changes):")
  for _, f in ipairs(same) do print(fix_line(f)) end
  if #other > 0 then
    print("")
    print("fixes that change what is trained:")
    for _, f in ipairs(other) do print(fix_line(f)) end
  end
  if #advice.no_help > 0 then
    print("")
    print("will not help:")
    for _, f in ipairs(advice.no_help) do
      print(string.format("  %-40s saves %s%s", set_lines(f.changes), report.bytes(math.max(f.saves_bytes, 0)),
        f.why_not and (": " .. f.why_not) or ""))
    end
  end
  return 0
end

return cmd
