-- vramplan.import.deepspeed — a DeepSpeed config (ds_config.json) as recipe
-- keys: batch sizes, fp16/bf16, the optimizer, ZeRO and its offloads and
-- buckets. "auto" values (the Hugging Face integration's) are left to the
-- rest of the run, the bucket sizes computed from the model's width as
-- transformers does. Keys that change nothing vramplan models are listed
-- in one warning; a malformed file is an error at its line and column.
--
-- Defaults and meanings: DeepSpeed's deepspeed/runtime/zero/config.py
-- (DeepSpeedZeroConfig), deepspeed/runtime/zero/offload_config.py,
-- deepspeed/runtime/constants.py, deepspeed/runtime/activation_checkpointing/config.py
-- (deepspeedai/DeepSpeed, 0.16-0.17).
local json = require("dkjson")
local common = require("vramplan.import.common")

local deepspeed = {}

-- Parses JSON text: checked strictly first (import.json_check: the first
-- byte that is not JSON, as a line and column), then decoded by dkjson.
function deepspeed.decode(text, path)
  local at, problem = require("vramplan.import.json_check").problem(text)
  if at then
    local line, col = common.position(text, at)
    error(string.format("%s:%d:%d: %s", path, line, col, problem), 0)
  end
  local value, pos, err = json.decode(text, 1, json.null)
  if err then
    local line, col = common.position(text, pos)
    err = err:gsub(" at line %d+, column %d+$", "")
    error(string.format("%s:%d:%d: %s", path, line, col, err), 0)
  end
  local rest = text:find("%S", pos)
  if rest then
    local line, col = common.position(text, rest)
    error(string.format("%s:%d:%d: unexpected text after the JSON value", path, line, col), 0)
  end
  if type(value) ~= "table" or value[1] ~= nil then
    error(string.format("%s:1:1: a DeepSpeed config is a JSON object", path), 0)
  end
  return value
end

-- Keys at these values are what vramplan models already (DeepSpeed's
-- defaults, from the files above); elsewhere they are listed as not modelled.
local zero_defaults = {
  contiguous_gradients = true, reduce_scatter = true, allgather_partitions = true, use_multi_rank_bucket_allreduce = true,
  load_from_fp32_weights = true, elastic_checkpoint = false, sub_group_size = 1e9, ignore_unused_parameters = true,
  legacy_stage1 = false, round_robin_gradients = false, zero_hpz_partition_size = 1, zero_quantized_weights = false,
  zero_quantized_nontrainable_weights = false, zero_quantized_gradients = false, memory_efficient_linear = true,
  stage3_module_granularity_threshold = 0, stage3_use_all_reduce_for_fetch_params = false,
  mics_shard_size = -1, mics_hierarchical_params_gather = false,
}

-- Keys that change no memory of a training step, so there is nothing to model.
local no_memory = {
  -- logging, checkpoint saving, schedules, loss scaling, clipping norms
  steps_per_print = true, wall_clock_breakdown = true, gradient_clipping = true, scheduler = true,
  zero_allow_untested_optimizer = true, zero_force_ds_cpu_optimizer = true, dump_state = true, tensorboard = true,
  wandb = true, csv_monitor = true, comms_logger = true, memory_breakdown = true, seed = true, checkpoint = true,
  prescale_gradients = true, gradient_predivide_factor = true, flops_profiler = true, timers = true,
  monitor_config = true,
}
local zero_no_memory = {
  stage3_gather_16bit_weights_on_model_save = true, stage3_gather_fp16_weights_on_model_save = true,
  gather_16bit_weights_on_model_save = true, log_trace_cache_warnings = true, enable_sanity_checks = true,
  pipeline_loading_checkpoint = true, override_module_apply = true,
}
-- fp16's dynamic loss scaler: scalars only (deepspeed/runtime/fp16/loss_scaler.py)
local fp16_no_memory = { loss_scale = true, loss_scale_window = true, initial_scale_power = true, hysteresis = true,
  consecutive_hysteresis = true, min_loss_scale = true, enabled = true }

-- DeepSpeed's optimizer types (deepspeed/runtime/engine.py
-- _configure_basic_optimizer): Adam is AdamW unless adam_w_mode is false;
-- both run FusedAdam (DeepSpeedCPUAdam with an offloaded optimizer), or
-- torch.optim's with torch_adam.
local optimizers = { adam = "adamw", adamw = "adamw", lion = "lion", muadam = "adam", muadamw = "adamw" }

