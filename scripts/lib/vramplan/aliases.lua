-- vramplan.aliases — the names other tools give recipe keys and their values
-- (Hugging Face's TrainingArguments and PEFT, torchtune, DeepSpeed, Megatron, PyTorch's
-- enumerations), turned into vramplan's before the keys reach the core; and
-- the settings one key implies about another (zero = 3: DeepSpeed).
local vramplan = require("vramplan")

local aliases = {}

-- One table: another tool's key name -> the recipe key it sets. A value
-- function, where present, turns that tool's value into ours.
local function checkpointing_flag(v)
  if v == true or v == "true" then return "full" end
  if v == false or v == "false" then return "none" end
  return v
end

-- torchtitan's parallelism.pipeline_parallel_schedule: torch's schedule
-- names, which torch's get_schedule_class takes in any case
-- (torch/distributed/pipelining/schedules.py): never Megatron's 1f1b.
local torch_schedules = { ["1f1b"] = "1F1B", gpipe = "GPipe", interleaved1f1b = "Interleaved1F1B",
  interleavedzerobubble = "InterleavedZeroBubble", zbvzerobubble = "ZBVZeroBubble", dualpipev = "DualPipeV" }
local function torch_schedule(v)
  return type(v) == "string" and torch_schedules[v:lower()] or v
end

aliases.keys = {
  -- transformers TrainingArguments
  per_device_train_batch_size = { key = "micro_batch" },
  gradient_accumulation_steps = { key = "grad_accum" },
  gradient_checkpointing = { key = "checkpointing", value = checkpointing_flag },
  attn_implementation = { key = "attention" },
  optim = { key = "optimizer" },
  max_seq_length = { key = "seq_len" }, -- TRL's SFTConfig
  max_length = { key = "seq_len" },
  -- PEFT's LoraConfig
  r = { key = "lora_rank" },
  target_modules = { key = "lora_targets" },
  -- axolotl
  micro_batch_size = { key = "micro_batch" }, -- also Megatron's name
  sequence_len = { key = "seq_len" },
  lora_r = { key = "lora_rank" },
  lora_target_modules = { key = "lora_targets" },
  -- LLaMA-Factory
  cutoff_len = { key = "seq_len" },
  lora_target = { key = "lora_targets" },
  -- torchtune's recipe configs (recipes/configs/*.yaml)
  optimizer_in_bwd = { key = "optimizer_in_backward" },
  enable_activation_offloading = { key = "offload_activations" },
  num_output_chunks = { key = "loss_chunks" }, -- its chunked losses' argument
  -- DeepSpeed
  train_batch_size = { key = "global_batch" },
  train_micro_batch_size_per_gpu = { key = "micro_batch" },
  zero_stage = { key = "zero" },
  offload_param = { key = "offload_params" },
  -- Megatron-LM
  global_batch_size = { key = "global_batch" },
  seq_length = { key = "seq_len" },
  tensor_model_parallel_size = { key = "tp" },
  pipeline_model_parallel_size = { key = "pp" },
  context_parallel_size = { key = "cp" },
  expert_model_parallel_size = { key = "ep" },
  use_distributed_optimizer = { key = "distributed_optimizer" },
  -- accelerate, torchrun
  num_processes = { key = "gpus" },
  world_size = { key = "gpus" },
  fsdp_sharding_strategy = { key = "fsdp" },
  sharding_strategy = { key = "fsdp" },
  -- torchtitan (torchtitan/config/configs.py, ParallelismConfig)
  ["parallelism.pipeline_parallel_degree"] = { key = "pp" },
  ["parallelism.pipeline_parallel_schedule"] = { key = "pp_schedule", value = torch_schedule },
  ["parallelism.pipeline_parallel_layers_per_stage"] = { key = "pp_layers_per_stage" },
  ["parallelism.pipeline_parallel_first_stage_less_layers"] = { key = "pp_first_stage_less_layers" },
  ["parallelism.pipeline_parallel_last_stage_less_layers"] = { key = "pp_last_stage_less_layers" },
  -- async tensor parallelism, by torchtitan's era: experimental. in Dec
  -- 2024 (torchtitan/config_manager.py at 9dec370), parallelism. (the
  -- Parallelism dataclass, torchtitan/config/job_config.py), compile.
  -- since 737594746 (CompileConfig, torchtitan/config/configs.py, 2026-08)
  ["experimental.enable_async_tensor_parallel"] = { key = "async_tp" },
  ["parallelism.enable_async_tensor_parallel"] = { key = "async_tp" },
  ["compile.enable_async_tensor_parallel"] = { key = "async_tp" },
}

