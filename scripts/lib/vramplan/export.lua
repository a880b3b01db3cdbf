-- vramplan.export — a recipe written as another tool's config: a DeepSpeed
-- JSON, an accelerate config YAML, an axolotl YAML or a LLaMA-Factory YAML,
-- each the inverse of its importer (vramplan.import.*), so that importing
-- what is exported gives the same recipe. Keys the format cannot hold are returned, for a
-- warning, unless they are that tool's own default anyway.
local json = require("dkjson")

local export = {}

-- An ordered table: { {key, value}, ... } written in that order.
local function ordered() return {} end
local function put(t, key, value)
  if value ~= nil then t[#t + 1] = { key, value } end
end

-- JSON of an ordered table (dkjson's keyorder, one level at a time).
local function to_plain(v)
  if type(v) ~= "table" then return v end
  if v.list then
    local out = {}
    for i, x in ipairs(v.list) do out[i] = to_plain(x) end
    return out
  end
  local out, order = {}, {}
  for _, kv in ipairs(v) do
    out[kv[1]] = to_plain(kv[2])
    order[#order + 1] = kv[1]
  end
  return out, order
end

local function json_text(t)
  local order, listed = {}, {}
  local function collect(v)
    if type(v) == "table" and not v.list then
      for _, kv in ipairs(v) do
        if not listed[kv[1]] then order[#order + 1], listed[kv[1]] = kv[1], true end
        collect(kv[2])
      end
    end
  end
  collect(t)
  return json.encode((to_plain(t)), { indent = true, keyorder = order }) .. "\n"
end

local function scalar(v)
  if type(v) == "string" then return "'" .. v:gsub("'", "''") .. "'" end
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  return tostring(v)
end

local function yaml_lines(t, indent, lines)
  for _, kv in ipairs(t) do
    local k, v = kv[1], kv[2]
    if type(v) == "table" and v.list then
      lines[#lines + 1] = indent .. k .. ":"
      for _, x in ipairs(v.list) do lines[#lines + 1] = indent .. "  - " .. scalar(x) end
    elseif type(v) == "table" then
      lines[#lines + 1] = indent .. k .. ":"
      yaml_lines(v, indent .. "  ", lines)
    else
      lines[#lines + 1] = indent .. k .. ": " .. scalar(v)
    end
  end
  return lines
end

local function yaml_text(t, header)
  return header .. table.concat(yaml_lines(t, "", {}), "\n") .. "\n"
end

local function num(v) return tonumber(v) end

-- The recipe keys each format writes, and the remaining ones it cannot.
-- A stack's default for a key under these keys (a default may be a
-- function of them: vramplan.stacks), or nil.
local function stack_default(defaults, k, keys)
  local d = defaults and defaults[k]
  if type(d) == "function" then return d(keys) end
  return d
end

local function leftovers(keys, written, defaults)
  local rest = {}
  for k, v in pairs(keys) do
    local d = stack_default(defaults, k, keys)
    if not written[k] and not (d ~= nil and tostring(d) == tostring(v)) then
      rest[#rest + 1] = k
    end
  end
  table.sort(rest)
  return rest
end

-- accelerate's FSDP2 (axolotl's too) wraps transformers' model and reduces
-- in the mixed precision's dtype (set_mixed_precision): model_code and
-- reduce_dtype are written as such when they say so, listed as lost otherwise.
local function fsdp2_over_transformers(keys, written)
  written.model_code = keys.model_code == nil or keys.model_code == "transformers" or nil
  written.reduce_dtype = keys.reduce_dtype == nil or keys.reduce_dtype == "auto" or nil
end

local function refuse(what, key, value, format)
  error(string.format("%s: %s = %s has no equivalent in %s", what, key, tostring(value), format), 0)
end

-- DeepSpeed: deepspeed/runtime/config.py's and zero/config.py's names
-- (vramplan.import.deepspeed reads them back).
local function deepspeed(keys, autos, what)
  local t, written = ordered(), { framework = true }
  if keys.framework and keys.framework ~= "deepspeed" then refuse(what, "framework", keys.framework, "a DeepSpeed config") end
  local function take(k) written[k] = true return keys[k] end
  put(t, "train_batch_size", take("global_batch"))
  put(t, "train_micro_batch_size_per_gpu", take("micro_batch"))
  put(t, "gradient_accumulation_steps", take("grad_accum"))
  local p = take("precision")
  if p == "mixed-fp16" then put(t, "fp16", { { "enabled", true } })
  elseif p == "mixed-bf16" then put(t, "bf16", { { "enabled", true } })
  elseif p == "fp32" then put(t, "fp16", { { "enabled", false } }) put(t, "bf16", { { "enabled", false } })
  elseif p ~= nil then refuse(what, "precision", p, "a DeepSpeed config (fp32, mixed-fp16 or mixed-bf16)")
  else -- left to the run, as transformers fills it
    put(t, "fp16", { { "enabled", "auto" } })
    put(t, "bf16", { { "enabled", "auto" } })
  end
  local types = { adamw = "AdamW", adam = "Adam", lion = "Lion" }
  local o = take("optimizer")
  if o ~= nil and not types[o] then
    -- no optimizer section: the Trainer's optimizer is DeepSpeed's client
    -- (transformers' deepspeed_optim_sched), named in the YAML beside it
    written.optimizer = nil
  elseif o ~= nil then
    local params = ordered()
    if o == "adam" then put(params, "adam_w_mode", false) end
    if take("optimizer_impl") == "foreach" then put(params, "torch_adam", true) end
    put(params, "weight_decay", take("weight_decay"))
    local section = { { "type", types[o] } }
    if #params > 0 then put(section, "params", params) end
    put(t, "optimizer", section)
  end
  if keys.optimizer_impl == "fused" then written.optimizer_impl = true end -- DeepSpeed's own
  local z = ordered()
  put(z, "stage", take("zero"))
  local opt = take("offload_optimizer")
  if opt ~= nil then put(z, "offload_optimizer", { { "device", opt } }) end
  local par = take("offload_params")
  if par ~= nil then put(z, "offload_param", { { "device", par } }) end
  put(z, "overlap_comm", take("overlap_comm"))
  for _, k in ipairs({ "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                       "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance" }) do
    local v = take(k)
    if v == nil and autos[k] then v = "auto" end
    put(z, k, v)
  end
  if #z > 0 then put(t, "zero_optimization", z) end
  return json_text(t), leftovers(keys, written)
end

-- accelerate: config_args.py's ClusterConfig and the plugin sections.
local function accelerate(keys, autos, what, options)
  local t, written = ordered(), { gpus = true, dp = true, gpus_per_node = true, framework = true, precision = true }
  local fw = keys.framework or "torch"
  local gpus = num(keys.gpus) or num(keys.dp) or 1
  local kinds = { deepspeed = "DEEPSPEED", fsdp = "FSDP", fsdp2 = "FSDP", megatron = "MEGATRON_LM" }
  -- a framework without its section here is refused rather than written as
  -- plain MULTI_GPU
  if fw ~= "torch" and not kinds[fw] then
    refuse(what, "framework", fw, "an accelerate config (torch, deepspeed, fsdp, fsdp2 or megatron)")
  end
  put(t, "compute_environment", "LOCAL_MACHINE")
  put(t, "distributed_type", kinds[fw] or (gpus > 1 and "MULTI_GPU" or "NO"))
  local p = keys.precision
  -- what the importer's precision rule gives back for each mixed_precision
  local back = { torch = { ["amp-bf16"] = "bf16", ["amp-fp16"] = "fp16", fp32 = "no" },
                 deepspeed = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16", fp32 = "no" },
                 fsdp = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16", fp32 = "no" },
                 fsdp2 = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16", fp32 = "no" },
                 megatron = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16", fp32 = "no" } }
  if p == "fp8" then
    put(t, "mixed_precision", "fp8")
    put(t, "fp8_config", { { "backend", "TE" } }) -- vramplan's fp8 is Transformer Engine's
  elseif p ~= nil then
    local mp = back[fw] and back[fw][p]
    if not mp then refuse(what, "precision", p, "an accelerate config with framework " .. fw) end
    put(t, "mixed_precision", mp)
  end
  put(t, "num_processes", math.tointeger(gpus))
  local per_node = num(keys.gpus_per_node)
  if per_node and gpus > per_node then put(t, "num_machines", math.tointeger(gpus // per_node)) end
  local function take(k) written[k] = true return keys[k] end
  if fw == "deepspeed" and options.deepspeed then
    -- DeepSpeedPlugin's deepspeed_config_file (written with --format
    -- deepspeed) holds what a DeepSpeed config writes
    local _, left = deepspeed(keys, autos, what)
    local held = {}
    for k in pairs(keys) do held[k] = true end
    for _, k in ipairs(left) do held[k] = nil end
    for k in pairs(held) do written[k] = true end
    local ds = ordered()
    put(ds, "deepspeed_config_file", options.deepspeed)
    put(ds, "zero3_init_flag", take("zero_init"))
    put(t, "deepspeed_config", ds)
  elseif fw == "deepspeed" then
    local ds = ordered()
    put(ds, "zero_stage", take("zero") or 0)
    put(ds, "offload_optimizer_device", take("offload_optimizer"))
    put(ds, "offload_param_device", take("offload_params"))
    put(ds, "gradient_accumulation_steps", take("grad_accum"))
    put(ds, "zero3_init_flag", take("zero_init"))
    put(t, "deepspeed_config", ds)
  elseif fw == "fsdp" then
    local f = ordered()
    local s = take("fsdp")
    put(f, "fsdp_sharding_strategy", s and s:upper() or "FULL_SHARD")
    local off = take("offload_params")
    if off ~= nil then put(f, "fsdp_offload_params", off ~= "none") end
    if keys.checkpointing == "full" then put(f, "fsdp_activation_checkpointing", take("checkpointing") == "full") end
    put(t, "fsdp_config", f)
  elseif fw == "fsdp2" then
    -- fsdp_version 2 (vramplan.import.accelerate reads it back as fsdp2 over
    -- transformers' model code)
    local f = ordered()
    put(f, "fsdp_version", 2)
    put(f, "fsdp_reshard_after_forward", take("reshard_after_forward") ~= false)
    local off = take("offload_params")
    if off ~= nil then put(f, "fsdp_offload_params", off ~= "none") end
    if keys.checkpointing == "full" then put(f, "fsdp_activation_checkpointing", take("checkpointing") == "full") end
    fsdp2_over_transformers(keys, written)
    put(t, "fsdp_config", f)
  elseif fw == "megatron" then
    local m = ordered()
    put(m, "megatron_lm_tp_degree", take("tp"))
    put(m, "megatron_lm_pp_degree", take("pp"))
    put(m, "megatron_lm_num_micro_batches", take("num_microbatches"))
    put(m, "megatron_lm_sequence_parallelism", take("sequence_parallel"))
    put(m, "megatron_lm_use_distributed_optimizer", take("distributed_optimizer"))
    put(t, "megatron_lm_config", m)
  end
  return yaml_text(t, "# accelerate config written by vramplan export\n"), leftovers(keys, written)
end

-- axolotl: the names of its config schema (vramplan.import.axolotl).
-- A recipe's comma-separated names as a YAML list.
local function names_list(value)
  local list = {}
  for name in tostring(value):gmatch("[^,%s]+") do list[#list + 1] = name end
  return { list = list }
end

local optimizer_names = { adamw = "adamw_torch", ["adamw-hf"] = "adamw_hf", ["adamw-8bit"] = "adamw_bnb_8bit",
  ["paged-adamw-8bit"] = "paged_adamw_8bit", ["paged-adamw-32bit"] = "paged_adamw_32bit", adafactor = "adafactor",
  lion = "lion_32bit", sgd = "sgd", adam = "adam", ["adamw-8bit-torchao"] = "adamw_torch_8bit",
  ["adamw-4bit-torchao"] = "adamw_torch_4bit" }

-- axolotl's and LLaMA-Factory's DeepSpeed runs name their DeepSpeed config
-- (`deepspeed: FILE`, options.deepspeed, written with --format deepspeed),
-- which holds the ZeRO keys: true when the recipe's framework is deepspeed.
local zero_keys = { "zero", "offload_optimizer", "offload_params", "overlap_comm", "reduce_bucket_size",
  "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
  "stage3_max_live_parameters", "stage3_max_reuse_distance" }

local function names_deepspeed_file(fw, written, what, options, tool)
  if fw == "deepspeed" then
    if not options.deepspeed then
      error(string.format("%s: framework = deepspeed: %s names its DeepSpeed config " ..
        "(`deepspeed: FILE`): write that file with --format deepspeed and give its name with --deepspeed FILE",
        what, tool), 0)
    end
    for _, k in ipairs(zero_keys) do written[k] = true end
    return true
  elseif options.deepspeed then
    error(string.format("%s: --deepspeed FILE: the recipe's framework is %s, not deepspeed", what, fw), 0)
  end
  return false
end

-- transformers' OptimizerNames, which axolotl and LLaMA-Factory hand to
-- the Trainer (under `name`): adamw_torch is torch.optim.AdamW's default
-- (foreach on CUDA), adamw_torch_fused its fused kernels.
local function put_optim(t, keys, written, what, format, name, tool_default)
  written.optimizer = true
  local o = keys.optimizer
  -- vramplan's default, AdamW, named where the tool's default is another
  if o == nil and tool_default then o = "adamw" end
  if o == nil then return end
  if not optimizer_names[o] then refuse(what, "optimizer", o, format) end
  local impl = keys.optimizer_impl
  if o == "adamw" and impl == "fused" then put(t, name, "adamw_torch_fused") written.optimizer_impl = true
  else
    put(t, name, optimizer_names[o])
    if o == "adamw" and (impl == "foreach" or impl == "auto") then written.optimizer_impl = true end
  end
end

local function axolotl(keys, _, what, options)
  local t, written = ordered(), { framework = true, gpus = true, dp = true }
  local function take(k) written[k] = true return keys[k] end
  if options.hub_id then put(t, "base_model", options.hub_id) end
  local ft = take("finetune")
  if ft == "qlora" then
    local q = take("quant") or "nf4"
    if q == "int8" then put(t, "adapter", "lora") put(t, "load_in_8bit", true)
    elseif q == "nf4" then put(t, "adapter", "qlora") put(t, "load_in_4bit", true)
    else refuse(what, "quant", q, "an axolotl config (nf4, int8)") end
    if keys.double_quant == true or keys.double_quant == "true" then written.double_quant = true end
  elseif ft == "lora" then put(t, "adapter", "lora")
  elseif ft ~= nil and ft ~= "full" then refuse(what, "finetune", ft, "an axolotl config (full, lora, qlora)") end
  put(t, "lora_r", take("lora_rank"))
  put(t, "lora_alpha", take("lora_alpha"))
  put(t, "lora_dropout", take("lora_dropout"))
  local targets = take("lora_targets")
  if targets == "all-linear" then put(t, "lora_target_linear", true)
  elseif targets ~= nil then
    put(t, "lora_target_modules", names_list(targets))
  end
  local save = take("modules_to_save")
  if save ~= nil then put(t, "lora_modules_to_save", names_list(save)) end
  local params = take("lora_target_parameters")
  if params ~= nil then put(t, "lora_target_parameters", names_list(params)) end
  if keys.use_dora ~= nil then put(t, "peft_use_dora", take("use_dora")) end
  put(t, "sequence_len", take("seq_len"))
  put(t, "micro_batch_size", take("micro_batch"))
  put(t, "gradient_accumulation_steps", take("grad_accum"))
  local p = take("precision")
  -- the axolotl stack loads the weights in the training dtype; under FSDP
  -- (1) or DeepSpeed bf16 / fp16 are 16-bit compute over fp32 shards or
  -- master weights, while its own FSDP2 preparation keeps the loaded dtype
  -- (vramplan.stacks, precision_rule)
  local sharded = keys.framework == "fsdp" or keys.framework == "deepspeed"
  -- (the Trainer's autocast runs over the loaded weights: bf16-autocast)
  local flag = sharded and { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16" }
    or { ["bf16-autocast"] = "bf16", ["fp16-autocast"] = "fp16" }
  if flag[p] then put(t, flag[p], true)
  elseif p == "fp32" then put(t, "bf16", false)
  elseif p ~= nil then
    refuse(what, "precision", p, sharded and "an axolotl config under FSDP or DeepSpeed (mixed-bf16, mixed-fp16 or fp32)"
      or "an axolotl config (bf16-autocast, fp16-autocast or fp32: the Trainer autocasts over the loaded weights)")
  end
  local c = take("checkpointing")
  if c == "full" then put(t, "gradient_checkpointing", true)
  elseif c == "none" then put(t, "gradient_checkpointing", false)
  elseif c ~= nil then refuse(what, "checkpointing", c, "an axolotl config (full or none)") end
  -- axolotl's activation_offloading as its 0.18 runs it (vramplan.stacks,
  -- which the import's default is): TRL 1.8's OffloadActivations under
  -- axolotl's patch, an adapter's layers not recomputed, a full
  -- fine-tuning's wrapped non-reentrant; "legacy" without streams. (0.12's,
  -- torchtune's design around wrapped layers, is no file of today's.)
  local adapter = keys.finetune == "lora" or keys.finetune == "qlora"
  if keys.offload_torchtune and keys.offload_activations and keys.offload_trl and keys.offload_clone_views
      and ((adapter and c == "none") or (not adapter and c == "full" and keys.use_reentrant == false)) then
    for _, k in ipairs({ "offload_torchtune", "offload_activations", "offload_trl", "offload_clone_views" }) do take(k) end
    local streams = take("offload_streams")
    put(t, "activation_offloading", streams == false and "legacy" or true)
  end
  if keys.use_reentrant ~= nil then put(t, "gradient_checkpointing_kwargs", { { "use_reentrant", take("use_reentrant") } }) end
  local a = take("attention")
  if a == "flash" then put(t, "flash_attention", true)
  elseif a == "sdpa" then put(t, "sdp_attention", true)
  elseif a == "eager" then put(t, "eager_attention", true)
  elseif a ~= nil then refuse(what, "attention", a, "an axolotl config") end
  -- the Liger plugin's kernels and fused linear cross-entropy, and the Cut
  -- Cross Entropy plugin (vramplan.import.axolotl reads them back);
  -- the defaults, auto kernels and plain cross-entropy, need no key
  local kernels, loss = keys.kernels, keys.loss
  written.kernels = kernels == "fused" or kernels == "auto" or nil
  written.loss = loss == "fused-linear" or loss == "cut" or loss == "cross-entropy" or loss == "liger-ce" or nil
  -- (--set gives strings)
  local rms_norm, swiglu = tostring(take("liger_rms_norm")) == "true", tostring(take("liger_swiglu")) == "true"
  local plugins = {}
  if kernels == "fused" or loss == "fused-linear" or loss == "liger-ce" or rms_norm or swiglu then
    plugins[#plugins + 1] = "axolotl.integrations.liger.LigerPlugin"
  end
  if loss == "cut" then plugins[#plugins + 1] = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin" end
  if #plugins > 0 then put(t, "plugins", { list = plugins }) end
  if kernels == "fused" then put(t, "liger_rope", true) end
  if rms_norm then put(t, "liger_rms_norm", true) end
  if swiglu then put(t, "liger_glu_activation", true) end
  if loss == "fused-linear" then put(t, "liger_fused_linear_cross_entropy", true)
  elseif loss == "liger-ce" then put(t, "liger_cross_entropy", true)
  elseif loss == "cut" then put(t, "cut_cross_entropy", true) end
  put_optim(t, keys, written, what, "an axolotl config", "optimizer", "adamw_torch_fused")
  put(t, "weight_decay", take("weight_decay"))
  -- GPT-OSS's MXFP4 checkpoint dequantized while loading; axolotl loads
  -- with a device map outside FSDP and ZeRO-3 (vramplan.import.axolotl)
  if take("checkpoint_quant") == "mxfp4" then
    put(t, "model_quantization_config", "Mxfp4Config")
    put(t, "model_quantization_config_kwargs", { { "dequantize", true } })
  end
  -- axolotl runs transformers 5 from 0.14 (vramplan.stacks): implied, not a key
  written.transformers_major = keys.transformers_major == 5 or nil
  local device_map = require("vramplan.import.axolotl").loads_with_device_map(keys)
  if keys.load == (device_map and "device-map" or "cpu") or keys.load == "auto" then take("load") end
  if names_deepspeed_file(keys.framework or "torch", written, what, options, "an axolotl config") then
    put(t, "deepspeed", options.deepspeed)
  elseif keys.framework == "fsdp" then
    local s = take("fsdp") or "full_shard"
    local opts = { s }
    if keys.offload_params == "cpu" then opts[#opts + 1] = "offload" end
    written.offload_params = keys.offload_params == "cpu" or keys.offload_params == "none" or nil
    opts[#opts + 1] = "auto_wrap"
    put(t, "fsdp", { list = opts })
  elseif keys.framework == "fsdp2" then
    -- fsdp_version 2 (vramplan.import.axolotl reads it back as fsdp2 over
    -- transformers' model code)
    put(t, "fsdp_version", 2)
    local f = ordered()
    put(f, "reshard_after_forward", take("reshard_after_forward") ~= false)
    local off = take("offload_params")
    if off ~= nil then put(f, "offload_params", off ~= "none") end
    put(f, "auto_wrap_policy", "TRANSFORMER_BASED_WRAP")
    fsdp2_over_transformers(keys, written)
    put(t, "fsdp_config", f)
  elseif keys.framework ~= nil and keys.framework ~= "torch" then
    refuse(what, "framework", keys.framework,
      "an axolotl config (torch, fsdp, fsdp2, or deepspeed with --deepspeed FILE)")
  end
  local defaults = require("vramplan.stacks").profiles.axolotl.defaults
  return yaml_text(t, "# axolotl config written by vramplan export\n"), leftovers(keys, written, defaults)
end

-- LLaMA-Factory: the argument names of src/llamafactory/hparams/
-- (finetuning_args.py, model_args.py, data_args.py) and transformers'
-- TrainingArguments (vramplan.import.llamafactory reads them back). Its
-- defaults differ from vramplan's (finetuning_type lora, checkpointing on,
-- per_device_train_batch_size 8, cutoff_len 2048), so the keys they touch
-- are always written. A DeepSpeed run names its DeepSpeed config
-- (names_deepspeed_file).

local function common_count(v) return require("vramplan.import.common").count(v) end

local function t_has(t, key)
  for _, kv in ipairs(t) do
    if kv[1] == key then return kv[2] == true end
  end
  return false
end

local function llama_factory(keys, _, what, options)
  local t, written = ordered(), {}
  local declared = {}
  for _, k in ipairs(require("vramplan").recipe_keys()) do declared[k.name] = k end
  -- a value as its YAML type (--set gives strings)
  local function take(k)
    written[k] = true
    local v, kind = keys[k], declared[k] and declared[k].type
    if type(v) == "string" and (kind == "int" or kind == "number") and tonumber(v) then return common_count(v) end
    if type(v) == "string" and kind == "bool" and (v == "true" or v == "false") then return v == "true" end
    return v
  end
  -- a key the recipe leaves unset has vramplan's default, written out where
  -- LLaMA-Factory's differs
  local function value(k)
    local v = take(k)
    if v == nil then v = declared[k] and declared[k].default end
    return v
  end
  local fw = take("framework") or "torch"
  if not names_deepspeed_file(fw, written, what, options, "a LLaMA-Factory config") and fw ~= "torch" then
    refuse(what, "framework", fw, "a LLaMA-Factory config (torch, or deepspeed with --deepspeed FILE; " ..
      "FSDP is accelerate's config: --format accelerate)")
  end
  if options.hub_id then put(t, "model_name_or_path", options.hub_id) end
  put(t, "stage", "sft")
  put(t, "do_train", true)
  local ft = value("finetune")
  if ft == "full" or ft == "freeze" then
    put(t, "finetuning_type", ft)
    if ft == "freeze" then put(t, "freeze_trainable_layers", value("trainable_layers")) end
  elseif ft == "lora" or ft == "qlora" then
    put(t, "finetuning_type", "lora")
    if ft == "qlora" then
      local q = value("quant")
      if q == "int8" then put(t, "quantization_bit", 8)
      elseif q == "nf4" or q == "fp4" then
        put(t, "quantization_bit", 4)
        put(t, "quantization_type", q)
        put(t, "double_quantization", value("double_quant"))
      else refuse(what, "quant", q, "a LLaMA-Factory config (nf4, fp4, int8)") end
    end
    put(t, "lora_rank", value("lora_rank"))
    -- LLaMA-Factory's own default is twice the rank; vramplan's is the rank
    put(t, "lora_alpha", value("lora_alpha"))
    put(t, "lora_dropout", value("lora_dropout"))
    local targets = take("lora_targets")
    if targets == nil then
      refuse(what, "lora_targets", "(unset: the model's own q_proj,v_proj)", "a LLaMA-Factory config without naming " ..
        "the modules (set lora_targets)")
    end
    put(t, "lora_target", targets == "all-linear" and "all" or targets)
    local save = take("modules_to_save")
    if save ~= nil and save ~= "" then put(t, "additional_target", save) end
    if keys.use_dora ~= nil then put(t, "use_dora", take("use_dora")) end
  else
    refuse(what, "finetune", ft, "a LLaMA-Factory config (full, freeze, lora, qlora)")
  end
  put(t, "per_device_train_batch_size", value("micro_batch"))
  put(t, "gradient_accumulation_steps", take("grad_accum"))
  put(t, "cutoff_len", take("seq_len"))
  local p = take("precision")
  local lora = ft == "lora" or ft == "qlora"
  -- the llama-factory stack's rule (vramplan.stacks): weights in the compute
  -- dtype; LoRA adapters, and full / freeze tuning's trainable weights, fp32
  if fw == "deepspeed" then
    if p == "mixed-bf16" then put(t, "bf16", true)
    elseif p == "mixed-fp16" then put(t, "fp16", true)
    elseif p ~= nil and p ~= "fp32" then
      refuse(what, "precision", p, "a LLaMA-Factory config under DeepSpeed (mixed-bf16, mixed-fp16, fp32)")
    end
  elseif lora and p == "bf16-autocast" then put(t, "bf16", true)
  elseif lora and p == "fp16-autocast" then put(t, "fp16", true)
  elseif lora and p == "bf16" then -- neither flag: the inferred compute dtype (bf16), no autocast
  elseif not lora and p == "amp-bf16" then put(t, "bf16", true)
  elseif not lora and p == "amp-fp16" then put(t, "fp16", true)
  elseif not lora and p == "bf16" then put(t, "pure_bf16", true)
  elseif p ~= nil and (p ~= "fp32" or lora) then
    -- LoRA in fp32: without bf16 / fp16 LLaMA-Factory still infers a 16-bit compute dtype
    refuse(what, "precision", p, string.format("a LLaMA-Factory config with finetuning %s (%s)", ft,
      lora and "bf16-autocast, fp16-autocast, or bf16 without either flag: it infers a 16-bit compute dtype"
        or "amp-bf16, amp-fp16, bf16 (pure_bf16) or fp32"))
  end
  local c = value("checkpointing")
  if c ~= "full" and c ~= "none" then
    refuse(what, "checkpointing", c, "a LLaMA-Factory config (full or none: disable_gradient_checkpointing)")
  end
  put(t, "disable_gradient_checkpointing", c == "none")
  if keys.use_reentrant ~= nil then put(t, "use_reentrant_gc", take("use_reentrant")) end
  local a = value("attention")
  local fa = { flash = "fa2", sdpa = "sdpa", eager = "disabled" }
  if not fa[a] then refuse(what, "attention", a, "a LLaMA-Factory config (flash, sdpa, eager)") end
  put(t, "flash_attn", fa[a])
  -- enable_liger_kernel: Liger's kernels with its defaults, and (stage sft)
  -- its fused linear cross-entropy (vramplan.import.llamafactory)
  if keys.kernels == "fused" and keys.loss == "fused-linear" and tostring(keys.liger_rms_norm) == "true"
    and tostring(keys.liger_swiglu) == "true" then
    for _, k in ipairs({ "kernels", "loss", "liger_rms_norm", "liger_swiglu" }) do take(k) end
    put(t, "enable_liger_kernel", true)
  end
  put_optim(t, keys, written, what, "a LLaMA-Factory config", "optim")
  put(t, "weight_decay", take("weight_decay"))
  -- bitsandbytes computes in LLaMA-Factory's compute dtype (bf16 / fp16 as set)
  local cd = keys.compute_dtype
  if ft == "qlora" and cd ~= nil and ((cd == "bf16" and (t_has(t, "bf16") or t_has(t, "pure_bf16")))
    or (cd == "fp16" and t_has(t, "fp16"))) then
    written.compute_dtype = true
  end
  if options.deepspeed then put(t, "deepspeed", options.deepspeed) end
  local stack_defaults = require("vramplan.stacks").profiles["llama-factory"].defaults
  local rest = leftovers(keys, written, stack_defaults)
  -- LLaMA-Factory's own defaults the recipe, left unset, would not have had
  for k in pairs(stack_defaults) do
    local d, v = declared[k] and declared[k].default, stack_default(stack_defaults, k, keys)
    if keys[k] == nil and d ~= nil and v ~= nil and tostring(d) ~= tostring(v) then
      rest[#rest + 1] = string.format("%s (unset, %s; LLaMA-Factory's is %s)", k, tostring(d), tostring(v))
    end
  end
  if p == nil then
    -- vramplan's default precision (mixed-bf16) is no LLaMA-Factory setting
    rest[#rest + 1] = "precision (unset, so vramplan's mixed-bf16, which LLaMA-Factory does not run; without bf16 / fp16 " ..
      "it infers the compute dtype: read back, " .. (lora and "bf16" or "fp32") .. ")"
  end
  return yaml_text(t, "# LLaMA-Factory config written by vramplan export (add dataset, template, output_dir)\n"), rest
end

export.formats = { deepspeed = deepspeed, accelerate = accelerate, axolotl = axolotl, ["llama-factory"] = llama_factory }

-- Writes `keys` (recipe keys, normalized) in `format`; `autos` names the
-- keys an imported config left "auto". Returns the text and the keys the
-- format could not hold.
function export.write(format, keys, autos, what, options)
  local writer = export.formats[format]
  if not writer then
    error(string.format("unknown format %s: deepspeed, accelerate, axolotl or llama-factory", tostring(format)), 0)
  end
  options = options or {}
  local text, rest = writer(keys, autos or {}, what, options)
  -- "auto" values only a DeepSpeed config holds (LLaMA-Factory's, with
  -- --deepspeed, in the file written with --format deepspeed)
  if format ~= "deepspeed" and not options.deepspeed then
    local autos_left = {}
    for k in pairs(autos or {}) do autos_left[#autos_left + 1] = k .. " (auto)" end
    table.sort(autos_left)
    for _, k in ipairs(autos_left) do rest[#rest + 1] = k end
  end
  return text, rest
end

-- The Hugging Face id of a model in models/ (the reverse of vramplan.hub_ids).
function export.hub_id(name)
  local hub_ids = require("vramplan.hub_ids")
  name = hub_ids.implementations[name] or name
  for id, n in pairs(hub_ids.ids) do
    if n == name then return id end
  end
end

return export
