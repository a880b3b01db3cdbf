-- vramplan.stacks — training stacks (`stack = hf-trainer`, ...): the
-- defaults each tool runs with, and how it turns its precision flags
-- (Hugging Face's `bf16` / `fp16` and the dtype the model is loaded in,
-- `torch_dtype`) into what vramplan's `precision` names.
--
-- `stack`, `bf16`, `fp16`, `torch_dtype` and `pure_bf16` are read here, in
-- Lua, before the recipe reaches the core (which declares every other key
-- in engine/lua/lua_recipe.c): they only choose values for the core's keys.
local stacks = {}

local function truthy(v) return v == true or v == "true" or v == 1 or v == "1" end
local function on(v) return truthy(type(v) == "string" and v:lower() or v) end

-- The Trainer runs transformers' modeling code whatever wraps it: under
-- framework = fsdp2, whose auto means torchtitan's, the stacks say so
-- (accelerate's fsdp2_prepare_model shards transformers' modules); the
-- other frameworks' auto is transformers' already.
local function trainer_model_code(keys)
  return keys.framework == "fsdp2" and "transformers" or nil
end

-- accelerate, under the Trainer's fp16 / bf16, wraps the model's forward in
-- autocast and convert_outputs_to_fp32 (Accelerator.prepare_model: native
-- amp, off under DeepSpeed and Megatron-LM; accelerate/utils/operations.py
-- ConvertOutputsToFp32): `outputs_fp32` wherever the core models it (its
-- rule: engine/policy/recipe.c), given the keys that decide it.
local function accelerate_outputs_fp32(keys)
  if keys.precision == nil then return nil end
  local framework = keys.framework or (keys.zero ~= nil and "deepspeed") or nil
  local ok = pcall(require("vramplan").check_recipe, { precision = keys.precision, framework = framework,
    model_code = keys.model_code, outputs_fp32 = true })
  return ok or nil
end

-- A default that holds only where the recipe offloads activations (TRL's
-- activation_offloading is its own OffloadActivations).
local function when_offloading(keys) return on(keys.offload_activations) or nil end