-- Other spellings of enumerated values, per recipe key (compared in lower
-- case). Anything else is lower-cased, then tried with '_' and '-' swapped.
aliases.values = {
  -- torch.distributed.fsdp.ShardingStrategy: its names, and the numbers
  -- accelerate's older configs stored (1 FULL_SHARD, 2 SHARD_GRAD_OP,
  -- 3 NO_SHARD, 4 HYBRID_SHARD: accelerate/utils/constants.py FSDP_SHARDING_STRATEGY)
  fsdp = { ["1"] = "full_shard", ["2"] = "shard_grad_op", ["3"] = "no_shard", ["4"] = "hybrid_shard" },
  -- torch dtypes and transformers' precision names
  precision = { bfloat16 = "bf16", ["torch.bfloat16"] = "bf16", float16 = "fp16", ["torch.float16"] = "fp16",
                half = "fp16", float32 = "fp32", ["torch.float32"] = "fp32", float = "fp32" },
  compute_dtype = { bfloat16 = "bf16", ["torch.bfloat16"] = "bf16", float16 = "fp16", ["torch.float16"] = "fp16",
                    float32 = "fp32", ["torch.float32"] = "fp32" },
  -- transformers' attn_implementation
  attention = { flash_attention_2 = "flash", flash_attention_3 = "flash", sdpa = "sdpa", eager = "eager" },
  -- transformers' OptimizerNames (training_args.py) and torch.optim's class names
  optimizer = { adamw_torch = "adamw", adamw_torch_fused = "adamw", adamw_apex_fused = "adamw",
                adamw_hf = "adamw-hf", adamw_bnb_8bit = "adamw-8bit", adamw_8bit = "adamw-8bit",
                paged_adamw_8bit = "paged-adamw-8bit", paged_adamw_32bit = "paged-adamw-32bit",
                paged_adamw = "paged-adamw-32bit", lion_32bit = "lion", lion_8bit = "lion",
                adamw_torch_8bit = "adamw-8bit-torchao", adamw_torch_4bit = "adamw-4bit-torchao",
                sgd = "sgd", adam = "adam", adamw = "adamw", adafactor = "adafactor",
                fusedadam = "adamw", cpuadam = "adamw", deepspeedcpuadam = "adamw" },
  -- accelerate's DistributedType and Megatron's names
  framework = { multi_gpu = "torch", no = "torch", ddp = "torch", megatron_lm = "megatron", ["megatron-lm"] = "megatron" },
  offload_optimizer = { ["false"] = "none", ["true"] = "cpu" },
  offload_params = { ["false"] = "none", ["true"] = "cpu" },
  checkpointing = { ["true"] = "full", ["false"] = "none" },
  lora_targets = { all = "all-linear", ["all_linear"] = "all-linear" },
  -- the zero-bubble schedules by their short names (torch's own are
  -- choices as they are spelled)
  pp_schedule = { ["zero-bubble"] = "InterleavedZeroBubble", zbv = "ZBVZeroBubble", dualpipev = "DualPipeV",
                  interleavedzerobubble = "InterleavedZeroBubble", zbvzerobubble = "ZBVZeroBubble" },
}

-- Recipe keys the core declares: name -> declaration (choices for enums).
local declared
local function declarations()
  if not declared then
    declared = {}
    for _, k in ipairs(vramplan.recipe_keys()) do declared[k.name] = k end
  end
  return declared
end

-- The recipe key an alias names, or nil.
function aliases.key(name)
  local a = aliases.keys[name]
  return a and a.key
end

-- `value` as one of `key`'s choices, where another spelling names one.
local function respell(key, value)
  local decl = declarations()[key]
  local spellings = aliases.values[key]
  local text = type(value) == "boolean" and tostring(value) or (type(value) == "string" and value) or
    (math.type(value) == "integer" and tostring(value))
  if not text then return value end
  local lower = text:lower()
  if spellings and spellings[lower] then return spellings[lower] end
  if type(value) ~= "string" or not (decl and decl.choices) then return value end
  -- a choice spelled exactly stays itself (pp_schedule's 1F1B is torch's, 1f1b Megatron's)
  for _, choice in ipairs(decl.choices) do
    if choice == value then return choice end
  end
  for _, candidate in ipairs({ lower, (lower:gsub("_", "-")), (lower:gsub("%-", "_")) }) do
    for _, choice in ipairs(decl.choices) do
      if choice == candidate then return choice end
    end
  end
  return value
end

-- respell's answers by key, then value (a sweep asks the same ones for
-- every variant); forgotten all at once when full, so memory stays flat
local respelt, n_respelt = {}, 0
local MEMO_LIMIT = 4096

