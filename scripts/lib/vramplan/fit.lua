-- vramplan.fit — the largest micro-batch, the longest sequence and the
-- fewest GPUs that fit, everything else in the recipe fixed. Every answer
-- is what trying each value with `estimate` would give: the searches only
-- skip values a monotone quantity rules out.
--
-- Where memory is monotone: the peak grows with micro_batch and seq_len
-- and does not grow with more data-parallel ranks (up to a point:
-- first_fitting), as long as the number of
-- micro-batches one optimizer step runs stays in the same class. That
-- number is not always fixed: with `global_batch` it is global_batch /
-- (micro_batch x dp), and it changes what is live — one micro-batch holds
-- no accumulated gradients between passes, and a pipeline keeps
-- min(micro-batches, stages) in flight (1F1B's warm-up), so a larger
-- micro-batch can need *less* memory once it leaves fewer micro-batches in
-- flight. The searches therefore split the values into runs over which
-- that class is constant (`segments`) and bisect within each run.
local job = require("vramplan.job")

local fit = {}

-- A lower bound of a result's total that is monotone where the allocated
-- peak is: the allocated peak of each rank, the fragmentation share on top
-- of it, and the runtime but NCCL's buffers. The total adds the caching
-- allocator's segment rounding (estimate.c), which depends on the mix of
-- blocks at the peak and so is not monotone: one more token can need a few
-- MiB less; and NCCL's buffers, which grow where a group starts to span
-- another node (engine/step/nccl.c: trees), while the rest falls with dp.
function fit.lower_bound(r)
  local f = r.recipe.fragmentation
  local bound = 0
  for _, rank in ipairs(r.ranks or { r }) do
    local b = rank.peak_allocated_bytes + math.floor(f * rank.peak_allocated_bytes) + rank.runtime_bytes
      - rank.nccl_bytes
    if b > bound then bound = b end
  end
  return bound
end

-- Whether index i's result fits, and whether its lower bound still
-- allows a fit (results[i] = at(i)).
local function tests(at, capacity)
  local function fits(i)
    local r = at(i)
    return r ~= nil and r.fits == true
  end
  local function possible(i)
    local r = at(i)
    return r ~= nil and fit.lower_bound(r) <= capacity
  end
  return fits, possible
end

-- The largest index in 1..n whose result fits, where results[i] = at(i).
-- A doubling search and bisection find the boundary as if fitting were
-- monotone; then, because the total is not, every index past it is tried
-- while its lower bound (monotone, checked against the engine by
-- fit_spec) still allows a fit. Returns nil when none fits.
local function last_fitting(n, at, capacity)
  local fits, possible = tests(at, capacity)
  local good
  if fits(1) then
    good = 1
    local bad, step = nil, 1
    while not bad do
      local probe = good + step
      if probe >= n then bad = fits(n) and n + 1 or n
        if bad > n then good = n end
      elseif fits(probe) then good = probe
      else bad = probe end
      step = step * 2
    end
    while bad - good > 1 do
      local mid = (good + bad) // 2
      if fits(mid) then good = mid else bad = mid end
    end
  end
  local i = (good or 0) + 1
  while i <= n and possible(i) do
    if fits(i) then good = i end
    i = i + 1
  end
  return good
end

-- The smallest index in 1..n whose result fits, where fitting is (nearly)
-- monotone the other way over the small indices: more ranks, less memory.
-- Not over all of them: FSDP2 pads each parameter's dim 0 to a multiple of
-- the ranks (FSDPParam._init_sharded_param, torch 2.4-2.6
-- torch/distributed/_composable/fsdp/_fsdp_param.py: each shard is
-- ceil(dim 0 / ranks) rows; engine/policy/framework_fsdp2.c), so once the ranks
-- outnumber a weight's rows each all-gather gathers a row per rank and the
-- gathered size grows with them: Qwen3-30B-A3B's experts (768 rows) need
-- 19 GiB a GPU at dp 64 and 31 GiB at dp 4096. So the search widens from 1
-- upwards by doubling to the first index that fits, bisects below it, then
-- widens downwards as last_fitting does upwards.
local function first_fitting(n, at, capacity)
  local fits, possible = tests(at, capacity)
  local bad, good, probe = 0, nil, 1
  while not good do
    if fits(probe) then good = probe
    elseif probe >= n then break
    else bad, probe = probe, math.min(probe * 2, n) end
  end
  if not good then
    -- the widening below still looks for a fit under the bound
    local i, found = n - 1, nil
    while i > bad and possible(i) do
      if fits(i) then found = i end
      i = i - 1
    end
    return found
  end
  while good - bad > 1 do
    local mid = (good + bad) // 2
    if fits(mid) then good = mid else bad = mid end
  end
  local i = good - 1
  while i >= 1 and possible(i) do
    if fits(i) then good = i end
    i = i - 1
  end
  return good
end

-- A memoized probe: changes -> result (nil and a message when the engine
-- refuses the recipe). Counts the estimates it ran.
local function prober(j, base)
  local cache, self = {}, { estimates = 0 }
  function self.at(changes)
    local key = job.changes_key(changes)
    local hit = cache[key]
    if not hit then
      local merged = {}
      for k, v in pairs(base or {}) do merged[k] = v end
      for k, v in pairs(changes) do merged[k] = v end
      self.estimates = self.estimates + 1
      local result, err = job.try(j, merged)
      hit = { result = result, err = err }
      cache[key] = hit
    end
    return hit.result, hit.err
  end
  function self.fits(changes)
    local r = self.at(changes)
    return r ~= nil and r.fits == true
  end
  return self
end

local resolved = job.resolved_recipe

-- The micro-batches of one optimizer step when `global_batch` is kept:
-- ceil(global / (micro_batch x dp)), and whether it divides evenly.
local function accumulation(global, micro_batch, dp)
  local per_pass = micro_batch * dp
  return (global + per_pass - 1) // per_pass, global % per_pass == 0
end

-- The class of a micro-batch count within which the peak is monotone
-- (see the file's comment): one micro-batch, or as many in flight as a
-- pipeline holds.
local function accumulation_class(count, pp)
  local cap = math.max(pp, 2)
  return math.min(count, cap)
end

-- Runs of consecutive integers lo..hi over which class(v) is constant.
local function segments(lo, hi, class)
  local runs = {}
  local v = lo
  while v <= hi do
    local c, first = class(v), v
    -- classes change at most a handful of times: step to the run's end by
    -- bisection over the contiguous range
    local good, bad = v, hi + 1
    if class(hi) == c then good = hi
    else
      while bad - good > 1 do
        local mid = (good + bad) // 2
        if class(mid) == c then good = mid else bad = mid end
      end
    end
    runs[#runs + 1] = { first, good }
    v = good + 1
  end
  return runs
end

-- The smallest value >= 1 the engine accepts for `key` (others fixed):
-- layouts constrain sizes by divisibility (sequence parallelism splits
-- micro_batch x seq_len over tp; context parallelism splits seq_len in
-- 2 x cp chunks), so the accepted values are the multiples of it.
local function granularity(probe, key, limit)
  for v = 1, math.min(limit, 4096) do
    if probe.at({ [key] = v }) then return v end
  end
  return nil
end

local function outcome(result)
  return { peak_total_bytes = result.peak_total_bytes, headroom_bytes = result.headroom_bytes }
end

-- Fills answer.next_short_by_bytes from the next value's result.
local function next_step(answer, result, err)
  if result then
    answer.next_short_by_bytes = result.fits and 0 or -result.headroom_bytes
  else
    answer.next_short_by_bytes = nil
    answer.next_error = err
  end
end

-- The largest value of `key` up to `limit` that fits, among the multiples
-- of the smallest value the engine accepts (granularity): the answer, or
-- { value = nil, reason } with the shortfall of the smallest.
local function largest_multiple(probe, key, limit, capacity)
  local g = granularity(probe, key, limit)
  if not g then
    local _, err = probe.at({ [key] = 1 })
    return { value = nil, reason = err, estimates = probe.estimates }
  end
  local n = limit // g
  local i = last_fitting(n, function(i) return probe.at({ [key] = i * g }) end, capacity)
  if not i then
    local r = probe.at({ [key] = g })
    return { value = nil, reason = string.format("%s %d does not fit", key, g), peak_total_bytes = r.peak_total_bytes,
             short_by_bytes = -r.headroom_bytes, estimates = probe.estimates }
  end
  local answer = outcome(probe.at({ [key] = i * g }))
  answer.value = i * g
  if i < n then next_step(answer, probe.at({ [key] = (i + 1) * g })) end
  answer.estimates = probe.estimates
  return answer
end

-- The largest micro_batch that fits.
function fit.micro_batch(j, options)
  options = options or {}
  local recipe = resolved(j)
  local global = j.keys.global_batch and recipe.global_batch or nil
  local probe = prober(j, global and { global_batch = job.unset } or nil)
  if global then
    -- keep the global batch: each micro_batch runs ceil(global / (mb x dp)) micro-batches
    local dp, pp = recipe.dp, recipe.pp
    local accum_key = pp > 1 and "num_microbatches" or "grad_accum"
    local function changes(mb)
      return { micro_batch = mb, [accum_key] = (accumulation(global, mb, dp)) }
    end
    local hi = global // dp
    if hi < 1 then
      return { value = nil, reason = string.format("global_batch %d is smaller than dp %d", global, dp) }
    end
    local best
    for _, run in ipairs(segments(1, hi, function(mb) return accumulation_class((accumulation(global, mb, dp)), pp) end)) do
      local i = last_fitting(run[2] - run[1] + 1, function(i) return probe.at(changes(run[1] + i - 1)) end,
        j.gpu.memory_bytes)
      if i and (not best or run[1] + i - 1 > best) then best = run[1] + i - 1 end
    end
    if not best then
      local r, err = probe.at(changes(1))
      return { value = nil, reason = r and "micro_batch 1 does not fit" or err,
               peak_total_bytes = r and r.peak_total_bytes, short_by_bytes = r and -r.headroom_bytes,
               estimates = probe.estimates }
    end
    local r = probe.at(changes(best))
    local answer = outcome(r)
    answer.value = best
    answer.grad_accum, answer.divides = accumulation(global, best, dp)
    answer.global_batch = best * dp * answer.grad_accum
    if best < hi then next_step(answer, probe.at(changes(best + 1))) end
    -- the largest that keeps the global batch exactly (a divisor of global / dp)
    for mb = best, 1, -1 do
      if (global // dp) % mb == 0 and global % dp == 0 and probe.fits(changes(mb)) then
        answer.dividing = { value = mb, grad_accum = global // (mb * dp) }
        break
      end
    end
    answer.estimates = probe.estimates
    return answer
  end
  return largest_multiple(probe, "micro_batch", options.max or (1 << 24), j.gpu.memory_bytes)
end

-- The model's position limit (learned positions refuse longer sequences;
-- rotary models are trained up to it), or nil when it has none.
local function position_limit(j)
  return j.config.max_positions
end

-- The longest seq_len that fits, up to the model's position limit or
-- options.max.
function fit.seq_len(j, options)
  options = options or {}
  local probe = prober(j)
  local limit = options.max or position_limit(j)
  if not limit then
    return { value = nil, reason = "the model has no position limit: give --max-seq" }
  end
  local answer = largest_multiple(probe, "seq_len", limit, j.gpu.memory_bytes)
  if answer.value then answer.limit = limit end
  return answer
end

-- The smallest dp in lo..hi that fits, with the other layout keys in
-- `layout`; `global` keeps the global batch (micro-batch count per dp).
local function fewest_dp(probe, layout, hi, global, recipe, capacity)
  local accum_key = (layout.pp or recipe.pp) > 1 and "num_microbatches" or "grad_accum"
  local function changes(dp)
    local c = { dp = dp }
    for k, v in pairs(layout) do c[k] = v end
    if global then c[accum_key] = (accumulation(global, recipe.micro_batch, dp)) end
    return c
  end
  local runs = { { 1, hi } }
  if global then
    hi = math.min(hi, global // recipe.micro_batch)
    runs = segments(1, hi, function(dp)
      return accumulation_class((accumulation(global, recipe.micro_batch, dp)), layout.pp or recipe.pp)
    end)
  end
  local best
  for _, run in ipairs(runs) do
    local i = first_fitting(run[2] - run[1] + 1, function(i) return probe.at(changes(run[1] + i - 1)) end,
      capacity)
    if i and (not best or run[1] + i - 1 < best) then best = run[1] + i - 1 end
  end
  return best, changes
end

-- The fewest GPUs: the smallest dp with the recipe's framework and
-- sharding; with framework = megatron the smallest tp x pp x dp (cp and
-- ep as the recipe sets them).
function fit.gpus(j, options)
  options = options or {}
  local recipe = resolved(j)
  local max_gpus = options.max or 65536
  local global = j.keys.global_batch and recipe.global_batch or nil
  local probe = prober(j, global and { global_batch = job.unset } or nil)
  local layouts = { {} }
  if recipe.framework == "megatron" then
    layouts = {}
    -- tensor parallelism stays within a node of 8 GPUs (Narayanan et al.
    -- 2021, section 3.3: tp up to the GPUs per server); pp divides the
    -- layers (Megatron-LM's _get_num_layers, megatron/legacy/model/transformer.py:
    -- "num_layers must be divisible by transformer_pipeline_model_parallel_size"),
    -- as vramplan.plan splits them
    local layers = j.config.layers or 1
    for tp = 1, 8 do
      for pp = 1, layers do
        if layers % pp == 0 then layouts[#layouts + 1] = { tp = tp, pp = pp } end
      end
    end
    table.sort(layouts, function(a, b)
      if a.tp * a.pp ~= b.tp * b.pp then return a.tp * a.pp < b.tp * b.pp end
      return a.tp < b.tp
    end)
  end
  local other = recipe.cp * (recipe.framework == "megatron" and 1 or recipe.tp * recipe.pp)
  local best
  for _, layout in ipairs(layouts) do
    local width = (layout.tp or 1) * (layout.pp or 1) * other
    if best and width > best.gpus then break end
    local hi = max_gpus // width
    if hi >= 1 then
      local dp, changes = fewest_dp(probe, layout, hi, global, recipe, j.gpu.memory_bytes)
      if dp and (not best or dp * width < best.gpus) then
        best = { dp = dp, layout = layout, gpus = dp * width, changes = changes(dp), prev = dp > 1 and changes(dp - 1) }
      end
    end
  end
  if not best then
    local r, err = probe.at({})
    local reason = r and string.format("nothing up to %d GPUs fits", max_gpus) or err
    local at_max = probe.at({ dp = max_gpus // other })
    if r and at_max and at_max.peak_total_bytes >= r.peak_total_bytes then
      reason = reason .. ": more data-parallel ranks do not shrink this recipe's memory per GPU (each keeps a " ..
        "whole replica); shard it (framework deepspeed with zero, fsdp, or megatron with tp/pp)"
    end
    return { value = nil, reason = reason, estimates = probe.estimates }
  end
  local answer = outcome(probe.at(best.changes))
  answer.value = best.gpus
  answer.layout = { dp = best.dp, tp = best.layout.tp or recipe.tp, pp = best.layout.pp or recipe.pp, cp = recipe.cp }
  if best.prev then next_step(answer, probe.at(best.prev)) end
  if global then
    -- as fit.micro_batch says it: the micro-batches per step at that dp, whether they keep the global batch
    -- exactly (the engine refuses a global_batch that is not a multiple of micro_batch x dp), and the
    -- fewest ranks of that layout that keep it exactly
    local mb = recipe.micro_batch
    answer.grad_accum, answer.divides = accumulation(global, mb, best.dp)
    answer.global_batch = mb * best.dp * answer.grad_accum
    if not answer.divides then
      local width = best.gpus // best.dp
      for dp = best.dp + 1, math.min(global // mb, max_gpus // width) do
        if global % (mb * dp) == 0 then
          local c = {}
          for k, v in pairs(best.changes) do c[k] = v end
          c.dp = dp
          c[(best.layout.pp or recipe.pp) > 1 and "num_microbatches" or "grad_accum"] = global // (mb * dp)
          if probe.fits(c) then
            answer.dividing = { value = dp * width, dp = dp, grad_accum = global // (mb * dp) }
            break
          end
        end
      end
    end
  end
  answer.estimates = probe.estimates
  return answer
end

return fit
