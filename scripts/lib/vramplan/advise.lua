-- vramplan.advise — for a recipe that does not fit (or barely does): what
-- binds at the peak, and which small sets of recipe changes make it fit,
-- each judged by a full estimate. Changes that alter what is trained
-- (adapters, a quantized base, another optimizer or precision) are kept
-- apart from those that only change how the same training runs.
local job = require("vramplan.job")
local fit = require("vramplan.fit")

local advise = {}

-- Savings below this share of the peak are "no help" (allocator rounding
-- alone moves the total by a few MiB).
local NO_HELP_SHARE = 0.005

-- What binds: the worst rank's peak, its place and its largest category.
function advise.binding(result)
  local category, bytes = nil, -1
  for name, v in pairs(result.peak_breakdown) do
    if v > bytes or (v == bytes and name < category) then category, bytes = name, v end
  end
  return {
    rank = result.stage or 0, phase = result.peak_phase, layer = result.peak_layer, op = result.peak_op,
    category = category, bytes = bytes, peak_total_bytes = result.peak_total_bytes,
    peak_allocated_bytes = result.peak_allocated_bytes,
  }
end

local function add(list, changes, note, changes_training)
  list[#list + 1] = { changes = changes, note = note, changes_training = changes_training or false }
end

-- Checkpointing, attention kernels and micro-batch splitting: the same
-- training with less activation memory. `result`: the estimate's (its SDPA
-- kernel), where known.
local function activation_fixes(r, list, keys, result)
  if r.checkpointing == "none" then
    add(list, { checkpointing = "full" }, "recompute each layer in backward (about a third more compute)")
    add(list, { checkpointing = "every-2" }, "checkpoint every second layer's input")
    add(list, { checkpointing = "every-4" }, "checkpoint every fourth layer's input")
    add(list, { checkpointing = "layers-2" }, "checkpoint every second layer alone, the others not at all (half the recompute)")
    add(list, { checkpointing = "selective" }, "recompute the attention core only (Korthikanti et al. 2022)")
    add(list, { checkpointing = "op-selective" }, "torchtitan's op-level policy: matmul and attention outputs kept, the rest recomputed")
  elseif r.checkpointing ~= "full" then
    add(list, { checkpointing = "full" }, "recompute each layer in backward")
  end
  if r.attention == "eager" then
    add(list, { attention = "sdpa" }, "PyTorch's scaled_dot_product_attention (flash or memory-efficient kernel)")
    add(list, { attention = "flash" }, "FlashAttention-2: no [s, s] scores kept")
  elseif r.attention ~= "flash" then
    add(list, { attention = "flash" }, "FlashAttention-2")
    -- torch.nn.functional.scaled_dot_product_attention dispatches to the
    -- flash kernel for 16-bit inputs without an explicit mask (PyTorch's
    -- sdp_utils can_use_flash_attention)
    list[#list].why_not = r.precision ~= "fp32" and "SDPA already runs the flash kernel" or nil
  end
  -- transformers' enable_gqa where SDPA's memory-efficient kernel runs: a
  -- PyTorch before pytorch#191085 falls back to the math backend ([s, s]
  -- probabilities kept); the newest takes the heads as they are
  if r.attention == "sdpa" and r.sdpa_enable_gqa and r.torch_version ~= "2.x" and result
      and result.sdpa_kernel == "efficient" then
    add(list, { torch_version = "2.x" },
      "a PyTorch whose memory-efficient attention takes the key/value heads (pytorch#191085): no math-backend fallback")
  end
  -- the loss without [tokens, vocab] fp32 logits (refused where the model
  -- has no language-model head)
  if r.loss == "cross-entropy" then
    add(list, { loss = "chunked" }, "torchtune's chunked cross-entropy: the fp32 logits one chunk at a time")
    add(list, { loss = "fused-linear" }, "Liger's fused linear cross-entropy: no full logits at all")
    add(list, { loss = "liger-ce" }, "Liger's cross-entropy in transformers' loss: the gradient written into the fp32 logits")
  end
  -- Liger-Kernel's norm and MLP kernels (where its patch for the model type
  -- has none, the estimate does not move: no help)
  if not r.liger_rms_norm then
    add(list, { liger_rms_norm = true }, "Liger-Kernel's RMSNorm: each norm keeps its input and an fp32 rstd, not fp32 copies")
  end
  if not r.liger_swiglu then
    add(list, { liger_swiglu = true }, "Liger-Kernel's SwiGLU: each MLP keeps gate and up, not the activation's output")
  end
  if not r.liger_rms_norm and not r.liger_swiglu and r.loss == "cross-entropy" then
    add(list, { liger_rms_norm = true, liger_swiglu = true, loss = "fused-linear" },
      "use_liger_kernel: Liger's RMSNorm, SwiGLU and fused linear cross-entropy")
  end
  if not r.offload_activations then
    add(list, { offload_activations = true }, "saved activations to pinned host memory (save_on_cpu)")
  end
  -- a smaller micro-batch, the global batch kept by accumulating
  local mb = r.micro_batch
  local seen = {}
  for _, div in ipairs({ 2, 4, mb }) do
    local smaller = mb // div
    if div > 1 and smaller >= 1 and mb % div == 0 and not seen[smaller] then
      seen[smaller] = true
      local changes = { micro_batch = smaller }
      if not keys.global_batch then
        changes[r.pp > 1 and "num_microbatches" or "grad_accum"] = r.grad_accum * div
      end
      add(list, changes, string.format("micro_batch %d with %d x the accumulation: the same global batch", smaller, div))
    end
  end
