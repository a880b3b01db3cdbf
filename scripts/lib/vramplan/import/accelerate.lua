-- vramplan.import.accelerate — an accelerate config YAML (`accelerate config`,
-- `accelerate launch --config_file`) as recipe keys: the distributed type,
-- mixed precision, the process count, and the DeepSpeed, FSDP and
-- Megatron-LM plugin sections. Meanings and defaults: accelerate's
-- src/accelerate/commands/config/config_args.py (ClusterConfig:
-- mixed_precision "no", num_machines 1) and src/accelerate/utils/dataclasses.py
-- (DeepSpeedPlugin: zero_stage 2, offload devices "none"; the config file,
-- when named, decides instead; FullyShardedDataParallelPlugin: FULL_SHARD,
-- and set_mixed_precision's MixedPrecision(param_dtype=16-bit) over the
-- fp32 sharded parameters; MegatronLMPlugin).
local common = require("vramplan.import.common")

local accelerate = {}

local function truthy(v) return v == true or (type(v) == "string" and v:lower() == "true") end

-- Keys with no memory of their own in a training step (launching, placement, saving).
local no_memory = {}
for k in ([[compute_environment distributed_type mixed_precision num_processes num_machines machine_rank gpu_ids
  main_process_ip main_process_port main_training_function rdzv_backend same_network use_cpu debug enable_cpu_affinity
  tpu_env tpu_use_cluster tpu_use_sudo tpu_name tpu_zone commands command_file downcast_bf16 deepspeed_config
  fsdp_config megatron_lm_config fp8_config fp16]]):gmatch("%S+") do
  no_memory[k] = true
end

local distributed = { NO = "torch", MULTI_GPU = "torch", DEEPSPEED = "deepspeed", FSDP = "fsdp", MEGATRON_LM = "megatron" }

local function read_deepspeed(r, ds)
  local file = ds.deepspeed_config_file
  if type(file) == "string" and file ~= "" then
    common.merge_deepspeed(r, file, { "deepspeed_config", "deepspeed_config_file" })
  else
    r.set("zero", ds.zero_stage or 2, ds.zero_stage and { "deepspeed_config", "zero_stage" } or { "deepspeed_config" },
      false, not ds.zero_stage and "accelerate's default zero_stage" or nil)
    for key, field in pairs({ offload_optimizer = "offload_optimizer_device", offload_params = "offload_param_device" }) do
      if ds[field] ~= nil then r.set(key, ds[field], { "deepspeed_config", field }) end
    end
    if ds.gradient_accumulation_steps ~= nil then
      r.set("grad_accum", ds.gradient_accumulation_steps, { "deepspeed_config", "gradient_accumulation_steps" })
    end
  end
  -- transformers builds under zero.Init only where accelerate's plugin
  -- sets the DeepSpeed config up first (zero3_init_flag)
  if ds.zero3_init_flag ~= nil then
    r.set("zero_init", truthy(ds.zero3_init_flag), { "deepspeed_config", "zero3_init_flag" })
  end
  local known = { deepspeed_config_file = 1, zero_stage = 1, offload_optimizer_device = 1, offload_param_device = 1,
    gradient_accumulation_steps = 1, gradient_clipping = 1, zero3_init_flag = 1, zero3_save_16bit_model = 1,
    deepspeed_multinode_launcher = 1, deepspeed_hostfile = 1, deepspeed_exclusion_filter = 1,
    deepspeed_inclusion_filter = 1 }
  for k in pairs(ds) do
    if not known[k] then r.skip({ "deepspeed_config", k }) end
  end
end

-- FSDP1 by its sharding strategy, or FSDP2 (fsdp_version 2: accelerate's
-- fsdp2_prepare_model, fully_shard on each layer its auto-wrap policy names
-- and on the root) as vramplan's fsdp2 over transformers' model code, where
-- fsdp_reshard_after_forward (True by default) says whether a block's
-- parameters are freed after its forward (the last block's too, under
-- model_code transformers: framework_fsdp2.c), and gradients are
-- reduce-scattered in the compute dtype (set_mixed_precision's reduce_dtype:
-- reduce_dtype auto under model_code transformers; docs/configs.md).
-- FSDP2 has no sharding strategies: one is listed.
local function read_fsdp(r, fc)
  local v2 = tostring(fc.fsdp_version) == "2"
  local strategy, reshard = fc.fsdp_sharding_strategy, fc.fsdp_reshard_after_forward
  if v2 then
    local at = { "fsdp_config", "fsdp_version" }
    r.set("framework", "fsdp2", at, true)
    r.set("model_code", "transformers", at, false, "accelerate runs transformers' models")
    if reshard ~= nil then r.set("reshard_after_forward", truthy(reshard), { "fsdp_config", "fsdp_reshard_after_forward" }) end
  elseif strategy ~= nil then
    r.set("fsdp", strategy, { "fsdp_config", "fsdp_sharding_strategy" })
  elseif reshard ~= nil then
    -- FSDP2's key under FSDP1: resharding after forward is FULL_SHARD
    r.set("fsdp", truthy(reshard) and "full_shard" or "shard_grad_op", { "fsdp_config", "fsdp_reshard_after_forward" })
  else
    r.set("fsdp", "full_shard", { "fsdp_config" }, false, "accelerate's default sharding strategy")
  end
  if fc.fsdp_offload_params ~= nil then
    r.set("offload_params", truthy(fc.fsdp_offload_params) and "cpu" or "none", { "fsdp_config", "fsdp_offload_params" })
  end
  if truthy(fc.fsdp_activation_checkpointing) then
    r.set("checkpointing", "full", { "fsdp_config", "fsdp_activation_checkpointing" })
  end
  local known = { fsdp_sharding_strategy = not v2 or nil, fsdp_reshard_after_forward = 1, fsdp_offload_params = 1,
    fsdp_activation_checkpointing = 1, fsdp_version = 1, fsdp_auto_wrap_policy = 1, fsdp_transformer_layer_cls_to_wrap = 1,
    fsdp_state_dict_type = 1, fsdp_sync_module_states = 1, fsdp_cpu_ram_efficient_loading = 1, fsdp_use_orig_params = 1,
    fsdp_min_num_params = 1 }
  for k, v in pairs(fc) do
    if not known[k] and not common.fsdp_prefetch_key(r, { "fsdp_config", k }, k:gsub("^fsdp_", ""), v, fc.fsdp_version) then
      r.skip({ "fsdp_config", k })
    end
  end