function aliases.value(key, value)
  local t = type(value)
  -- a string, a boolean or a number that can index a table (not NaN); not a list
  if t ~= "string" and t ~= "boolean" and (t ~= "number" or value ~= value) then return respell(key, value) end
  local by_key = respelt[key]
  local hit = by_key and by_key[value]
  if hit ~= nil then return hit end
  local answer = respell(key, value)
  if n_respelt >= MEMO_LIMIT then respelt, n_respelt, by_key = {}, 0, nil end
  if not by_key then by_key = {}; respelt[key] = by_key end
  by_key[value], n_respelt = answer, n_respelt + 1
  return answer
end

-- Renames aliased keys to the recipe's own and respells their values, in
-- place. Two names for one key must agree (the message blames both).
function aliases.apply(keys, origins)
  local renamed = {}
  for name, value in pairs(keys) do
    local a = aliases.keys[name]
    if a and not declarations()[name] then renamed[#renamed + 1] = { name, a, value } end
  end
  table.sort(renamed, function(x, y) return x[1] < y[1] end)
  for _, r in ipairs(renamed) do
    local name, a, value = r[1], r[2], r[3]
    local origin = origins[name]
    keys[name], origins[name] = nil, nil
    if a.value then value = a.value(value) end
    local key = a.key
    if keys[key] ~= nil and tostring(aliases.value(key, keys[key])) ~= tostring(aliases.value(key, value)) then
      error(string.format("%s: %s (%s) disagrees with %s = %s (%s)", origin or "recipe", name, tostring(value), key,
        tostring(keys[key]), origins[key] or "recipe"), 0)
    end
    if keys[key] == nil then keys[key], origins[key] = value, origin end
  end
  -- transformers' OptimizerNames.ADAMW_TORCH_FUSED is torch.optim.AdamW
  -- with fused=True, ADAMW_TORCH torch.optim.AdamW as it comes, foreach on
  -- CUDA (trainer.py, get_optimizer_cls_and_kwargs; torch/optim/optimizer.py,
  -- _default_to_fused_or_foreach): the name says the implementation too,
  -- whichever tool's config or --set gives it (under DeepSpeed too, where
  -- the Trainer's optimizer is DeepSpeed's client optimizer)
  local o = type(keys.optimizer) == "string" and keys.optimizer:lower()
  local impl = ({ adamw_torch_fused = "fused", adamw_torch = "foreach" })[o]
  if impl and keys.optimizer_impl == nil then
    keys.optimizer_impl, origins.optimizer_impl = impl, (origins.optimizer or "recipe") .. " (" .. o .. ")"
  end
  for key, value in pairs(keys) do keys[key] = aliases.value(key, value) end
end

local function number(v) return tonumber(v) end

-- Settings implied by others, filled only where unset: a ZeRO stage means
-- DeepSpeed, a sharding strategy FSDP, tensor parallelism Megatron (unless
-- `framework_default`, the stack's, says otherwise); a GPU count with
-- only data parallelism left open sets dp; a global batch with the
-- accumulation steps sets the micro-batch (DeepSpeed's train_batch_size =
-- train_micro_batch_size_per_gpu x gradient_accumulation_steps x world
-- size, deepspeed/runtime/config.py _batch_assertion).
function aliases.imply(keys, origins, framework_default)
  local function set(key, value, because)
    keys[key], origins[key] = value, string.format("%s (implied by %s)", origins[because] or "recipe", because)
  end
  if keys.framework == nil then
    if keys.zero ~= nil then set("framework", "deepspeed", "zero")
    elseif keys.fsdp ~= nil and keys.fsdp ~= "none" then set("framework", "fsdp", "fsdp")
    elseif (number(keys.tp) or 1) > 1 then set("framework", framework_default or "megatron", "tp")
    end
  end
  local gpus = number(keys.gpus)
  if gpus and keys.dp == nil then
    local other = (number(keys.tp) or 1) * (number(keys.pp) or 1) * (number(keys.cp) or 1)
    if gpus % other == 0 then set("dp", gpus // other, "gpus") end
  end
  local global, accum, micro = number(keys.global_batch), number(keys.grad_accum), number(keys.micro_batch)
  if global and accum and not micro and (number(keys.pp) or 1) == 1 then
    local dp = number(keys.dp) or 1
    local per_rank = global / (accum * dp)
    if per_rank ~= math.floor(per_rank) or per_rank < 1 then
      error(string.format("%s: global_batch %s is not grad_accum %s x dp %s x a whole micro-batch",
        origins.global_batch or "recipe", tostring(global), tostring(accum), tostring(dp)), 0)
    end
    set("micro_batch", math.tointeger(per_rank), "global_batch")
  end
end

return aliases
