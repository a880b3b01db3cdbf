-- vramplan.recommend — every GPU, node and instance of the catalog for one
-- job: the fewest that fit (fit.gpus, over the frameworks that shard), the
-- step time at that count, the hours to train on N tokens, and what they
-- cost at the published prices; cheapest first.
local fit = require("vramplan.fit")
local hardware = require("vramplan.hardware")
local job = require("vramplan.job")
local report = require("vramplan.report")

local recommend = {}

-- The ways to spread a model over more GPUs tried when the recipe names no
-- framework: plain data parallelism (a whole replica per GPU), FSDP's
-- full_shard and DeepSpeed's ZeRO-3 (everything sharded).
local SHARDINGS = {
  { name = "ddp", changes = {} },
  { name = "fsdp full_shard", changes = { framework = "fsdp", fsdp = "full_shard" } },
  { name = "deepspeed zero-3", changes = { framework = "deepspeed", zero = 3 } },
}

-- How much faster (a fraction of the step) a more sharded way must be to
-- be recommended over a simpler one at the same GPU count.
local SIMPLER_WINS_WITHIN = 0.01

-- The job on other hardware: a GPU, and the node or instance holding it.
local function on(j, gpu, host)
  local d = job.derive(j, host and { gpus_per_node = host.gpus } or {}, "recommend")
  d.gpu, d.host = gpu, host
  return d
end

-- Every catalog entry: { kind, name, gpu, host?, unit (GPUs a unit), price?, spot? }.
local function catalog(home)
  local entries = {}
  for _, name in ipairs(hardware.list(home, "gpu")) do
    entries[#entries + 1] = { kind = "gpu", name = name, gpu = hardware.gpu(home, name), unit = 1 }
  end
  for _, kind in ipairs({ "node", "instance" }) do
    for _, name in ipairs(hardware.list(home, kind)) do
      local v = hardware[kind](home, name)
      -- a price of 0 is one not published
      entries[#entries + 1] = { kind = kind, name = name, gpu = v.gpu_spec, host = v, unit = v.gpus,
                                price = (v.price_per_hour or 0) > 0 and v.price_per_hour or nil,
                                spot = (v.spot_price_per_hour or 0) > 0 and v.spot_price_per_hour or nil }
    end
  end
  return entries
end

-- Does the host (node or instance) hold what the recipe offloads?
local function host_fits(result, host)
  if not host or not host.cpu_ram_gib or result.host_bytes == 0 then return true end
  return report.host(result, host).fits ~= false
end

-- Whole nodes or instances for fit.gpus's answer `a`: the units (a unit's
-- GPUs rounded up) and their dp; with global_batch kept, the fewest units
-- from there whose dp divides it (estimate refuses a global_batch that
-- micro_batch x dp does not divide), or nil.
local function whole_units(d, entry, a, max_gpus)
  if not a.value then return nil end
  local split = a.layout.tp * a.layout.pp * a.layout.cp
  local units = (a.value + entry.unit - 1) // entry.unit
  if d.keys.global_batch == nil then return units, units * entry.unit // split end
  local recipe = job.resolved_recipe(d)
  local per_rank = recipe.global_batch // recipe.micro_batch
  while units * entry.unit <= max_gpus do
    local dp = units * entry.unit // split
    if dp > per_rank then return nil end
    if recipe.global_batch % (recipe.micro_batch * dp) == 0 then return units, dp end
    units = units + 1
  end
  return nil
end

-- The fewest GPUs of one entry, over the shardings tried: the best
-- { gpus, units, sharding, result } (the cheapest, then the fastest), or
-- nil and why none fits.
local function fewest(j, entry, shardings, options)
  local best, why
  for _, s in ipairs(shardings) do
    local d = job.derive(j, s.changes, "recommend")
    local a = fit.gpus(d, { max = options.max_gpus })
    local units, dp = whole_units(d, entry, a, options.max_gpus)
    if a.value and not units then
      why = string.format("global_batch %d: no count of whole %ss of %d GPUs from %d GPUs on divides it",
        job.resolved_recipe(d).global_batch, entry.kind, entry.unit, a.value)
    elseif a.value then
      local r = job.try(d, { dp = dp })
      if r and r.fits and host_fits(r, entry.host) then
        local candidate = { gpus = units * entry.unit, units = units, sharding = s.name, result = r,
                            changes = job.keys_with(d, { dp = dp }) }
        -- at the same count a later (more sharded) way wins only by more
        -- than SIMPLER_WINS_WITHIN of the step: a few microseconds of
        -- optimizer traffic are within the step-time model's error, and the
        -- simpler setup is the one a user runs
        local ta, tb = r.time and r.time.step_s, best and best.result.time and best.result.time.step_s
        if not best or candidate.units < best.units
            or candidate.units == best.units and ta and tb and ta < tb * (1 - SIMPLER_WINS_WITHIN) then
          best = candidate
        end
      elseif r and not host_fits(r, entry.host) then
        why = "host memory too small for what the recipe offloads"
      end
    else
      why = why or a.reason
    end
  end
  return best, why
end

-- recommend.recommend(j, options): rows, cheapest first. options.tokens:
-- training tokens (default 1e9); options.max_gpus (default 4096).
function recommend.recommend(j, options)
  options = options or {}
  local tokens = options.tokens or 1e9
  options.max_gpus = options.max_gpus or 4096
  local shardings = SHARDINGS
  if j.keys.framework ~= nil then shardings = { { name = tostring(j.keys.framework), changes = {} } } end
  local recipe = job.resolved_recipe(j)
  local rows = {}
  for _, entry in ipairs(catalog(j.home)) do
    local row = { kind = entry.kind, name = entry.name, gpu = entry.gpu.short_name, price_per_hour = entry.price,
                  spot_price_per_hour = entry.spot }
    local _, refusal = hardware.unsupported(entry.gpu, recipe)
    if refusal then
      row.reason = refusal
    else
      local best, why = fewest(on(j, entry.gpu, entry.host), entry, shardings, options)
      if not best then
        row.reason = why or "does not fit"
      else
        local r, t = best.result, best.result.time
        row.gpus, row.units, row.sharding = best.gpus, best.units, best.sharding
        row.peak_total_bytes, row.headroom_bytes = r.peak_total_bytes, r.headroom_bytes
        row.changes = best.changes
        if t and t.tokens_per_s and t.tokens_per_s > 0 then
          row.step_s, row.tokens_per_s = t.step_s, t.tokens_per_s
          row.hours = tokens / t.tokens_per_s / 3600
          if entry.price then row.cost = row.hours * entry.price * best.units end
          if entry.spot then row.spot_cost = row.hours * entry.spot * best.units end
        end
      end
    end
    rows[#rows + 1] = row
  end
  -- cheapest first; then what fits without a price, fastest first; then
  -- what cannot run, by name
  table.sort(rows, function(a, b)
    local fa, fb = a.gpus ~= nil, b.gpus ~= nil
    if fa ~= fb then return fa end
    if a.cost and b.cost and a.cost ~= b.cost then return a.cost < b.cost end
    if (a.cost ~= nil) ~= (b.cost ~= nil) then return a.cost ~= nil end
    if a.hours and b.hours and a.hours ~= b.hours then return a.hours < b.hours end
    if (a.hours ~= nil) ~= (b.hours ~= nil) then return a.hours ~= nil end
    return a.name < b.name
  end)
  return rows, tokens
end

return recommend