end

local function read_megatron(r, m)
  local map = { megatron_lm_tp_degree = "tp", megatron_lm_pp_degree = "pp", megatron_lm_num_micro_batches = "num_microbatches",
    megatron_lm_sequence_parallelism = "sequence_parallel", megatron_lm_use_distributed_optimizer = "distributed_optimizer" }
  for k, v in pairs(m) do
    if map[k] then r.set(map[k], v, { "megatron_lm_config", k })
    elseif k == "megatron_lm_recompute_activations" then
      if truthy(v) then r.set("checkpointing", "selective", { "megatron_lm_config", k }) end
    elseif k ~= "megatron_lm_gradient_clipping" then
      r.skip({ "megatron_lm_config", k })
    end
  end
end

function accelerate.read(r, c)
  local kind = c.distributed_type and tostring(c.distributed_type):upper()
  if kind and distributed[kind] then r.set("framework", distributed[kind], { "distributed_type" })
  elseif kind then r.skip({ "distributed_type=" .. kind }) end
  -- config_args.py (BaseConfig.from_yaml_file): without mixed_precision, a
  -- legacy `fp16: true` means fp16, else "no" (the launcher's default)
  local mp = c.mixed_precision and tostring(c.mixed_precision):lower() or (truthy(c.fp16) and "fp16") or "no"
  if mp == "false" then mp = "no" end -- YAML 1.1 reads an unquoted no as false
  if mp == "bf16" then r.set("bf16", true, { "mixed_precision" })
  elseif mp == "fp16" then r.set("fp16", true, { "mixed_precision" })
  elseif mp == "fp8" then
    local backend = type(c.fp8_config) == "table" and c.fp8_config.backend or nil
    if backend == nil then
      -- accelerator.py (fp8_backend NO): the first installed of torchao,
      -- Transformer Engine and MS-AMP; vramplan assumes Transformer Engine
      r.set("precision", "fp8", { "mixed_precision" }, false,
        "no fp8_config.backend: Transformer Engine assumed (accelerate takes torchao first when installed)")
    elseif common.show(backend):upper() == "TE" then
      r.set("precision", "fp8", { "mixed_precision" }, false, "Transformer Engine's")
    else
      r.skip({ "mixed_precision=fp8 (" .. common.show(backend) .. ")" })
    end
  end
  if c.num_processes ~= nil then
    r.set("gpus", c.num_processes, { "num_processes" })
    local machines, processes = tonumber(c.num_machines) or 1, tonumber(c.num_processes)
    if processes and machines > 1 and processes % machines == 0 then
      r.set("gpus_per_node", math.tointeger(processes // machines), { "num_machines" })
    end
  end
  if type(c.deepspeed_config) == "table" and kind == "DEEPSPEED" then read_deepspeed(r, c.deepspeed_config) end
  if type(c.fsdp_config) == "table" and kind == "FSDP" then read_fsdp(r, c.fsdp_config) end
  if type(c.megatron_lm_config) == "table" and kind == "MEGATRON_LM" then read_megatron(r, c.megatron_lm_config) end
  if kind == "DEEPSPEED" and c.deepspeed_config == nil then read_deepspeed(r, {}) end
  if mp == "no" then
    -- no autocast and no 16-bit copy: fp32 throughout (FSDP without a
    -- MixedPrecision policy; DeepSpeedPlugin.set_mixed_precision fills a
    -- DeepSpeed file's "auto" fp16 / bf16 with false, its explicit values stay)
    local given = c.mixed_precision ~= nil
    r.set("precision", "fp32", given and { "mixed_precision" } or nil, false,
      given and "mixed_precision no" or "accelerate's default mixed_precision no")
  end
  for k in pairs(c) do
    if not no_memory[k] then r.skip({ k }) end
  end
  return r
end

return accelerate
