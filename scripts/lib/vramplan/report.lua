-- vramplan.report — what the user reads: the verdict, the breakdown at the
-- peak, the timeline; and the JSON object other tools read.
-- dkjson when first used (the JSON object): the text report needs none of it
local json = setmetatable({}, { __index = function(_, k) return require("dkjson")[k] end })

local report = {}

local GiB, MiB = 1024 ^ 3, 1024 ^ 2

function report.bytes(n)
  if n == nil then return "-" end
  local a = math.abs(n)
  if a >= GiB then return string.format("%.2f GiB", n / GiB) end
  if a >= MiB then return string.format("%.1f MiB", n / MiB) end
  if a >= 1024 then return string.format("%.1f KiB", n / 1024) end
  return string.format("%d B", n)
end

local function count(n)
  if n >= 1e12 then return string.format("%.2f T", n / 1e12) end
  if n >= 1e9 then return string.format("%.2f B", n / 1e9) end
  if n >= 1e6 then return string.format("%.1f M", n / 1e6) end
  return tostring(math.tointeger(n) or n)
end
report.count = count

-- How close vramplan has been to published GPU measurements of runs of
-- this kind (vramplan.accuracy, from tests/reference/), and a warning when
-- the headroom is smaller than its largest under-estimate there.
local ACCURACY_KINDS = { full = { "full", "full-parameter training" }, lora = { "lora", "LoRA" }, qlora = { "lora", "LoRA" } }

function report.accuracy_notes(r, gpu)
  local kind = ACCURACY_KINDS[r.recipe.finetune]
  local a = kind and require("vramplan.accuracy")[kind[1]]
  if not gpu or not a then return {} end
  local notes = { string.format("accuracy: on %d published GPU measurement%s of %s, vramplan was within %.1f %% " ..
    "(median), %.1f %% low at most (docs/validation.md)", a.runs, a.runs == 1 and "" or "s", kind[2],
    100 * a.median_error, -100 * a.most_low) }
  if r.fits and a.most_low < 0 and r.headroom_bytes < -a.most_low * r.peak_total_bytes then
    notes[#notes + 1] = string.format("warning: %s to spare is less than that error (%s): a tight fit",
      report.bytes(r.headroom_bytes), report.bytes(-a.most_low * r.peak_total_bytes))
  end
  return notes
end

-- The one-line verdict.
function report.verdict(r, gpu)
  if not gpu then
    return string.format("needs %s per GPU (no --gpu given: no verdict)", report.bytes(r.peak_total_bytes))
  end
  if r.fits then
    return string.format("fits on %s with %s to spare (needs %s of %s)", gpu.name, report.bytes(r.headroom_bytes),
      report.bytes(r.peak_total_bytes), report.bytes(gpu.memory_bytes))
  end
  return string.format("does not fit on %s: needs %s, has %s (short by %s)", gpu.name, report.bytes(r.peak_total_bytes),
    report.bytes(gpu.memory_bytes), report.bytes(-r.headroom_bytes))
end

-- The reservation over the whole run beside the step's (docs/reserved.md):
-- loading, quantizing and wrapping the model, then the first step, leave
-- cached segments behind; a run that needs more than the GPU has is said.
function report.run_notes(r, gpu)
  local run = r.peak_reserved_run_bytes
  if not run then return {} end
  local notes = {
    string.format("  %-22s %12s   reserved at most over the whole run (steady step: %s): loading, wrapping, the " ..
      "first step", "run's reserved peak", report.bytes(run), report.bytes(r.peak_reserved_bytes)),
  }
  local total = run + r.runtime_bytes
  if gpu and r.fits and total > gpu.memory_bytes then
    notes[#notes + 1] = string.format("  warning: over the whole run it needs %s of %s (short by %s): the " ..
      "steady step fits, the run may not", report.bytes(total), report.bytes(gpu.memory_bytes),
      report.bytes(total - gpu.memory_bytes))
  end
  return notes
end