-- Each stack: its framework (when it fixes one), the defaults it runs
-- with (only where the recipe leaves a key unset) and their source, and the
-- way it applies its precision flags (`precision_rule` below).
stacks.profiles = {
  ["hf-trainer"] = {
    doc = "transformers' Trainer",
    -- transformers/training_args.py (4.46-4.52): per_device_train_batch_size 8,
    -- optim adamw_torch (torch.optim.AdamW, foreach on CUDA), bf16 / fp16
    -- False (autocast only when set), gradient_checkpointing False with
    -- use_reentrant True (modeling_utils.gradient_checkpointing_enable);
    -- Trainer.compute_loss keeps only the loss, not the outputs.
    defaults = { micro_batch = 8, optimizer = "adamw", optimizer_impl = "foreach", checkpointing = "none",
                 keep_logits = false, outputs_fp32 = accelerate_outputs_fp32, model_code = trainer_model_code },
    rule = "hf",
    trainer_checkpointing = true, -- gradient_checkpointing_enable without kwargs: its version's use_reentrant
  },
  trl = {
    doc = "TRL's SFTTrainer (transformers' Trainer underneath)",
    -- trl/trainer/sft_config.py: gradient_checkpointing True, bf16 True
    -- unless fp16 is set, max_length 1024; the rest is TrainingArguments'.
    -- SFTTrainer.__init__ makes use_reentrant False under transformers 4
    -- unless given (TRL 0.28, #4951; 5's default too), and its
    -- activation_offloading is its own OffloadActivations (TRL 1.8's:
    -- offload_trl), entered around training_step
    defaults = { micro_batch = 8, optimizer = "adamw", optimizer_impl = "foreach", checkpointing = "full",
                 seq_len = 1024, keep_logits = false, outputs_fp32 = accelerate_outputs_fp32,
                 model_code = trainer_model_code, use_reentrant = false,
                 offload_torchtune = when_offloading, offload_trl = when_offloading },
    bf16_default = true,
    rule = "hf",
    trainer_checkpointing = true,
  },
  axolotl = {
    doc = "axolotl (transformers' Trainer, the model loaded in the training dtype)",
    -- axolotl loads the model in bfloat16 / float16 when bf16 / fp16 is set
    -- (src/axolotl/loaders/model.py: cfg.torch_dtype), then trains with the
    -- Trainer's autocast over those weights. Under fsdp_version 2 it
    -- replaces accelerate's fsdp2_prepare_model with its own
    -- (monkeypatch/accelerate/fsdp2.py, patch_accelerate_fsdp2, August 2025
    -- to now), which does not upcast the trainable parameters to fp32:
    -- the shards stay in the loaded dtype.
    -- Its CLI sets PYTORCH_CUDA_ALLOC_CONF to
    -- "expandable_segments:True,roundup_power2_divisions:16" under PyTorch
    -- 2.2 and later unless the environment sets it (src/axolotl/utils/
    -- __init__.py set_pytorch_cuda_alloc_conf, called by cli/main.py; at
    -- 050210e6, August 2025, and since December 2024): the simulated
    -- allocator's options (alloc_conf).
    defaults = { optimizer = "adamw", keep_logits = false, outputs_fp32 = accelerate_outputs_fp32,
                 alloc_conf = "expandable_segments:True,roundup_power2_divisions:16", model_code = trainer_model_code },
    weights_follow_flags = true,
    fsdp2_keeps_dtype = true,
    rule = "hf",
  },
  ["llama-factory"] = {
    doc = "LLaMA-Factory (transformers' Trainer)",
    -- src/llamafactory/model/loader.py loads the model in the compute dtype
    -- (bf16 / fp16 when set); model/adapter.py casts trainable parameters to
    -- fp32 unless pure_bf16 (full and freeze tuning: autocast over fp32
    -- weights; LoRA: PEFT's fp32 adapters over the 16-bit base).
    -- Without bf16 / fp16 it still loads the model in a 16-bit compute
    -- dtype: model/patcher.py's patch_config calls extras/misc.py's
    -- infer_optim_dtype, bf16 where the GPU has it and the checkpoint is bf16
    -- or says nothing (fp16 on older GPUs or for an fp32 checkpoint: not
    -- followed here), with no autocast.
    defaults = { optimizer = "adamw", keep_logits = false, outputs_fp32 = accelerate_outputs_fp32,
                 model_code = trainer_model_code },
    weights_follow_flags = true,
    trainable_fp32 = true,
    inferred_weights = "bf16",
    rule = "hf",
  },
  torchtune = {
    doc = "torchtune's recipes",
    -- torchtune/recipes/full_finetune_single_device.py with its configs
    -- (recipes/configs/*): dtype bf16 for the whole model and optimizer (no
    -- autocast), enable_activation_checkpointing True; its LoRA recipes
    -- build the adapters under the same default dtype (set_default_dtype),
    -- so they stay bf16 (lora_dtype base).
    -- Its checkpointing is non-reentrant: training.set_activation_checkpointing
    -- (torchtune/training/memory.py) wraps each layer with torch's
    -- checkpoint_wrapper, CheckpointImpl.NO_REENTRANT by default, and
    -- training/activations.py's selective wrapper passes use_reentrant=False.
    -- The loss: CEWithChunkedOutputLoss in 133 of the 137 loss entries of
    -- the last release's configs (0.6.1, April 2025; the rest the KL
    -- distillation losses); main since moved them to LinearCrossEntropyLoss
    -- (loss = chunked-linear).
    -- With compile: True the recipes compile each decoder layer
    -- (training.compile_model) and the loss (training.compile_loss:
    -- CEWithChunkedOutputLoss.compute_cross_entropy under torch.compile;
    -- torchtune/training/_compile.py). enable_activation_offloading is its
    -- OffloadActivations (offload_torchtune). Its MultiHeadAttention hands
    -- SDPA the query as q.transpose(1, 2), not made contiguous (model_code).
    defaults = { precision = "bf16", checkpointing = "full", use_reentrant = false, keep_logits = false,
                 lora_dtype = "base", loss = "chunked", offload_torchtune = true, model_code = "torchtune",
                 compile_loss = function(keys)
                   return on(keys.compile) and (keys.loss == nil or keys.loss == "chunked") or nil
                 end },
    rule = "fixed",
  },
  torchtitan = {
    doc = "torchtitan (FSDP2)",
    -- torchtitan/config/job_config.py: mixed_precision_param bfloat16 over
    -- fp32 sharded parameters (FSDP2's MixedPrecisionPolicy), AdamW with the
    -- fused implementation. Activation checkpointing: ActivationCheckpoint's
    -- defaults as the TOML configs had them (job_config.py before commit
    -- 9810191b, 2026-02-23): mode selective, selective_ac_option "2" (every
    -- second block, layers-2), early_stop False; each block wrapped by torch's
    -- checkpoint_wrapper, non-reentrant
    -- (torchtitan/distributed/activation_checkpoint.py). Later torchtitan
    -- defaults to per-op selective checkpointing (checkpointing =
    -- op-selective): name the mode to be sure.
    -- The train step deletes the model's output before backward
    -- (torchtitan/trainer.py, _forward_backward_body: `del pred`, then
    -- loss.backward()): the loop keeps no logits.
    framework = "fsdp2",
    -- Its pipeline schedules run step(..., return_outputs=False) (train.py,
    -- e5ef99aa, 2025-10-22: "Update PP to release memory earlier"): the last
    -- stage keeps no outputs (runs before it: pp_return_outputs = true).
    -- Its tensor parallelism always runs the norms sequence-parallel
    -- (apply_tp's plan: SequenceParallel() on attention_norm, ffn_norm and
    -- norm, the embeddings' output Shard(1)), so tp > 1 brings it.
    defaults = { precision = "mixed-bf16", optimizer = "adamw", optimizer_impl = "fused", checkpointing = "layers-2",
                 use_reentrant = false, checkpoint_early_stop = false, keep_logits = false, pp_return_outputs = false,
                 sequence_parallel = function(keys) return (tonumber(keys.tp) or 1) > 1 or nil end },
    rule = "fixed",
  },
  deepspeed = {
    doc = "DeepSpeed's engine",
    -- deepspeed/runtime/engine.py: the module cast to fp16 / bf16 with fp32
    -- master weights in the ZeRO optimizer; FusedAdam.
    framework = "deepspeed",
    defaults = { optimizer_impl = "fused" },
    rule = "mixed",
  },
  megatron = {
    doc = "Megatron-LM",
    -- megatron/training/arguments.py: --bf16 / --fp16 keep fp32 main
    -- parameters in the optimizer (Float16OptimizerWithFloat16Params).
    framework = "megatron",
    defaults = {},
    rule = "mixed",
  },
  plain = {
    doc = "a plain PyTorch loop: nothing assumed beyond vramplan's own defaults",
    defaults = {},
    rule = "plain",
  },
}

-- The keys read here and never passed on: the stack, the precision flags,
-- and the stacks' own activation-checkpointing keys (below).
stacks.keys = { stack = true, bf16 = true, fp16 = true, torch_dtype = true, pure_bf16 = true, tf32 = true,
  ["activation_checkpoint.mode"] = true, ["activation_checkpoint.selective_ac_option"] = true,
  ["activation_checkpoint.early_stop"] = true, enable_activation_checkpointing = true, ac_mode = true,
  ac_option = true, ["float8.enable_float8_linear"] = true, ["model.converters"] = true, ["float8.recipe_name"] = true,
  ["float8.enable_fsdp_float8_all_gather"] = true, ["float8.precompute_float8_dynamic_scale_for_fsdp"] = true,
  ["float8.filter_fqns"] = true, ["training.compile"] = true, ["compile.enable"] = true,
  ["parallelism.data_parallel_replicate_degree"] = true, ["parallelism.data_parallel_shard_degree"] = true,
  ["training.enable_cpu_offload"] = true, use_liger_kernel = true, liger_kernel_config = true,
  transformers_version = true, axolotl_version = true, axolotl_activation_offloading = true }


local function dtype_name(v)
  if v == nil then return nil end
  local s = tostring(v):lower():gsub("^torch%.", "")
  local names = { bfloat16 = "bf16", bf16 = "bf16", float16 = "fp16", fp16 = "fp16", half = "fp16", float32 = "fp32",
                  fp32 = "fp32", float = "fp32", auto = "auto" }
  return names[s]
end

-- The precision a stack runs with its flags: returns the precision and why.
local function precision_rule(profile, framework, flags, finetune, origin, loaded)
  local bf16, fp16 = flags.bf16, flags.fp16
  if bf16 == nil and profile.bf16_default and not fp16 then bf16 = true end
  local weights = flags.weights
  -- from_pretrained's own dtype where the recipe names none (`loaded`)
  local loaded_why = ""
  if weights == nil and loaded and not profile.weights_follow_flags then
    weights, loaded_why = loaded.dtype, " (" .. loaded.why .. ")"
  end
  if profile.rule == "fixed" then return nil end
  if framework == "deepspeed" or framework == "megatron" or profile.rule == "mixed" then
    if bf16 then return "mixed-bf16", "bf16: 16-bit weights, fp32 master weights" end
    if fp16 then return "mixed-fp16", "fp16: 16-bit weights, fp32 master weights" end
    return nil
  end
  if (framework == "fsdp" or framework == "fsdp2" and not profile.fsdp2_keeps_dtype) and (bf16 or fp16) then
    -- accelerate's FullyShardedDataParallelPlugin.set_mixed_precision: FSDP
    -- MixedPrecision(param_dtype=16-bit) over the fp32 sharded parameters
    -- (FSDP2's MixedPrecisionPolicy likewise: fsdp2_prepare_model upcasts the
    -- trainable parameters to fp32)
    return bf16 and "mixed-bf16" or "mixed-fp16", "FSDP mixed precision over fp32 sharded parameters"
  end
  local inferred = false
  if profile.weights_follow_flags and weights == nil then
    weights = bf16 and "bf16" or fp16 and "fp16" or nil
    if weights == nil and not flags.pure_bf16 and profile.inferred_weights then
      weights, inferred = profile.inferred_weights, true
    end
    if profile.trainable_fp32 and (finetune == nil or finetune == "full" or finetune == "freeze")
      and not flags.pure_bf16 then
      weights = "fp32"
    end
  end
  if flags.pure_bf16 then return "bf16", "pure_bf16: weights, gradients and states in bf16" end
  weights = weights or "fp32"
  if bf16 then
    if weights == "bf16" then
      -- accelerate autocasts whatever the weights' dtype: its fp32 list
      -- (layer_norm, softmax) and PEFT's fp32 adapters are cast at each op
      return "bf16-autocast", "bf16=True over bf16 weights" .. loaded_why .. ": autocast over a bf16 model"
    end
    return "amp-bf16", "bf16=True over " .. weights .. " weights" .. loaded_why .. ": autocast"
  end
  if fp16 then
    if weights == "fp16" and (finetune == "lora" or finetune == "qlora") then
      -- PEFT keeps the adapters, the only trainable parameters, in fp32
      return "fp16-autocast", "fp16=True over fp16 weights: autocast, fp32 adapters under GradScaler"
    end
    if weights == "fp16" then
      error(string.format("%s: fp16: the Trainer's fp16 autocast over fp16 weights%s fails (its GradScaler "
        .. "refuses fp16 gradients: \"Attempting to unscale FP16 gradients\"); load the model in fp32", origin,
        loaded_why), 0)
    end
    return "amp-fp16", "fp16=True over " .. weights .. " weights" .. loaded_why .. ": autocast"
  end
  if inferred then
    if weights == "fp32" then
      return "fp32", "no bf16 / fp16: weights loaded in the inferred compute dtype (bf16), trainable ones upcast to fp32"
    end
    return weights, "no bf16 / fp16: weights in the inferred compute dtype (" .. weights .. "), fp32 adapters"
  end
  if weights ~= "fp32" then return weights, "no autocast, weights in " .. weights .. loaded_why end
  -- neither flag: the Trainer runs fp32 weights without autocast (bf16 /
  -- fp16 False by default, training_args.py), not the core's mixed-bf16
  return "fp32", "no bf16 / fp16: fp32 weights, no autocast"
end

-- The stacks' checkpointing keys as recipe keys.
--
-- torchtitan (its TOML section and CLI flags, --activation_checkpoint.mode):
-- `activation_checkpoint.mode` none | full | selective | memory_budget,
-- `activation_checkpoint.selective_ac_option` "op" or an integer K (every
-- K-th block checkpointed, the others not: 0 and 1 mean every block), and
-- `activation_checkpoint.early_stop` (False by default); blocks are wrapped
-- non-reentrant (torchtitan/distributed/activation_checkpoint.py,
-- _apply_layer_sac, _apply_full_ac; job_config.py's ActivationCheckpoint).
--
-- torchtune (recipes/full_finetune_distributed.py, _setup_model):
-- `enable_activation_checkpointing` wraps every layer; `ac_mode` none | full |
-- selective with `ac_option` K applies only when
-- enable_activation_checkpointing is false, and with both set neither applies
-- (torchtune/training/activations.py checkpoint_wrapper: int(ac_option),
-- so "op" fails there).
--
-- Per-op selective checkpointing (which ops' outputs are saved) is not what
-- vramplan's `selective` is (Megatron's attention core): torchtitan's "op" is
-- checkpointing = op-selective; torchtune's wrapper takes whole layers only.
local function layers_k(text, key, tool)
  local k = math.tointeger(tonumber(text))
  if not k or k < 0 or not tostring(text):match("^%s*%d+%s*$") then
    return nil
  end
  if k <= 1 then return "full", tool .. " checkpoints every block when " .. key .. " is " .. k end
  return "layers-" .. k, nil
end

local function show(v) return type(v) == "string" and v or tostring(v) end

local function checkpointing_keys(keys, origins)
  local tt_mode, tt_option = keys["activation_checkpoint.mode"], keys["activation_checkpoint.selective_ac_option"]
  local tt_early = keys["activation_checkpoint.early_stop"]
  local tune_enable, tune_mode, tune_option = keys.enable_activation_checkpointing, keys.ac_mode, keys.ac_option
  local torchtitan = tt_mode ~= nil or tt_option ~= nil or tt_early ~= nil
  local torchtune = tune_enable ~= nil or tune_mode ~= nil or tune_option ~= nil
  if not torchtitan and not torchtune then return end
  local function at(key) return origins[key] or "recipe" end
  if torchtitan and torchtune then
    local a = tt_mode ~= nil and "activation_checkpoint.mode" or tt_option ~= nil and
      "activation_checkpoint.selective_ac_option" or "activation_checkpoint.early_stop"
    local b = tune_enable ~= nil and "enable_activation_checkpointing" or tune_mode ~= nil and "ac_mode" or "ac_option"
    error(string.format("%s: %s is torchtitan's and %s (%s) torchtune's: give one stack's checkpointing keys", at(a), a,
      b, at(b)), 0)
  end
  local value, key, note
  if torchtitan then
    local mode = tt_mode ~= nil and show(tt_mode):lower() or "selective" -- ActivationCheckpoint's default
    key = tt_mode ~= nil and "activation_checkpoint.mode" or "activation_checkpoint.selective_ac_option"
    if mode == "none" then value = "none"
    elseif mode == "full" then value = "full"
    elseif mode == "selective" then
      local option = tt_option ~= nil and show(tt_option) or "2"
      local k
      if option:lower() == "op" then
        -- the per-op policy of torchtitan's _apply_op_sac (its save list
        -- written out in engine/policy/sac_policy.c)
        k = "op-selective"
      else
        k, note = layers_k(option, "selective_ac_option", "torchtitan")
      end
      if not k then
        error(string.format("%s: activation_checkpoint.selective_ac_option: %s is neither op nor a whole number of " ..
          "blocks", at("activation_checkpoint.selective_ac_option"), option), 0)
      end
      value = k
      if tt_option ~= nil then key = "activation_checkpoint.selective_ac_option" end
    elseif mode == "memory_budget" then
      error(string.format("%s: activation_checkpoint.mode = memory_budget: torch.compile's partitioner under an " ..
        "activation_memory_budget below 1 (its knapsack over the banned nodes) is not modelled (use full, selective " ..
        "or none; docs/compile.md)", at(key)), 0)
    else
      error(string.format("%s: activation_checkpoint.mode: %s is not one of none | full | selective | memory_budget",
        at(key), show(tt_mode)), 0)
    end
  else
    local enable = tune_enable ~= nil and truthy(type(tune_enable) == "string" and tune_enable:lower() or tune_enable)
    if enable and tune_mode ~= nil then
      value, key = "none", "ac_mode"
      note = "torchtune applies neither enable_activation_checkpointing nor ac_mode when both are set"
    elseif enable then
      value, key = "full", "enable_activation_checkpointing"
    elseif tune_mode == nil then
      value, key = "none", tune_enable ~= nil and "enable_activation_checkpointing" or "ac_option"
      if tune_enable == nil then note = "ac_option without ac_mode does nothing" end
    else
      local mode = show(tune_mode):lower()
      key = "ac_mode"
      if mode == "none" then value = "none"
      elseif mode == "full" then value = "full"
      elseif mode == "selective" then
        if tune_option == nil then
          error(string.format("%s: ac_mode = selective needs ac_option, the K of every K-th layer", at("ac_mode")), 0)
        end
        if show(tune_option):lower() == "op" then
          error(string.format("%s: ac_option = op: per-op selective checkpointing is not modelled, and torchtune's " ..
            "selective wrapper takes only a whole number of layers (int(ac_option)); use an integer K", at("ac_option")),
            0)
        end
        local k
        k, note = layers_k(show(tune_option), "ac_option", "torchtune")
        if not k then
          error(string.format("%s: ac_option: %s is not a whole number of layers", at("ac_option"), show(tune_option)),
            0)
        end
        value, key = k, "ac_option"
      else
        error(string.format("%s: ac_mode: %s is not one of none | full | selective", at("ac_mode"), show(tune_mode)), 0)
      end
    end
  end
  local origin = at(key) .. (note and (" (" .. note .. ")") or "")
  if keys.checkpointing ~= nil and tostring(keys.checkpointing) ~= value then
    error(string.format("%s: %s gives checkpointing = %s, but checkpointing = %s (%s)", at(key), key, value,
      tostring(keys.checkpointing), origins.checkpointing or "recipe"), 0)
  end
  if keys.checkpointing == nil then keys.checkpointing, origins.checkpointing = value, origin end
  if value ~= "none" then
    -- both stacks wrap with torch's checkpoint_wrapper, non-reentrant
    local tool = torchtitan and "torchtitan" or "torchtune"
    if keys.use_reentrant == nil then
      keys.use_reentrant, origins.use_reentrant = false, at(key) .. " (" .. tool .. "'s checkpoint_wrapper: non-reentrant)"
    end
    if torchtitan and keys.checkpoint_early_stop == nil then
      local early = tt_early ~= nil and truthy(type(tt_early) == "string" and tt_early:lower() or tt_early) or false
      keys.checkpoint_early_stop = early
      origins.checkpoint_early_stop = tt_early ~= nil and at("activation_checkpoint.early_stop") or
        (at(key) .. " (torchtitan's early_stop default: False)")
    end
  end
end

-- torchtitan's Float8 and torch.compile keys as recipe keys.
--
-- Float8 (torchtitan/float8.py and config_manager.py at 9dec370, Dec 2024:
-- `float8.enable_float8_linear`; torchtitan/components/quantization/float8.py
-- from 2025: `model.converters = ["float8"]` with `float8.recipe_name`,
-- `float8.filter_fqns`) swaps nn.Linear modules for torchao's Float8Linear:
-- precision = fp8-torchao, dynamic tensorwise scaling, which is what both
-- build when no recipe_name is given (Float8LinearConfig()); torchtitan's
-- Float8LinearConverter.Config of 2026 defaults to rowwise: give
-- `float8.recipe_name` (the recipe key fp8_recipe) to be sure.
-- `float8.enable_fsdp_float8_all_gather` is the recipe key fp8_all_gather;
-- `float8.precompute_float8_dynamic_scale_for_fsdp` only moves the weights'
-- amax to one all-reduce after the optimizer step (a few scalars), read and
-- left. Filters beyond the output head are not modelled: refused by name.
-- `training.compile` (to mid-2025) and `compile.enable` (later) are the
-- recipe key `compile`.
local function list_of(v)
  if type(v) == "table" then return v end
  local out = {}
  for item in tostring(v):gmatch("[^,%[%]%s\"']+") do out[#out + 1] = item end
  return out
end

local function set_from(keys, origins, key, value, from, what)
  local at = origins[from] or "recipe"
  if keys[key] ~= nil and tostring(keys[key]) ~= tostring(value) then
    error(string.format("%s: %s gives %s = %s, but %s = %s (%s)", at, from, key, tostring(value), key,
      tostring(keys[key]), origins[key] or "recipe"), 0)
  end
  if keys[key] == nil then keys[key], origins[key] = value, at .. " (" .. what .. ")" end
end

local function torchtitan_float8_keys(keys, origins)
  local function at(key) return origins[key] or "recipe" end
  local function flag(key)
    local v = keys[key]
    return v ~= nil and truthy(type(v) == "string" and v:lower() or v)
  end
  local float8, from = false, nil
  if flag("float8.enable_float8_linear") then float8, from = true, "float8.enable_float8_linear" end
  if keys["model.converters"] ~= nil then
    for _, name in ipairs(list_of(keys["model.converters"])) do
      local n = tostring(name):lower()
      if n == "float8" then
        float8, from = true, "model.converters"
      elseif n == "mx" or n == "mxfp8" or n == "nvfp4" then
        error(string.format("%s: model.converters: %s (microscaling formats) is not modelled; float8 is " ..
          "(precision = fp8-torchao)", at("model.converters"), name), 0)
      else
        error(string.format("%s: model.converters: %s is not a converter vramplan knows (float8)",
          at("model.converters"), tostring(name)), 0)
      end
    end
  end
  local recipe = keys["float8.recipe_name"]
  if recipe ~= nil then
    set_from(keys, origins, "fp8_recipe", tostring(recipe):lower(), "float8.recipe_name", "torchao's recipe")
  end
  if keys["float8.filter_fqns"] ~= nil then
    for _, fqn in ipairs(list_of(keys["float8.filter_fqns"])) do
      if fqn ~= "output" and fqn ~= "lm_head" then
        error(string.format("%s: float8.filter_fqns: %s: vramplan keeps only the output head out of float8 " ..
          "(and any linear whose dims are not multiples of 16)", at("float8.filter_fqns"), fqn), 0)
      end
    end
  end
  if float8 then set_from(keys, origins, "precision", "fp8-torchao", from, "torchtitan's float8 converter") end
  if keys["float8.enable_fsdp_float8_all_gather"] ~= nil then
    set_from(keys, origins, "fp8_all_gather", flag("float8.enable_fsdp_float8_all_gather"),
      "float8.enable_fsdp_float8_all_gather", "torchtitan's float8 all-gather")
  end
  for _, key in ipairs({ "training.compile", "compile.enable" }) do
    if keys[key] ~= nil then set_from(keys, origins, "compile", flag(key), key, "torchtitan's torch.compile") end
  end
end

-- torchtitan's data-parallel keys as recipe keys (torchtitan/config/job_config.py,
-- Parallelism and Training): `parallelism.data_parallel_replicate_degree` R
-- (1: none) and `parallelism.data_parallel_shard_degree` S (-1: the ranks
-- left over) make FSDP2's (replicate, shard) mesh: dp = R x S ranks with
-- fsdp_shard_size = S (HSDP when both exceed 1; R alone over the whole
-- world is DDP through FSDP2, fsdp_shard_size 1). S = -1 needs dp to say
-- the world. `training.enable_cpu_offload` is fully_shard's
-- CPUOffloadPolicy: offload_params = cpu.
local function whole(v, at, key)
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or (n < 1 and n ~= -1) then
    error(string.format("%s: %s: %s is not a whole number of ranks (or -1)", at, key, tostring(v)), 0)
  end
  return math.floor(n)
end

local function torchtitan_parallel_keys(keys, origins)
  local function at(key) return origins[key] or "recipe" end
  local rk, sk = "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree"
  local r = keys[rk] ~= nil and whole(keys[rk], at(rk), rk) or 1
  local s = keys[sk] ~= nil and whole(keys[sk], at(sk), sk) or -1
  if r == -1 then error(string.format("%s: %s: only data_parallel_shard_degree may be -1", at(rk), rk), 0) end
  if s == -1 and (keys[rk] ~= nil or keys[sk] ~= nil) and r > 1 then
    local dp = tonumber(keys.dp)
    if not dp then
      error(string.format("%s: %s: with data_parallel_shard_degree -1 (the ranks left over) give dp, the " ..
        "data-parallel ranks", at(rk), rk), 0)
    end
    if dp % r ~= 0 then
      error(string.format("%s: %s: %d replicas do not divide dp = %d", at(rk), rk, r, dp), 0)
    end
    s = dp // r
  end
  if s ~= -1 then
    local from = keys[sk] ~= nil and sk or rk
    set_from(keys, origins, "dp", r * s, from, "torchtitan's replicate x shard degrees")
    if r > 1 then set_from(keys, origins, "fsdp_shard_size", s, from, "torchtitan's HSDP shard degree") end
  end
  local ok = "training.enable_cpu_offload"
  if keys[ok] ~= nil then
    local v = keys[ok]
    local on = truthy(type(v) == "string" and v:lower() or v)
    set_from(keys, origins, "offload_params", on and "cpu" or "none", ok, "torchtitan's CPUOffloadPolicy")
  end
end

-- Applies `stack` and the precision flags to `keys` (recipe keys, in
-- place, only where unset). Returns what was assumed: { stack = name?,
-- precision = why? } or nil.
-- transformers' TrainingArguments.use_liger_kernel: the Trainer applies
-- Liger's kernels for the model type with their defaults
-- (trainer.py, _apply_liger_kernel_to_instance; liger_kernel's
-- apply_liger_kernel_to_llama: rope, rms_norm, swiglu and
-- fused_linear_cross_entropy on): its RMSNorm and SwiGLU (their memory:
-- liger_rms_norm, liger_swiglu), fused element-wise kernels for the step
-- time (its rotary embedding's memory is transformers') and its fused
-- linear cross-entropy.
-- TrainingArguments.liger_kernel_config: apply_liger_kernel_to_*'s keyword
-- arguments (a table, or the JSON text the Trainer's command line takes),
-- each kernel's switch over its default; the ones with memory of their own
-- here: rms_norm, swiglu (geglu for Gemma), cross_entropy and
-- fused_linear_cross_entropy.
local function liger_config(keys, origins)
  local c = keys.liger_kernel_config
  local at = origins.liger_kernel_config or "recipe"
  if type(c) == "string" then
    local decoded, _, err = require("dkjson").decode(c)
    if type(decoded) ~= "table" then
      error(string.format("%s: liger_kernel_config: not a JSON object (%s)", at, err or c), 0)
    end
    c = decoded
  end
  if c ~= nil and type(c) ~= "table" then error(at .. ": liger_kernel_config: a table of kernel switches", 0) end
  return c or {}
end

local function liger_keys(keys, origins)
  local v = keys.use_liger_kernel
  local config = liger_config(keys, origins)
  if v == nil or not truthy(v) then return end
  set_from(keys, origins, "kernels", "fused", "use_liger_kernel", "Liger's kernels")
  -- a kernel's switch and the key that set it
  local function on(name, default)
    if config[name] == nil then return default, "use_liger_kernel" end
    return truthy(config[name]), "liger_kernel_config"
  end
  -- each patch has its own switch in apply_liger_kernel_to_*: a recipe may
  -- turn one off itself; what each patches follows the model type (the
  -- ops' liger fields)
  for _, k in ipairs({ { "liger_rms_norm", "rms_norm", "Liger's RMSNorm" },
                       { "liger_swiglu", config.geglu ~= nil and "geglu" or "swiglu", "Liger's SwiGLU" } }) do
    local value, from = on(k[2], true)
    if keys[k[1]] == nil then keys[k[1]], origins[k[1]] = value, (origins[from] or "recipe") .. " (" .. k[3] .. ")" end
  end
  -- the Trainer patches the model it was given (trainer.py:
  -- _apply_liger_kernel_to_instance), not transformers' classes
  if keys.liger_before_load == nil then
    keys.liger_before_load = false
    origins.liger_before_load = (origins.use_liger_kernel or "recipe") .. " (the Trainer patches the built model)"
  end
  -- the loss: fused linear cross-entropy by default, its cross-entropy
  -- inside transformers' loss with cross_entropy, neither when both are off
  local flce, flce_from = on("fused_linear_cross_entropy", true)
  if flce then
    set_from(keys, origins, "loss", "fused-linear", flce_from, "Liger's fused linear cross-entropy")
  elseif on("cross_entropy", false) then
    set_from(keys, origins, "loss", "liger-ce", "liger_kernel_config", "Liger's cross-entropy")
  end
end

-- transformers' major version where its defaults differ (`transformers_version`:
-- 4 or 5, or a release such as 4.57.1), and its minor version where the
-- recipe names one; nil when the recipe names none.
local function transformers_major(keys, origins)
  local v = keys.transformers_version
  if v == nil then return nil end
  local major = tonumber(show(v):match("^%s*(%d+)[%.%dx]*%s*$"))
  if major ~= 4 and major ~= 5 then
    error(string.format("%s: transformers_version: %s is not 4 or 5 (or a release of them, as 4.57.1)",
      origins.transformers_version or "recipe", show(v)), 0)
  end
  return major, tonumber(show(v):match("^%s*%d+%.(%d+)"))
end

-- A named 4.x release: its minor version for the core (sdpa_enable_gqa's
-- auto from 4.54, the sdpa path's query from 4.56); nil for 4 alone.
local function transformers4_defaults(minor)
  if not minor then return nil end
  return { transformers_major = 4, transformers_minor = minor }
end

-- What transformers 5 changed in the defaults a recipe inherits, where the
-- stack leaves them: under the Trainer (which passes no
-- gradient_checkpointing_kwargs) gradient_checkpointing_enable's
-- use_reentrant False (huggingface/transformers#43203; 4.x passed True);
-- and transformers_major 5, under which the core takes experts_implementation
-- auto as 5.x's default, grouped_mm, where it models the model's block.
local function transformers5_defaults()
  return { use_reentrant = false, transformers_major = 5 }
end

-- The dtype from_pretrained loads the weights in when the recipe names none
-- (transformers 5: the checkpoint's own, dtype "auto" by default since 5.0,
-- huggingface/transformers#42805; 4.x: fp32) or names "auto": { dtype, why }
-- or nil (fp32).
local function loaded_weights(major, auto, config)
  if not (auto or major == 5) then return nil end
  local how = auto and "torch_dtype auto" or "transformers 5 loads the checkpoint's dtype"
  local dtype = config and config.checkpoint_dtype
  if dtype and dtype ~= "unknown" then
    return { dtype = dtype, why = how .. ", " .. dtype }
  end
  return { dtype = "bf16", why = how .. "; the model records no checkpoint_dtype: bf16 assumed, set torch_dtype" }
end

-- axolotl's activation_offloading (the importer's marker,
-- axolotl_activation_offloading = "true" | "legacy", or stack = axolotl
-- with offload_activations) by release, `axolotl_version` (0.18 unless
-- given). What it sets wins over what the config file implies (its
-- gradient_checkpointing), not over a key set elsewhere (--set).
--  0.12 (August 2025, TRL 0.21: torchtune's design): every decoder layer
--   wrapped in torch's checkpoint_wrapper, non-reentrant
--   (loaders/model.py _apply_activation_checkpointing); "legacy" was
--   another mechanism (an offloading checkpoint function patched into
--   transformers), not modelled.
--  0.13-0.17 run TRL 0.25-1.5, whose storage keys stay for the whole
--   forward (an address reused is taken for the storage): not modelled.
--  0.18 (July 2026, TRL 1.8): adapters offload without recomputing
--   (gradient_checkpointing off, no wrap), full fine-tuning keeps the
--   wrap; TRL 1.8's hooks (offload_trl) under axolotl's patch that clones
--   views first (offload_clone_views); "legacy" without streams.
-- axolotl's minor release (`axolotl_version`, 0.18 unless given: 18).
local function axolotl_release(keys, origins)
  local version = keys.axolotl_version ~= nil and show(keys.axolotl_version) or "0.18"
  local minor = tonumber(version:match("^%s*0%.(%d+)[%.%d]*%s*$"))
  if not minor then
    error(string.format("%s: axolotl_version: %s is not a release of axolotl (0.12, 0.18.1, ...)",
      origins.axolotl_version or "recipe", version), 0)
  end
  return minor, version
end

local function axolotl_offloading(keys, origins, name)
  local mode, at = keys.axolotl_activation_offloading, origins.axolotl_activation_offloading
  if mode == nil and name == "axolotl" and on(keys.offload_activations) then
    mode, at = "true", origins.offload_activations or "recipe"
    if keys.offload_torchtune == nil then
      keys.offload_torchtune, origins.offload_torchtune = true, at .. " (axolotl runs TRL's OffloadActivations)"
    end
  end
  if mode == nil then return end
  local minor, version = axolotl_release(keys, origins)
  local file = tostring(at):match("^(.-):%d+") or tostring(at)
  local function put(k, v, why)
    local o = origins[k]
    if keys[k] == nil or (o and o:sub(1, #file) == file) then
      keys[k], origins[k] = v, at .. " (axolotl " .. version .. ": " .. why .. ")"
    end
  end
  if minor <= 12 then
    if mode == "legacy" then
      error(string.format("%s: activation_offloading: legacy under axolotl %s is its own offloading checkpoint "
        .. "(hf_grad_checkpoint_offload_wrapper), not modelled", at, version), 0)
    end
    put("checkpointing", "full", "checkpoint_wrapper on every decoder layer")
    put("use_reentrant", false, "checkpoint_wrapper on every decoder layer")
  elseif minor < 18 then
    error(string.format("%s: activation_offloading under axolotl %s (TRL 0.25 to 1.5, whose storage keys stay for "
      .. "the whole forward) is not modelled: axolotl_version 0.12 and 0.18 are", at, version), 0)
  else
    local adapter = keys.finetune == "lora" or keys.finetune == "qlora"
    if adapter then
      put("checkpointing", "none", "an adapter's activations offloaded, not recomputed")
    else
      put("checkpointing", "full", "checkpoint_wrapper on every decoder layer")
      put("use_reentrant", false, "checkpoint_wrapper on every decoder layer")
    end
    put("offload_trl", true, "TRL 1.8's OffloadActivations")
    put("offload_clone_views", true, "its patch clones views on the compute stream first")
  end
end

function stacks.apply(keys, origins, config)
  -- none of the stacks' keys: nothing to apply (each step below reads only
  -- those, and ends by removing them)
  local any = false
  for k in pairs(keys) do
    if stacks.keys[k] then any = true; break end
  end
  if not any then
    for k in pairs(origins) do if stacks.keys[k] then origins[k] = nil end end
    return nil
  end
  checkpointing_keys(keys, origins)
  axolotl_offloading(keys, origins, keys.stack)
  torchtitan_float8_keys(keys, origins)
  torchtitan_parallel_keys(keys, origins)
  liger_keys(keys, origins)
  local name = keys.stack
  local flags = {}
  local flag_origin
  for _, k in ipairs({ "bf16", "fp16", "pure_bf16" }) do
    if keys[k] ~= nil and not (type(keys[k]) == "string" and keys[k]:lower() == "auto") then
      flags[k] = truthy(keys[k])
      flag_origin = flag_origin or origins[k]
    end
  end
  if keys.torch_dtype ~= nil then
    local d = dtype_name(keys.torch_dtype)
    if not d then
      error(string.format("%s: torch_dtype: %s is not a dtype (bfloat16, float16, float32, auto)",
        origins.torch_dtype or "recipe", tostring(keys.torch_dtype)), 0)
    end
    if d ~= "auto" then flags.weights = d else flags.auto_dtype = true end
    flag_origin = flag_origin or origins.torch_dtype
  end
  local major, minor = transformers_major(keys, origins)
  local version_origin = origins.transformers_version
  local axolotl = axolotl_release(keys, origins)
  local stack_origin = origins.stack
  for k in pairs(stacks.keys) do keys[k], origins[k] = nil, nil end
  if name == nil and next(flags) == nil then
    if major == 4 and minor then
      return { defaults = transformers4_defaults(minor), origin = version_origin .. " (transformers " .. minor .. ")" }
    end
    if major ~= 5 then return nil end
    return { defaults = transformers5_defaults(), origin = version_origin .. " (transformers 5's default)" }
  end
  local profile = stacks.profiles[name or "hf-trainer"]
  if not profile then
    local names = {}
    for n in pairs(stacks.profiles) do names[#names + 1] = n end
    table.sort(names)
    error(string.format("%s: stack: %s is not one of %s", stack_origin or "recipe", tostring(name),
      table.concat(names, " | ")), 0)
  end
  -- the Trainer's stacks are transformers 5 unless the recipe says 4
  if major == nil and profile.rule == "hf" then major = 5 end
  local source = name and string.format("stack %s", name) or "bf16 / fp16 as transformers and accelerate apply them"
  if profile.framework and keys.framework == nil and keys.zero == nil and (keys.fsdp == nil or keys.fsdp == "none") then
    keys.framework, origins.framework = profile.framework, stack_origin .. " (" .. source .. ")"
  end
  -- transformers' Trainer compiles the whole model (TrainingArguments.torch_compile:
  -- torch.compile(model) in _wrap_model), not each block as torchtitan and
  -- torchtune do, which is what compile = true models
  if profile.rule == "hf" and on(keys.compile) then
    error(string.format("%s: compile: the Trainer's torch.compile of the whole model (torch_compile) is not modelled; " ..
      "compile = true is torchtitan's and torchtune's compile of each block (docs/compile.md)",
      origins.compile or "recipe"), 0)
  end
  local assumed = { stack = name }
  if keys.precision == nil then
    local framework = keys.framework or (keys.zero ~= nil and "deepspeed") or
      ((keys.fsdp ~= nil and keys.fsdp ~= "none") and "fsdp") or nil
    local loaded = profile.rule == "hf" and loaded_weights(major, flags.auto_dtype, config) or nil
    local precision, why = precision_rule(profile, framework, flags, keys.finetune, flag_origin or stack_origin,
      loaded)
    if precision then
      keys.precision, origins.precision = precision, (flag_origin or stack_origin) .. " (" .. source .. ": " .. why .. ")"
      assumed.precision = why
    end
  end
  if name then assumed.defaults, assumed.origin = profile.defaults, stack_origin .. " (" .. source .. "'s default)" end
  -- a Trainer stack named (hf-trainer, trl) is 5's unless the recipe says 4;
  -- the other stacks pass their own checkpointing kwargs. axolotl runs
  -- transformers 5 from 0.14 (its "transformers v5 upgrade", #3272, January
  -- 2026; 0.18 pins 5.14.1): its version, not its checkpointing kwargs
  local trainer = name and profile.trainer_checkpointing
  if major == 5 and name == "axolotl" and not version_origin and axolotl < 14 then major = 4 end
  local versioned
  if major == 5 and (trainer or version_origin) then
    versioned = transformers5_defaults()
  elseif major == 5 and name == "axolotl" then
    versioned = { transformers_major = 5 }
  elseif major == 4 then
    versioned = transformers4_defaults(minor)
  end
  if versioned and profile.rule ~= "fixed" then
    for k, v in pairs(assumed.defaults or {}) do versioned[k] = v end
    assumed.defaults = versioned
    assumed.origin = assumed.origin or (version_origin .. " (transformers " .. major .. "'s default)")
  end
  return assumed
end

-- The stack's defaults, where the recipe (and what it implies) left keys unset.
-- A default may be a function of the keys (nil: no default): those run
-- after the plain values, which they may read, in the keys' order.
function stacks.defaults(keys, origins, assumed)
  local functions = {}
  for k, v in pairs(assumed.defaults or {}) do
    if type(v) == "function" then
      functions[#functions + 1] = k
    elseif keys[k] == nil then
      keys[k], origins[k] = v, assumed.origin
    end
  end
  table.sort(functions)
  for _, k in ipairs(functions) do
    local v = assumed.defaults[k](keys)
    if keys[k] == nil and v ~= nil then keys[k], origins[k] = v, assumed.origin end
  end
end

return stacks
