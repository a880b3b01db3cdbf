-- vramplan.plan — layouts for N GPUs: every way the framework can split
-- them (dp x tp x pp x cp, experts over ep), with its sharding,
-- checkpointing and offload options and the largest micro-batch that
-- fits; each judged by a full estimate and ranked by step time.
local job = require("vramplan.job")
local fit = require("vramplan.fit")

local plan = {}

local function divisors(n, cap)
  local list = {}
  for d = 1, math.min(n, cap or n) do
    if n % d == 0 then list[#list + 1] = d end
  end
  return list
end

-- The ways each framework splits `gpus` GPUs, before options.
-- Megatron: tp within a node of 8 (Narayanan et al. 2021, section 3.3),
-- pp dividing the layers evenly, cp splitting the sequence, ep (experts)
-- drawn from dp x tp x cp (parallel_state.py); DeepSpeed, FSDP and DDP
-- spread the data over every GPU.
local function layouts(framework, gpus, config)
  local list = {}
  if framework ~= "megatron" then
    list[1] = { framework = framework, dp = gpus }
    return list
  end
  local experts = config.experts or 0
  for _, tp in ipairs(divisors(gpus, 8)) do
    for _, pp in ipairs(divisors(gpus // tp, config.layers)) do
      if (config.layers or 1) % pp == 0 then
        for _, cp in ipairs(divisors(gpus // (tp * pp), 16)) do
          local dp = gpus // (tp * pp * cp)
          local eps = experts > 1 and divisors(math.min(experts, dp * tp * cp)) or { 1 }
          for _, ep in ipairs(eps) do
            if experts <= 1 or experts % ep == 0 then
              list[#list + 1] = { framework = "megatron", dp = dp, tp = tp, pp = pp, cp = cp,
                                  ep = experts > 1 and ep or nil }
            end
          end
        end
      end
    end
  end
  return list
end

-- The options tried on a layout, lightest in memory first: the first is
-- what decides whether the layout can fit at all (pruning: a layout that
-- does not fit at micro_batch 1 with its lightest options is not tried
-- further).
local function options_for(layout)
  local checkpointing = { "full", "every-2", "layers-2", "none" }
  if layout.framework == "megatron" then checkpointing = { "full", "selective", "none" } end
  local shard = { {} }
  if layout.framework == "deepspeed" then
    shard = { { zero = 3, offload_optimizer = "cpu" }, { zero = 3 }, { zero = 2, offload_optimizer = "cpu" },
              { zero = 2 }, { zero = 1 } }
  elseif layout.framework == "fsdp" then
    shard = { { fsdp = "full_shard", offload_params = "cpu" }, { fsdp = "full_shard" }, { fsdp = "shard_grad_op" } }
  elseif layout.framework == "fsdp2" then
    -- fully_shard's reshard_after_forward: True re-gathers in backward
    -- (ZeRO-3), False keeps the gathered weights from forward to backward
    shard = { { reshard_after_forward = true }, { reshard_after_forward = false } }
  elseif layout.framework == "megatron" then
    shard = { {} }
    if layout.dp > 1 then shard[1].distributed_optimizer = true end
    if layout.tp > 1 then shard[1].sequence_parallel = true end
  end
  local list = {}
  for _, s in ipairs(shard) do
    for _, c in ipairs(checkpointing) do
      local o = { checkpointing = c }
      for k, v in pairs(s) do o[k] = v end
      list[#list + 1] = o
    end
  end
  return list
end

local function merge(...)
  local out = {}
  for i = 1, select("#", ...) do
    for k, v in pairs(select(i, ...) or {}) do out[k] = v end
  end
  return out
end

-- Step time of a result, when the time model gives one.
local function tokens_per_s(r)
  return r.time and r.time.tokens_per_s or nil
end

-- Ranking: tokens per second where the time model gives it; otherwise the
-- least recomputation, then the largest micro-batch, then the most headroom.
local recompute_rank = { none = 0, selective = 1, ["every-4"] = 2, ["every-2"] = 3, full = 4 }
local function faster(a, b)
  local ta, tb = tokens_per_s(a.result), tokens_per_s(b.result)
  if ta and tb and ta ~= tb then return ta > tb end
  local ra, rb = recompute_rank[a.recipe.checkpointing] or 5, recompute_rank[b.recipe.checkpointing] or 5
  if ra ~= rb then return ra < rb end
  local oa = (a.recipe.offload_optimizer or "none") ~= "none" or (a.recipe.offload_params or "none") ~= "none"
  local ob = (b.recipe.offload_optimizer or "none") ~= "none" or (b.recipe.offload_params or "none") ~= "none"
  if oa ~= ob then return ob end
  if a.recipe.micro_batch ~= b.recipe.micro_batch then return a.recipe.micro_batch > b.recipe.micro_batch end
  return a.result.headroom_bytes > b.result.headroom_bytes
end

-- A candidate is dominated when another is at least as fast and needs no
-- more memory, and is strictly better in one of them.
local function dominated(a, b)
  if not faster(b, a) then return false end
  return b.result.peak_total_bytes <= a.result.peak_total_bytes
end

local key_of = job.changes_key

-- Does the recipe set one of these keys to something else? Keys the user
-- set are kept: the search runs over the rest.
local function pinned_elsewhere(keys, changes)
  for k, v in pairs(changes) do
    if k ~= "gpus" and keys[k] ~= nil and tostring(keys[k]) ~= tostring(v) then return true end
  end
  return false
end

-- The candidate with the largest micro_batch that fits under `changes`
-- (the recipe's own micro_batch when it sets one; with global_batch set,
-- the largest that keeps it exactly), or nil; and the estimates it took.
local function best_micro_batch(j, changes, options)
  if j.keys.micro_batch then
    local r = job.try(j, changes)
    if not r or not r.fits then return nil, 1 end
    return { changes = changes, recipe = r.recipe, result = r }, 1
  end
  local mb = fit.micro_batch(job.derive(j, changes, "plan"), { max = options.max_micro_batch or 64 })
  local value = mb.value
  if mb.grad_accum then value = mb.dividing and mb.dividing.value end
  if not value then return nil, mb.estimates or 0 end
  local final = merge(changes, { micro_batch = value })
  local r = job.estimate(j, final)
  return { changes = final, recipe = r.recipe, result = r }, (mb.estimates or 0) + 1
end

-- plan.plan(j, gpus, options): { candidates = {...} (best first), rejected
-- = { [reason] = count }, rejections = { {reason, changes, count} ... } (the
-- recipe changes each reason was found at), estimates = n }. options.frameworks limits the
-- frameworks searched (default: the recipe's, or all five when the recipe
-- names none).
function plan.plan(j, gpus, options)
  options = options or {}
  local frameworks = options.frameworks
  if not frameworks then
    frameworks = j.keys.framework and { j.keys.framework } or { "torch", "deepspeed", "fsdp", "fsdp2", "megatron" }
  end
  local rejected, candidates, estimates, seen = {}, {}, 0, {}
  local rejections = {}
  local function reject(reason, changes, n)
    rejected[reason] = (rejected[reason] or 0) + (n or 1)
    rejections[#rejections + 1] = { reason = reason, changes = changes, count = n or 1 }
  end
  for _, framework in ipairs(frameworks) do
    for _, layout in ipairs(layouts(framework, gpus, j.config)) do
      local tries = options_for(layout)
      -- pruning: the lightest options at micro_batch 1
      local lightest = merge(layout, tries[1], { micro_batch = 1, gpus = gpus })
      local r = job.try(j, lightest)
      estimates = estimates + 1
      if not r then
        reject("layout invalid", lightest, #tries)
      elseif not r.fits then
        reject("does not fit", lightest, #tries)
      else
        for _, o in ipairs(tries) do
          local changes = merge(layout, o, { gpus = gpus })
          if pinned_elsewhere(j.keys, changes) then
            reject("excluded by the recipe", changes)
          elseif not seen[key_of(changes)] then
            seen[key_of(changes)] = true
            local c, n = best_micro_batch(j, changes, options)
            estimates = estimates + n
            if c then candidates[#candidates + 1] = c else reject("does not fit", merge(changes, { micro_batch = 1 })) end
          end
        end
      end
    end
  end
  table.sort(candidates, faster)
  local kept = {}
  for _, c in ipairs(candidates) do
    local beaten = false
    for _, k in ipairs(kept) do
      if dominated(c, k) then beaten = true break end
    end
    if beaten then reject("dominated", c.changes) else kept[#kept + 1] = c end
  end
  return { candidates = kept, rejected = rejected, rejections = rejections, estimates = estimates }
end

return plan