-- The ZeRO keys that are recipe keys under the same name, and the
-- transformers "auto" rule for those it resolves from the model's width
-- (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_finalize).
local buckets = {
  reduce_bucket_size = function(h) return h * h end,
  allgather_bucket_size = false,
  stage3_prefetch_bucket_size = function(h) return math.floor(0.9 * h * h) end,
  stage3_param_persistence_threshold = function(h) return 10 * h end,
  stage3_max_live_parameters = false,
  stage3_max_reuse_distance = false,
  prefetch_bucket_size = function(h) return math.floor(0.9 * h * h) end,
  param_persistence_threshold = function(h) return 10 * h end,
  max_live_parameters = false,
  max_reuse_distance = false,
}
-- The pydantic aliases (config.py's Field(alias=...)): both spellings are read.
local bucket_key = {
  prefetch_bucket_size = "stage3_prefetch_bucket_size", param_persistence_threshold = "stage3_param_persistence_threshold",
  max_live_parameters = "stage3_max_live_parameters", max_reuse_distance = "stage3_max_reuse_distance",
}

local function enabled(section)
  if type(section) ~= "table" then return nil end
  return section.enabled
end

local function read_precision(r, config)
  local fp16, bf16 = enabled(config.fp16), enabled(config.bf16 or config.bfloat16)
  local bf16_name = config.bf16 and "bf16" or "bfloat16"
  -- DeepSpeed casts the model to the 16-bit dtype and keeps fp32 master
  -- weights in its optimizer: vramplan's mixed-*.
  if fp16 == true then r.set("precision", "mixed-fp16", { "fp16", "enabled" })
  elseif bf16 == true then r.set("precision", "mixed-bf16", { bf16_name, "enabled" })
  elseif common.is_auto(fp16) or common.is_auto(bf16) then
    r.auto_precision = true -- from the rest of the run (TrainingArguments' fp16 / bf16)
  else
    -- neither enabled: DeepSpeed trains in fp32 (FP16_ENABLED_DEFAULT, BFLOAT16_ENABLED_DEFAULT: false)
    r.set("precision", "fp32", config.fp16 and { "fp16", "enabled" } or nil, false,
      "DeepSpeed's default: neither fp16 nor bf16 enabled")
  end
  if type(config.fp16) == "table" then
    for k, v in pairs(config.fp16) do
      if not fp16_no_memory[k] and not (k == "auto_cast" and v == false) then r.skip({ "fp16", k }) end
    end
  end
  -- bf16 reads enabled and immediate_grad_update alone (runtime/config.py,
  -- get_bfloat16_enabled, get_bfloat16_immediate_grad_update): fp16's
  -- loss-scale keys copied into it change nothing
  for _, name in ipairs({ "bf16", "bfloat16" }) do
    if type(config[name]) == "table" then
      for k, v in pairs(config[name]) do
        if not fp16_no_memory[k] and not (k == "immediate_grad_update" and v == true) then r.skip({ name, k }) end
      end
    end
  end
end

local function read_optimizer(r, section)
  if type(section) ~= "table" then return end
  local kind = type(section.type) == "string" and section.type:lower() or nil
  local params = type(section.params) == "table" and section.params or {}
  local name = kind and optimizers[kind]
  if kind == "adam" and params.adam_w_mode == false then name = "adam" end
  if name then r.set("optimizer", name, { "optimizer", "type" }) else r.skip({ "optimizer", "type=" .. tostring(section.type) }) end
  if params.torch_adam == true then r.set("optimizer_impl", "foreach", { "optimizer", "params", "torch_adam" }) end
  if type(params.weight_decay) == "number" then r.set("weight_decay", params.weight_decay, { "optimizer", "params", "weight_decay" }) end
  for k in pairs(section) do
    if k ~= "type" and k ~= "params" then r.skip({ "optimizer", k }) end
  end
end

-- Parameter offload is read by ZeRO stage 3 alone: engine.py's
-- _configure_zero_optimizer passes offload_param only to the stage 3
-- optimizers (DeepSpeedZeRoOffload, DeepSpeedZeroOptimizer_Stage3); at
-- stages 0-2 DeepSpeed runs with the setting ignored.
local function stage3(zero) return tonumber(zero.stage) == 3 end

local function read_offload(r, zero, section, key)
  local o = zero[section]
  if o == nil then return end
  if type(o) ~= "table" then r.skip({ "zero_optimization", section }) return end
  local device = o.device
  if device == json.null or device == nil then device = "none" end
  if key == "offload_params" and device ~= "none" and not stage3(zero) then
    r.skip({ "zero_optimization", section .. " (only ZeRO stage 3 offloads parameters)" })
    return
  end
  r.set(key, device, { "zero_optimization", section, "device" })
  for k, v in pairs(o) do
    -- pin_memory chooses pinned host pages for the copy: no GPU memory; the
    -- rest sizes the NVMe pipeline's buffers or a partial offload
    if k ~= "device" and k ~= "pin_memory" and not (k == "ratio" and v == 1) then
      r.skip({ "zero_optimization", section, k })
    end
  end
end

local function read_zero(r, zero)
  if type(zero) ~= "table" then return end
  if zero.stage ~= nil then r.set("zero", zero.stage, { "zero_optimization", "stage" }) end
  read_offload(r, zero, "offload_optimizer", "offload_optimizer")
  read_offload(r, zero, "offload_param", "offload_params")
  if zero.cpu_offload == true then r.set("offload_optimizer", "cpu", { "zero_optimization", "cpu_offload" }) end
  if zero.cpu_offload_param == true then
    if stage3(zero) then r.set("offload_params", "cpu", { "zero_optimization", "cpu_offload_param" })
    else r.skip({ "zero_optimization", "cpu_offload_param (only ZeRO stage 3 offloads parameters)" }) end
  end
  if zero.overlap_comm ~= nil then r.set("overlap_comm", zero.overlap_comm, { "zero_optimization", "overlap_comm" }) end
  for k, v in pairs(zero) do
    if buckets[k] ~= nil then
      local key = bucket_key[k] or k
      if common.is_auto(v) then
        if buckets[k] then
          r.deferred[#r.deferred + 1] = { key = key, from_hidden = buckets[k],
            origin = r.where({ "zero_optimization", k }) .. " (auto: from the model's hidden size, as transformers resolves it)" }
        end
      else
        r.set(key, common.count(v) or v, { "zero_optimization", k })
      end
    elseif k == "stage" or k == "offload_optimizer" or k == "offload_param" or k == "overlap_comm"
      or k == "cpu_offload" or k == "cpu_offload_param" or k == "cpu_offload_use_pin_memory" or zero_no_memory[k] then
      -- read above, or nothing to model
    elseif zero_defaults[k] == nil or zero_defaults[k] ~= v then
      r.skip({ "zero_optimization", k })
    end
  end
end

-- activation_checkpointing configures deepspeed.checkpointing, which only a
-- model calling it uses (Megatron-DeepSpeed); it turns nothing on by itself.
local function read_activation_checkpointing(r, section)
  if type(section) ~= "table" then return end
  for k, v in pairs(section) do
    if v ~= false and v ~= json.null and not (k == "number_checkpoints") then
      r.skip({ "activation_checkpointing", k })
    end
  end
end

local known = {
  train_batch_size = true, train_micro_batch_size_per_gpu = true, gradient_accumulation_steps = true,
  fp16 = true, bf16 = true, bfloat16 = true, optimizer = true, zero_optimization = true, activation_checkpointing = true,
}

-- Fills recipe `r` (import.common.recipe) from a decoded config.
function deepspeed.read(r, config)
  for json_key, key in pairs({ train_batch_size = "global_batch", train_micro_batch_size_per_gpu = "micro_batch",
                                gradient_accumulation_steps = "grad_accum" }) do
    local v = config[json_key]
    if v ~= nil and not common.is_auto(v) then r.set(key, common.count(v) or v, { json_key }) end
  end
  -- train_batch_size alone: no accumulation, the micro-batch from the
  -- world size (deepspeed/runtime/config.py, _set_batch_related_parameters)
  if r.keys.global_batch ~= nil and r.keys.micro_batch == nil and config.gradient_accumulation_steps == nil then
    r.set("grad_accum", 1, { "train_batch_size" }, false, "DeepSpeed: train_batch_size alone means no accumulation")
  end
  read_precision(r, config)
  read_optimizer(r, config.optimizer)
  read_zero(r, config.zero_optimization)
  read_activation_checkpointing(r, config.activation_checkpointing)
  local sections = { fp16 = true, bf16 = true, bfloat16 = true, optimizer = true, zero_optimization = true,
                     activation_checkpointing = true }
  for k, v in pairs(config) do
    if not known[k] and not no_memory[k] then r.skip({ k })
    elseif sections[k] and type(v) ~= "table" then
      r.skip({ k .. "=" .. common.show(v) .. " (a section is a JSON object)" })
    end
  end
  -- a DeepSpeed config means DeepSpeed's engine, ZeRO stage 0 unless given
  r.set("framework", "deepspeed", nil, false, "a DeepSpeed config")
  r.set("zero", 0, nil, false, "DeepSpeed's default stage")
  return r
end

-- Loads a DeepSpeed config file: a recipe (import.common.recipe) with its
-- keys, origins, deferred "auto" values and unmodelled keys.
function deepspeed.load(path)
  local text = common.read(path)
  local config = deepspeed.decode(text, path)
  return deepspeed.read(common.recipe(path, text), config)
end

return deepspeed