-- One NCCL communicator's line under the runtime (engine/step/nccl.c).
function report.nccl_group(g)
  local parts = {}
  for _, p in ipairs({ { "ring_bytes", "rings" }, { "tree_bytes", "trees" }, { "nvls_bytes", "NVLS" },
                        { "p2p_bytes", "send/recv" } }) do
    if g[p[1]] > 0 then parts[#parts + 1] = p[2] .. " " .. report.bytes(g[p[1]]) end
  end
  local how = g.peers > 0 and string.format("%s, %d peer%s x %d channels", g.pattern, g.peers, g.peers > 1 and "s" or "",
    g.channels) or string.format("%s, %d channels", g.pattern, g.channels)
  return string.format("    %-20s %12s   %d ranks on %d node%s, %s: %s", "NCCL " .. g.name, report.bytes(g.bytes), g.ranks,
    g.nodes, g.nodes > 1 and "s" or "", how, table.concat(parts, ", "))
end

local function where(r)
  local parts = { r.peak_phase }
  if r.peak_layer then parts[#parts + 1] = "layer " .. r.peak_layer end
  if r.peak_op and r.peak_op ~= "" then parts[#parts + 1] = r.peak_op end
  return table.concat(parts, ", ")
end

-- The step time's fields, in the JSON's order (null where no GPU is given).
local time_fields = {
  "step_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_flops_per_step", "hardware_flops_per_step", "mfu", "hfu",
  "compute_s", "exposed_comm_s", "bubble_s", "offload_s",
}

report.time_field_names = {}
for _, k in ipairs(time_fields) do report.time_field_names[k] = true end

local function thousands(n)
  local s = string.format("%.0f", n)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- The one-line step time: "step ~1.9 s, 8,600 tokens/s per GPU, MFU 41 %".
function report.step_time(t)
  if not t or not t.step_s then return nil end
  local per_gpu = t.tokens_per_s_per_gpu
  local rounded = per_gpu >= 1000 and math.floor(per_gpu / 100 + 0.5) * 100 or math.floor(per_gpu + 0.5)
  local step = t.step_s >= 10 and string.format("%.0f", t.step_s) or string.format("%.2g", t.step_s)
  return string.format("step ~%s s, %s tokens/s per GPU, MFU %.0f %%", step, thousands(rounded), 100 * t.mfu)
end

local rows = {
  { "params", "parameters" }, { "buffers", "buffers" }, { "grads", "gradients" }, { "master", "master weights" },
  { "optimizer", "optimizer states" }, { "activations", "activations" }, { "transient", "transient" },
  { "comm", "communication buffers" }, { "workspace", "cuBLAS workspaces" },
}

-- What the runtime line holds: cuBLAS's workspaces are there unless the
-- caching allocator holds them (PyTorch 2.x on a GPU: then a row above).
function report.runtime_label(r)
  return (r.peak_breakdown.workspace or 0) > 0 and "CUDA context" or "CUDA context and cuBLAS workspaces"
end

function report.human(ctx)
  local r, recipe, gpu = ctx.result, ctx.result.recipe, ctx.gpu
  local out = {}
  local function line(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  line("%s (%s parameters, %s trainable) from %s", ctx.model_name, count(r.params), count(r.trainable_params), ctx.source)
  local checkpointing = recipe.checkpointing
  if checkpointing ~= "none" and checkpointing ~= "selective" and recipe.use_reentrant == false then
    checkpointing = checkpointing .. (recipe.checkpoint_early_stop and " (non-reentrant)" or " (non-reentrant, no early stop)")
  end
  -- SDPA's kernel where it is not flash, and transformers' enable_gqa (4.54+)
  local sdpa = {}
  if r.sdpa_kernel == "cudnn" then sdpa[#sdpa + 1] = "cuDNN's kernel" end
  if r.sdpa_kernel == "efficient" then sdpa[#sdpa + 1] = "the memory-efficient kernel" end
  if recipe.sdpa_enable_gqa then sdpa[#sdpa + 1] = "enable_gqa" end
  local attention = recipe.attention .. (#sdpa > 0 and " (" .. table.concat(sdpa, ", ") .. ")" or "")
  line("recipe: %s, %s (%s), micro_batch %d x seq_len %d, checkpointing %s, attention %s",
    recipe.precision, recipe.optimizer, recipe.optimizer_impl, recipe.micro_batch, recipe.seq_len,
    checkpointing, attention)
  if ctx.assumed then -- the stack and the precision vramplan.stacks assumed
    local a = ctx.assumed
    line("stack: %s%s", a.stack or "none named", a.precision and (", precision " .. recipe.precision .. " (" .. a.precision .. ")") or "")
  end
  local saved = r.saved_modules or "" -- modules_to_save in the model, a classifier's head included
  local training = saved ~= "" and (", training " .. saved) or ""
  -- PEFT's ModulesToSaveWrapper trains a copy and keeps the original
  local copies = saved ~= "" and (", training copies of " .. saved .. " (the originals kept, frozen)") or ""
  if recipe.finetune == "lora" or recipe.finetune == "qlora" then
    -- PEFT's target_parameters: the experts' 3-D parameters beside the modules
    local modules = r.lora_modules ~= "" and r.lora_modules or nil
    local targets = recipe.lora_target_parameters
    local params = targets and targets ~= "" and ("parameters " .. targets) or nil
    local on = modules and params and (modules .. " and " .. params) or modules or params or "nothing"
    line("fine-tuning: %s%s, r %d on %s (dropout %g)%s", recipe.finetune, recipe.use_dora and " with DoRA" or "",
      recipe.lora_rank, on, recipe.lora_dropout, copies)
  elseif recipe.finetune == "prompt" or recipe.finetune == "prefix" then
    line("fine-tuning: %s, %d virtual tokens%s", recipe.finetune, recipe.num_virtual_tokens, copies)
  elseif recipe.finetune == "freeze" then
    local n = recipe.trainable_layers
    local layers = n == 0 and "no layer" or n == 1 and "the last layer" or string.format("the last %d layers", n)
    line("fine-tuning: freeze, %s trained with the final norm and head%s", layers, training)
  end
  if r.load_balancing_loss then line("loss: with the routers' load-balancing loss (output_router_logits)") end
  if recipe.dp > 1 or recipe.pp > 1 or recipe.framework ~= "torch" then
    local layout = { recipe.framework, "dp " .. recipe.dp }
    if recipe.tp > 1 then layout[#layout + 1] = "tp " .. recipe.tp .. (recipe.sequence_parallel and " with sequence parallelism" or "") end
    if recipe.cp > 1 then layout[#layout + 1] = "cp " .. recipe.cp end
    if recipe.ep > 1 or recipe.etp ~= recipe.tp then
      layout[#layout + 1] = string.format("ep %d, etp %d", recipe.ep, recipe.etp)
    end
    if recipe.pp > 1 then
      layout[#layout + 1] = string.format("pp %d (%s%s, %d micro-batches)", recipe.pp, recipe.pp_schedule,
        recipe.virtual_stages > 1 and (" x" .. recipe.virtual_stages) or "", recipe.num_microbatches)
    end
    if recipe.distributed_optimizer then layout[#layout + 1] = "distributed optimizer" end
    if recipe.framework == "deepspeed" then layout[#layout + 1] = "ZeRO-" .. recipe.zero end
    if recipe.framework == "fsdp" then layout[#layout + 1] = recipe.fsdp == "none" and "full_shard" or recipe.fsdp end
    if recipe.offload_optimizer ~= "none" then layout[#layout + 1] = "optimizer offload to " .. recipe.offload_optimizer end
    if recipe.offload_params ~= "none" then layout[#layout + 1] = "parameter offload to " .. recipe.offload_params end
    line("layout: %s", table.concat(layout, ", "))
  end
  if recipe.optimizer:match("^paged") then
    line("optimizer states in CUDA unified memory: on the GPU while it has room, paged to the host under pressure")
  end
  line("")
  line("%s", report.verdict(r, gpu))
  for _, note in ipairs(report.accuracy_notes(r, gpu)) do line("%s", note) end
  local host_verdict = report.host_verdict(r, ctx.host)
  if host_verdict then line("%s", host_verdict) end
  local step = gpu and report.step_time(r.time)
  if step then line("%s", step) end
  if #r.ranks > 1 then
    line("")
    line("  %-6s %-9s %9s %12s %12s  %s", "stage", "layers", "in flight", "allocated", "total", "peak")
    for _, st in ipairs(r.ranks) do
      line("  %-6d %-9s %9.3g %12s %12s  %s%s", st.stage, st.first_layer .. "-" .. (st.first_layer + st.layers - 1),
        st.in_flight, report.bytes(st.peak_allocated_bytes), report.bytes(st.peak_total_bytes), where(st),
        st.stage == r.stage and "  <- worst" or "")
    end
  end
  line("")
  line("peak%s: %s", #r.ranks > 1 and (" (stage " .. r.stage .. ")") or "", where(r))
  line("  %-22s %12s", "at the peak", "")
  for _, row in ipairs(rows) do
    local v = r.peak_breakdown[row[1]]
    if v and (v > 0 or row[1] ~= "buffers" and row[1] ~= "master" and row[1] ~= "comm" and row[1] ~= "workspace") then
      line("  %-22s %12s", row[2], report.bytes(v))
    end
  end
  line("  %-22s %12s   tensors live at the peak (torch.cuda.max_memory_allocated)", "= allocated", report.bytes(r.peak_allocated_bytes))
  line("  %-22s %12s   caching-allocator segments and fragmentation", "+ allocator", report.bytes(r.allocator_bytes))
  line("  %-22s %12s   %s%s", "+ runtime", report.bytes(r.runtime_bytes), report.runtime_label(r),
    ((r.nccl_bytes or 0) > 0 and (", NCCL's buffers " .. report.bytes(r.nccl_bytes)) or "") ..
    ((r.symm_mem_bytes or 0) > 0 and (", async TP's symmetric memory " .. report.bytes(r.symm_mem_bytes)) or ""))
  for _, g in ipairs(r.nccl_groups or {}) do line("%s", report.nccl_group(g)) end
  line("  %-22s %12s   what nvidia-smi would show", "= total", report.bytes(r.peak_total_bytes))
  for _, note in ipairs(report.run_notes(r, gpu)) do line("%s", note) end
  line("")
  line("model states: parameters %s, gradients %s, master weights %s, optimizer states %s",
    report.bytes(r.params_bytes), report.bytes(r.grads_bytes), report.bytes(r.master_bytes), report.bytes(r.optimizer_bytes))
  line("activations at the end of forward (kept for backward, loss included): %s", report.bytes(r.activations_bytes))
  if r.weight_pass_bytes then -- a zero-bubble schedule's deferred weight passes (docs/torchtitan.md)
    line("gradients kept for the weight pass: %s a micro-batch, %s waiting at the peak (counted in activations)",
      report.bytes(r.weight_pass_bytes), report.bytes(r.pending_weight_bytes))
  end
  if r.host_bytes > 0 or r.nvme_bytes > 0 then
    local host = report.host(r)
    line("host memory: %s per rank, %s per node of %d GPU%s; NVMe: %s per rank", report.bytes(host.cpu_bytes_per_rank),
      report.bytes(host.cpu_bytes_per_node), host.gpus_per_node, host.gpus_per_node == 1 and "" or "s",
      report.bytes(host.nvme_bytes_per_rank))
  end
  return table.concat(out, "\n")
end

-- The timeline, one line per op: consecutive events of the same op merged;
-- the resident state set up before the step is one line per category.
function report.timeline(r)
  local out = { string.format("%-10s %5s  %-34s %12s %12s", "phase", "layer", "op", "change", "live") }
  local current, delta, live
  local function flush()
    if current then
      out[#out + 1] = string.format("%-10s %5s  %-34s %12s %12s", current.phase, current.layer or "",
        current.op, (delta >= 0 and "+" or "-") .. report.bytes(math.abs(delta)), report.bytes(live))
    end
  end
  local setup, setup_order = {}, {}
  for _, e in ipairs(r.timeline or {}) do
    -- a gradient moved into .grad changes no total: not a line of its own
    if e.op == "AccumulateGrad" then
    elseif e.phase == "setup" then
      if not setup[e.category] then setup_order[#setup_order + 1] = e.category end
      setup[e.category] = (setup[e.category] or 0) + e.delta
      live = e.live
    else
      if #setup_order > 0 then
        local running = 0
        for _, c in ipairs(setup_order) do
          running = running + setup[c]
          out[#out + 1] = string.format("%-10s %5s  %-34s %12s %12s", "setup", "", c, "+" .. report.bytes(setup[c]),
            report.bytes(running))
        end
        setup_order = {}
      end
      if not current or e.phase ~= current.phase or e.layer ~= current.layer or e.op ~= current.op then
        flush()
        current, delta = e, 0
      end
      delta, live = delta + e.delta, e.live
    end
  end
  flush()
  return table.concat(out, "\n")
end

-- Memory outside the GPUs: offloaded states and parameters; with a node or
-- instance (`host`) whose CPU memory is known, that memory and whether the
-- node's share of offloaded state fits in it (nil otherwise).
function report.host(r, host)
  local per_node = r.recipe.gpus_per_node
  local o = {
    cpu_bytes_per_rank = r.host_bytes, cpu_bytes_per_node = r.host_bytes * per_node,
    nvme_bytes_per_rank = r.nvme_bytes, nvme_bytes_per_node = r.nvme_bytes * per_node, gpus_per_node = per_node,
  }
  if host and host.cpu_ram_gib > 0 then
    o.cpu_ram_bytes_per_node = math.floor(host.cpu_ram_gib * GiB)
    o.fits = o.cpu_bytes_per_node <= o.cpu_ram_bytes_per_node
  end
  return o
end

-- The host-memory verdict when state is offloaded to a node whose memory
-- is known: a line, or nil.
function report.host_verdict(r, host)
  if not host or r.host_bytes == 0 then return nil end
  local h = report.host(r, host)
  if h.fits == nil then
    return string.format("host memory: %s per node; %s publishes no CPU memory figure: no verdict",
      report.bytes(h.cpu_bytes_per_node), host.name)
  end
  if h.fits then
    return string.format("host memory fits on %s: %s offloaded per node of %s", host.name,
      report.bytes(h.cpu_bytes_per_node), report.bytes(h.cpu_ram_bytes_per_node))
  end
  return string.format("host memory does not fit on %s: needs %s per node (%d ranks), has %s (short by %s)",
    host.name, report.bytes(h.cpu_bytes_per_node), h.gpus_per_node, report.bytes(h.cpu_ram_bytes_per_node),
    report.bytes(h.cpu_bytes_per_node - h.cpu_ram_bytes_per_node))
end

local rank_fields = {
  "params_bytes", "buffers_bytes", "grads_bytes", "master_bytes", "optimizer_bytes", "comm_bytes",
  "activations_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "peak_total_bytes", "peak_phase", "peak_op",
  "peak_breakdown", "allocator_bytes", "runtime_bytes", "cuda_context_bytes", "cublas_workspace_bytes",
  "nccl_bytes", "nccl_groups", "symm_mem_bytes",
  -- the caching allocator simulated over the step (engine/core/allocator.c): a GPU's estimate asked for it
  "peak_reserved_simulated_bytes",
  -- ... and over the whole run, loading and wrapping the model first (engine/step/run_phases.c)
  "peak_reserved_run_bytes", "reserved_at_start_bytes",
}

-- The same as a set (a sweep's rows in C read these names).
report.rank_field_names = {}
for _, k in ipairs(rank_fields) do report.rank_field_names[k] = true end

-- The per_gpu fields of one rank.
local function rank_object(r)
  local o = {}
  for _, k in ipairs(rank_fields) do o[k] = r[k] end
  o.peak_layer = r.peak_layer == nil and json.null or r.peak_layer
  return o
end

local order = {
  "vramplan_version", "model", "recipe", "sdpa_kernel", "assumed", "per_gpu", "gpu", "node", "fits", "headroom_bytes", "time",
  "timeline",
  "name", "params", "trainable_params", "lora_modules", "saved_modules", "load_balancing_loss", "arch", "layers",
  "source",
  "params_bytes", "buffers_bytes", "grads_bytes", "master_bytes", "optimizer_bytes", "activations_bytes",
  "peak_allocated_bytes", "peak_reserved_bytes", "peak_reserved_simulated_bytes", "peak_reserved_run_bytes",
  "reserved_at_start_bytes", "peak_total_bytes", "peak_phase", "peak_layer", "peak_op", "peak_breakdown", "allocator_bytes", "runtime_bytes", "cuda_context_bytes", "cublas_workspace_bytes", "nccl_bytes",
  "nccl_groups", "symm_mem_bytes", "pattern", "local_ranks", "nodes", "peers", "channels", "ring_bytes", "tree_bytes", "nvls_bytes",
  "p2p_bytes", "bytes",
  "memory_bytes", "short_name", "per_rank", "host", "stage", "in_flight", "head_activations_bytes", "boundary_bytes",
  "pp_buffers_bytes", "pp_outputs_bytes", "weight_pass_bytes",
  "pending_weight_bytes", "ranks", "count", "comm_bytes",
  "cpu_bytes_per_rank", "cpu_bytes_per_node", "nvme_bytes_per_rank", "nvme_bytes_per_node", "gpus_per_node",
  "cpu_ram_bytes_per_node", "kind", "cpu_ram_bytes", "price_per_hour",
}
for _, k in ipairs(time_fields) do order[#order + 1] = k end

-- The object's top-level entries, each made from the context on its own
-- (a sweep makes only those its columns read).
local parts = {}

parts.vramplan_version = function(ctx) return ctx.version end

parts.model = function(ctx)
  local r = ctx.result
  return { name = ctx.model_name, params = r.params, trainable_params = r.trainable_params, arch = ctx.arch,
           layers = ctx.layers, source = ctx.source, lora_modules = r.lora_modules, saved_modules = r.saved_modules,
           load_balancing_loss = r.load_balancing_loss or nil }
end

parts.recipe = function(ctx) return ctx.result.recipe end

-- attention = sdpa: the kernel its unmasked calls run (sdpa_backend resolved for the GPU)
parts.sdpa_kernel = function(ctx) return ctx.result.sdpa_kernel end

parts.per_gpu = function(ctx) return rank_object(ctx.result) end

-- one entry per pipeline stage; within a stage every data- and
-- tensor-parallel rank is alike
parts.per_rank = function(ctx)
  local r = ctx.result
  local per_rank = {}
  for i, stage in ipairs(r.ranks) do
    local o = rank_object(stage)
    local first = (i - 1) * r.ranks_per_stage
    o.stage = stage.stage
    o.layers = string.format("%d-%d", stage.first_layer, stage.first_layer + stage.layers - 1)
    o.in_flight = stage.in_flight
    o.head_activations_bytes = stage.head_activations_bytes -- under pipelining
    -- torch.distributed.pipelining's receive buffers, and one micro-batch's stage boundary
    o.boundary_bytes, o.pp_buffers_bytes = stage.boundary_bytes, stage.pp_buffers_bytes
    -- the last stage's outputs a torch schedule keeps to the step's end (pp_return_outputs)
    o.pp_outputs_bytes = stage.pp_outputs_bytes
    -- the zero-bubble schedules': gradients kept for deferred weight passes
    o.weight_pass_bytes, o.pending_weight_bytes = stage.weight_pass_bytes, stage.pending_weight_bytes
    o.ranks = string.format("%d-%d", first, first + r.ranks_per_stage - 1)
    o.count = r.ranks_per_stage
    if stage.fits ~= nil then o.fits, o.headroom_bytes = stage.fits, stage.headroom_bytes end
    -- each stage's own events, when the timeline was asked for with stages
    if #r.ranks > 1 and r.timeline then o.timeline = stage.timeline end
    per_rank[i] = o
  end
  return per_rank
end

parts.host = function(ctx)
  local host = report.host(ctx.result, ctx.host)
  -- null, not absent, when no node's memory is known
  if host.fits == nil then host.fits, host.cpu_ram_bytes_per_node = json.null, json.null end
  return host
end

parts.gpu = function(ctx)
  return ctx.gpu and { name = ctx.gpu.name, short_name = ctx.gpu.short_name, memory_bytes = ctx.gpu.memory_bytes }
    or json.null
end

-- the node or instance --gpu named, if it named one
parts.node = function(ctx)
  return ctx.host and {
    kind = ctx.host.kind, name = ctx.host.name, short_name = ctx.host.short_name, gpus = ctx.host.gpus,
    cpu_ram_bytes = ctx.host.cpu_ram_gib > 0 and math.floor(ctx.host.cpu_ram_gib * GiB) or json.null,
    price_per_hour = (ctx.host.price_per_hour or 0) > 0 and ctx.host.price_per_hour or nil,
  } or nil
end

parts.fits = function(ctx) return ctx.result.fits == nil and json.null or ctx.result.fits end

parts.headroom_bytes = function(ctx)
  return ctx.result.headroom_bytes == nil and json.null or ctx.result.headroom_bytes
end

-- the stack and the precision rule vramplan.stacks assumed, when any
parts.assumed = function(ctx)
  return ctx.assumed and { stack = ctx.assumed.stack or json.null, precision = ctx.assumed.precision or json.null }
    or nil
end

parts.time = function(ctx)
  local r, time = ctx.result, {}
  for _, k in ipairs(time_fields) do
    local v = ctx.gpu and r.time and r.time[k]
    time[k] = v == nil and json.null or v
  end
  return time
end

parts.timeline = function(ctx) return ctx.result.timeline end

-- The recipe keys each part reads from the result's echo ("all": the whole
-- echo; none when absent): a sweep's estimates echo only what is read.
report.part_recipe_keys = { recipe = "all", host = { "gpus_per_node" } }

local part_names = {}
for name in pairs(parts) do part_names[#part_names + 1] = name end
table.sort(part_names)

-- The top-level names of estimate --json's object (a set).
report.object_names = {}
for _, name in ipairs(part_names) do report.object_names[name] = true end

-- estimate --json's object for one result; `names` (a list of top-level
-- names, or nil for all): only those entries, each as the whole object has it.
function report.object(ctx, names)
  local o = {}
  for _, name in ipairs(names or part_names) do
    local make = parts[name]
    if make then o[name] = make(ctx) end
  end
  return o
end

-- the recipe echo in the order its keys are declared (recipe_keys.c), and
-- the breakdown in the report's row order: a stable order across runs.
-- dkjson's key order is one list for every object, so the recipe's keys
-- go right after the top level's (host.gpus_per_node shares a name).
-- (made when first asked for: the text report needs none of it)
local merged_order
function report.key_order()
  if merged_order then return merged_order end
  local top, listed, merged = 12, {}, {} -- order's top-level names, "timeline" the last of them
  local function append(name)
    if not listed[name] then
      listed[name] = true
      merged[#merged + 1] = name
    end
  end
  for i = 1, top do append(order[i]) end
  for _, key in ipairs(require("vramplan").recipe_keys()) do append(key.name) end
  for i = top + 1, #order do append(order[i]) end
  for _, row in ipairs(rows) do append(row[1]) end
  merged_order = merged
  return merged
end

function report.json(ctx)
  return require("vramplan.json_out").encode(report.object(ctx), report.key_order(), true)
end

return report