end

-- Sharding and offload: the same training spread over the ranks or the host.
local function state_fixes(r, list)
  if r.framework == "torch" and r.dp > 1 then
    for zero = 1, 3 do
      add(list, { framework = "deepspeed", zero = zero }, string.format("DeepSpeed ZeRO-%d over the %d ranks", zero, r.dp))
    end
    add(list, { framework = "fsdp", fsdp = "full_shard" }, "FSDP full_shard over the ranks")
    add(list, { framework = "fsdp2" }, "FSDP2 (fully_shard): each parameter sharded over the ranks")
  elseif r.framework == "deepspeed" then
    for zero = r.zero + 1, 3 do
      add(list, { zero = zero }, string.format("ZeRO-%d: shard %s too", zero,
        zero == 1 and "optimizer states" or zero == 2 and "gradients" or "parameters"))
    end
    if r.offload_optimizer == "none" and r.zero >= 1 then
      add(list, { offload_optimizer = "cpu" }, "ZeRO-Offload: optimizer states, master weights and step on the CPU")
    end
    if r.offload_params == "none" and r.zero == 3 then
      add(list, { offload_params = "cpu" }, "ZeRO-3 parameter offload to the CPU")
    end
  elseif r.framework == "fsdp" then
    if r.fsdp == "shard_grad_op" or r.fsdp == "no_shard" then
      add(list, { fsdp = "full_shard" }, "FSDP full_shard: parameters sharded too")
    end
    if r.offload_params == "none" then add(list, { offload_params = "cpu" }, "FSDP CPUOffload") end
  elseif r.framework == "megatron" then
    if r.tp < 8 then
      add(list, { tp = r.tp * 2, dp = math.max(1, r.dp // 2) },
        string.format("tensor parallelism %d (the same GPUs: dp %d)", r.tp * 2, math.max(1, r.dp // 2)))
    end
    add(list, { pp = r.pp * 2, dp = math.max(1, r.dp // 2) },
      string.format("pipeline parallelism %d (the same GPUs: dp %d)", r.pp * 2, math.max(1, r.dp // 2)))
    if r.tp > 1 and not r.sequence_parallel then
      add(list, { sequence_parallel = true }, "Megatron sequence parallelism over the tp ranks")
    end
    if not r.distributed_optimizer and r.dp > 1 then
      add(list, { distributed_optimizer = true }, "Megatron's distributed optimizer: states sharded over dp")
    end
    add(list, { cp = r.cp * 2, dp = math.max(1, r.dp // 2) },
      string.format("context parallelism %d (the same GPUs: dp %d)", r.cp * 2, math.max(1, r.dp // 2)))
  end
end

-- When gradients live: the same update, applied as each gradient is made
-- (torchtune's optimizer_in_bwd; the engine refuses it with accumulation,
-- several GPUs or mixed precision).
local function gradient_fixes(r, list)
  if not r.optimizer_in_backward and r.grad_accum == 1 and r.gpus == 1 and r.optimizer ~= "none" then
    add(list, { optimizer_in_backward = true },
      "step each parameter in backward and free its gradient at once (no clipping over the global norm)")
  end
end

-- Changes to what is trained: listed apart.
local function training_fixes(r, list)
  if r.finetune == "full" then
    add(list, { finetune = "lora" }, "LoRA adapters: the base frozen, only adapters trained", true)
    -- QLoRA as PEFT runs it autocasts over its 4-bit base; frameworks with
    -- their own mixed precision keep theirs (the engine refuses what cannot run)
    add(list, { finetune = "qlora", precision = "amp-bf16" }, "QLoRA: a 4-bit frozen base and LoRA adapters", true)
    add(list, { finetune = "qlora" }, "QLoRA: a 4-bit frozen base and LoRA adapters", true)
  end
  if r.optimizer == "adamw" or r.optimizer == "adam" or r.optimizer == "adamw-hf" then
    add(list, { optimizer = "adamw-8bit" }, "bitsandbytes 8-bit AdamW states", true)
    add(list, { optimizer = "paged-adamw-8bit" }, "8-bit AdamW states in paged (unified) memory", true)
    add(list, { optimizer = "adafactor" }, "Adafactor's factored second moment", true)
  end
  if r.precision == "mixed-bf16" then
    add(list, { precision = "bf16" }, "pure bf16: no fp32 master weights", true)
  end
  -- the Trainer's bf16=True over fp32 weights: load the model in bf16
  if r.precision == "amp-bf16" then
    add(list, { precision = "bf16-autocast" },
      "load the model in bf16 (torch_dtype=bfloat16): bf16 weights, gradients and optimizer states under the same "
        .. "autocast", true)
  end
end

-- Every single change worth trying for the resolved recipe `r` (and its
-- estimate `result`, where given).
function advise.candidates(r, keys, result)
  local list = {}
  activation_fixes(r, list, keys, result)
  state_fixes(r, list)
  gradient_fixes(r, list)
  training_fixes(r, list)
  return list
end

local function merged(a, b)
  local c = {}
  for k, v in pairs(a) do c[k] = v end
  for k, v in pairs(b) do
    if c[k] ~= nil and c[k] ~= v then return nil end -- two fixes that set one key differently
    c[k] = v
  end
  return c
end

local function evaluate(j, base, fix)
  local r, err = job.try(j, fix.changes)
  if not r then return nil, err end
  fix.peak_total_bytes, fix.fits, fix.headroom_bytes = r.peak_total_bytes, r.fits, r.headroom_bytes
  fix.saves_bytes = base.peak_total_bytes - r.peak_total_bytes
  if r.time and base.time and r.time.step_s and base.time.step_s then
    fix.step_time_ratio = r.time.step_s / base.time.step_s
  end
  return fix
end

-- Fits first; then the cheapest in step time where the time model gives
-- it, else the lowest peak; fewer changes first on ties.
local function better(a, b)
  if a.fits ~= b.fits then return a.fits end
  local ta, tb = a.step_time_ratio, b.step_time_ratio
  if ta and tb and ta ~= tb then return ta < tb end
  if a.peak_total_bytes ~= b.peak_total_bytes then return a.peak_total_bytes < b.peak_total_bytes end
  return a.size < b.size
end

local key_of = job.changes_key

-- The advice for a job: { binding, fits, headroom_bytes, fixes, no_help,
-- gpus }. options.max_combinations caps the listed combinations (default 10).
function advise.advise(j, options)
  options = options or {}
  local base = job.estimate(j)
  local advice = { binding = advise.binding(base), fits = base.fits, headroom_bytes = base.headroom_bytes,
                   fixes = {}, no_help = {} }
  local singles, helpful = {}, {}
  advice.refused = {}
  for _, fix in ipairs(advise.candidates(base.recipe, j.keys, base)) do
    fix.size = 1
    local ok, err = evaluate(j, base, fix)
    if not ok then advice.refused[#advice.refused + 1] = { changes = fix.changes, error = err } end
    if ok then
      singles[#singles + 1] = fix
      if fix.saves_bytes <= NO_HELP_SHARE * base.peak_total_bytes then
        advice.no_help[#advice.no_help + 1] = fix
      elseif not fix.changes_training then
        helpful[#helpful + 1] = fix
      end
    end
  end
  -- combinations of two and three helpful changes that fit: the search is
  -- small (a dozen singles) and each estimate takes well under a millisecond
  local combos, seen = {}, {}
  local function try_combo(parts)
    local changes = {}
    local notes = {}
    for _, p in ipairs(parts) do
      changes = merged(changes, p.changes)
      if not changes then return end
      notes[#notes + 1] = p.note
    end
    local key = key_of(changes)
    if seen[key] then return end
    seen[key] = true
    local fix = { changes = changes, note = table.concat(notes, "; "), changes_training = false, size = #parts }
    if evaluate(j, base, fix) and fix.fits then combos[#combos + 1] = fix end
  end
  for a = 1, #helpful do
    for b = a + 1, #helpful do
      if not helpful[a].fits and not helpful[b].fits then try_combo({ helpful[a], helpful[b] }) end
    end
  end
  if #combos == 0 then
    for a = 1, #helpful do
      for b = a + 1, #helpful do
        for c = b + 1, #helpful do try_combo({ helpful[a], helpful[b], helpful[c] }) end
      end
    end
  end
  table.sort(combos, better)
  -- singles first (the same-training ones, then those changing training),
  -- then the best combinations
  local same, other = {}, {}
  for _, f in ipairs(singles) do
    if f.saves_bytes > NO_HELP_SHARE * base.peak_total_bytes then
      if f.changes_training then other[#other + 1] = f else same[#same + 1] = f end
    end
  end
  table.sort(same, better)
  table.sort(other, better)
  for _, f in ipairs(same) do advice.fixes[#advice.fixes + 1] = f end
  for i = 1, math.min(#combos, options.max_combinations or 10) do advice.fixes[#advice.fixes + 1] = combos[i] end
  for _, f in ipairs(other) do advice.fixes[#advice.fixes + 1] = f end
  -- more GPUs with the recipe's own framework and sharding
  if not base.fits then
    local gpus = fit.gpus(j, { max = options.max_gpus })
    -- with global_batch kept, the fewest that keep it exactly (estimate refuses a dp that does not divide it)
    local count, dp = gpus.value, gpus.layout and gpus.layout.dp
    if gpus.divides == false then count, dp = gpus.dividing and gpus.dividing.value, gpus.dividing and gpus.dividing.dp end
    if count and count > base.recipe.gpus then
      local l = gpus.layout
      local changes = { dp = dp }
      if base.recipe.framework == "megatron" then changes.tp, changes.pp = l.tp, l.pp end
      local fix = { changes = changes, size = 1, changes_training = false,
                    note = string.format("%d GPUs: the fewest that fit with this framework and sharding", count) }
      if evaluate(j, base, fix) then table.insert(advice.fixes, #same + 1, fix) end
    end
  end
  return advice, base
end

return advise
