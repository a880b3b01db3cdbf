-- vramplan.export — a recipe written as another tool's config: a DeepSpeed
-- JSON, an accelerate config YAML or an axolotl YAML, each the inverse of
-- its importer (vramplan.import.*), so that importing what is exported
-- gives the same recipe. Keys the format cannot hold are returned, for a
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
local function leftovers(keys, written, defaults)
  local rest = {}
  for k, v in pairs(keys) do
    if not written[k] and not (defaults and defaults[k] ~= nil and tostring(defaults[k]) == tostring(v)) then
      rest[#rest + 1] = k
    end
  end
  table.sort(rest)
  return rest
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
  local o = take("optimizer")
  if o ~= nil then
    local types = { adamw = "AdamW", adam = "Adam", lion = "Lion" }
    if not types[o] then refuse(what, "optimizer", o, "a DeepSpeed config (adamw, adam, lion)") end
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
local function accelerate(keys, _, what)
  local t, written = ordered(), { gpus = true, dp = true, gpus_per_node = true, framework = true, precision = true }
  local fw = keys.framework or "torch"
  local gpus = num(keys.gpus) or num(keys.dp) or 1
  local kinds = { deepspeed = "DEEPSPEED", fsdp = "FSDP", megatron = "MEGATRON_LM" }
  put(t, "compute_environment", "LOCAL_MACHINE")
  put(t, "distributed_type", kinds[fw] or (gpus > 1 and "MULTI_GPU" or "NO"))
  local p = keys.precision
  -- what the importer's precision rule gives back for each mixed_precision
  local back = { torch = { ["amp-bf16"] = "bf16", ["amp-fp16"] = "fp16", fp32 = "no" },
                 deepspeed = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16" },
                 fsdp = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16" },
                 megatron = { ["mixed-bf16"] = "bf16", ["mixed-fp16"] = "fp16" } }
  if p == "fp8" then put(t, "mixed_precision", "fp8")
  elseif p ~= nil then
    local mp = back[fw] and back[fw][p]
    if not mp then refuse(what, "precision", p, "an accelerate config with framework " .. fw) end
    put(t, "mixed_precision", mp)
  end
  put(t, "num_processes", math.tointeger(gpus))
  local per_node = num(keys.gpus_per_node)
  if per_node and gpus > per_node then put(t, "num_machines", math.tointeger(gpus // per_node)) end
  local function take(k) written[k] = true return keys[k] end
  if fw == "deepspeed" then
    local ds = ordered()
    put(ds, "zero_stage", take("zero") or 0)
    put(ds, "offload_optimizer_device", take("offload_optimizer"))
    put(ds, "offload_param_device", take("offload_params"))
    put(ds, "gradient_accumulation_steps", take("grad_accum"))
    put(t, "deepspeed_config", ds)
  elseif fw == "fsdp" then
    local f = ordered()
    local s = take("fsdp")
    put(f, "fsdp_sharding_strategy", s and s:upper() or "FULL_SHARD")
    local off = take("offload_params")
    if off ~= nil then put(f, "fsdp_offload_params", off ~= "none") end
    if keys.checkpointing == "full" then put(f, "fsdp_activation_checkpointing", take("checkpointing") == "full") end
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
local optimizer_names = { adamw = "adamw_torch", ["adamw-hf"] = "adamw_hf", ["adamw-8bit"] = "adamw_bnb_8bit",
  ["paged-adamw-8bit"] = "paged_adamw_8bit", ["paged-adamw-32bit"] = "paged_adamw_32bit", adafactor = "adafactor",
  lion = "lion_32bit", sgd = "sgd", adam = "adam" }

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
    local list = {}
    for name in tostring(targets):gmatch("[^,%s]+") do list[#list + 1] = name end
    put(t, "lora_target_modules", { list = list })
  end
  local save = take("modules_to_save")
  if save ~= nil then
    local list = {}
    for name in tostring(save):gmatch("[^,%s]+") do list[#list + 1] = name end
    put(t, "lora_modules_to_save", { list = list })
  end
  if keys.use_dora ~= nil then put(t, "peft_use_dora", take("use_dora")) end
  put(t, "sequence_len", take("seq_len"))
  put(t, "micro_batch_size", take("micro_batch"))
  put(t, "gradient_accumulation_steps", take("grad_accum"))
  local p = take("precision")
  -- the axolotl stack loads the weights in the training dtype (vramplan.stacks)
  if p == "bf16" then put(t, "bf16", true)
  elseif p == "fp16" then put(t, "fp16", true)
  elseif p == "fp32" then put(t, "bf16", false)
  elseif p ~= nil then refuse(what, "precision", p, "an axolotl config (bf16, fp16 or fp32 weights)") end
  local c = take("checkpointing")
  if c == "full" then put(t, "gradient_checkpointing", true)
  elseif c == "none" then put(t, "gradient_checkpointing", false)
  elseif c ~= nil then refuse(what, "checkpointing", c, "an axolotl config (full or none)") end
  if keys.use_reentrant ~= nil then put(t, "gradient_checkpointing_kwargs", { { "use_reentrant", take("use_reentrant") } }) end
  local a = take("attention")
  if a == "flash" then put(t, "flash_attention", true)
  elseif a == "sdpa" then put(t, "sdp_attention", true)
  elseif a == "eager" then put(t, "eager_attention", true)
  elseif a ~= nil then refuse(what, "attention", a, "an axolotl config") end
  local o = take("optimizer")
  if o ~= nil then
    if not optimizer_names[o] then refuse(what, "optimizer", o, "an axolotl config") end
    put(t, "optimizer", optimizer_names[o])
  end
  put(t, "weight_decay", take("weight_decay"))
  if keys.framework == "fsdp" then
    local s = take("fsdp") or "full_shard"
    local opts = { s }
    if keys.offload_params == "cpu" then opts[#opts + 1] = "offload" written.offload_params = true end
    opts[#opts + 1] = "auto_wrap"
    put(t, "fsdp", { list = opts })
  elseif keys.framework ~= nil and keys.framework ~= "torch" then
    refuse(what, "framework", keys.framework, "an axolotl config of its own (write the DeepSpeed config with " ..
      "--format deepspeed and name it in `deepspeed:`)")
  end
  local defaults = require("vramplan.stacks").profiles.axolotl.defaults
  return yaml_text(t, "# axolotl config written by vramplan export\n"), leftovers(keys, written, defaults)
end

export.formats = { deepspeed = deepspeed, accelerate = accelerate, axolotl = axolotl }

-- Writes `keys` (recipe keys, normalized) in `format`; `autos` names the
-- keys an imported config left "auto". Returns the text and the keys the
-- format could not hold.
function export.write(format, keys, autos, what, options)
  local writer = export.formats[format]
  if not writer then
    error(string.format("unknown format %s: deepspeed, accelerate or axolotl", tostring(format)), 0)
  end
  return writer(keys, autos or {}, what, options or {})
end

-- The Hugging Face id of a model in models/ (the reverse of vramplan.hub_ids).
function export.hub_id(name)
  for id, n in pairs(require("vramplan.hub_ids").ids) do
    if n == name then return id end
  end
end

return export
