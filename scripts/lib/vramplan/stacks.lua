-- vramplan.stacks — training stacks (`stack = hf-trainer`, ...): the
-- defaults each tool runs with, and how it turns its precision flags
-- (Hugging Face's `bf16` / `fp16` and the dtype the model is loaded in,
-- `torch_dtype`) into what vramplan's `precision` names.
--
-- `stack`, `bf16`, `fp16`, `torch_dtype` and `pure_bf16` are read here, in
-- Lua, before the recipe reaches the core (which declares every other key
-- in engine/lua/lua_recipe.c): they only choose values for the core's keys.
local stacks = {}

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
                 keep_logits = false },
    rule = "hf",
  },
  trl = {
    doc = "TRL's SFTTrainer (transformers' Trainer underneath)",
    -- trl/trainer/sft_config.py: gradient_checkpointing True, bf16 True
    -- unless fp16 is set, max_length 1024; the rest is TrainingArguments'.
    defaults = { micro_batch = 8, optimizer = "adamw", optimizer_impl = "foreach", checkpointing = "full",
                 seq_len = 1024, keep_logits = false },
    bf16_default = true,
    rule = "hf",
  },
  axolotl = {
    doc = "axolotl (transformers' Trainer, the model loaded in the training dtype)",
    -- axolotl loads the model in bfloat16 / float16 when bf16 / fp16 is set
    -- (src/axolotl/loaders/model.py: cfg.torch_dtype), then trains with the
    -- Trainer's autocast over those weights.
    defaults = { optimizer = "adamw", keep_logits = false },
    weights_follow_flags = true,
    rule = "hf",
  },
  ["llama-factory"] = {
    doc = "LLaMA-Factory (transformers' Trainer)",
    -- src/llamafactory/model/loader.py loads the model in the compute dtype
    -- (bf16 / fp16 when set); model/adapter.py casts trainable parameters to
    -- fp32 unless pure_bf16 (full and freeze tuning: autocast over fp32
    -- weights; LoRA: PEFT's fp32 adapters over the 16-bit base).
    defaults = { optimizer = "adamw", keep_logits = false },
    weights_follow_flags = true,
    trainable_fp32 = true,
    rule = "hf",
  },
  torchtune = {
    doc = "torchtune's recipes",
    -- torchtune/recipes/full_finetune_single_device.py with its configs
    -- (recipes/configs/*): dtype bf16 for the whole model and optimizer (no
    -- autocast), enable_activation_checkpointing True; its LoRA recipes
    -- build the adapters under the same default dtype (set_default_dtype),
    -- so they stay bf16 (lora_dtype base).
    defaults = { precision = "bf16", checkpointing = "full", keep_logits = false, lora_dtype = "base" },
    rule = "fixed",
  },
  torchtitan = {
    doc = "torchtitan (FSDP2)",
    -- torchtitan/config/job_config.py: mixed_precision_param bfloat16 over
    -- fp32 sharded parameters (FSDP2's MixedPrecisionPolicy), AdamW with the
    -- fused implementation.
    framework = "fsdp",
    defaults = { precision = "mixed-bf16", optimizer = "adamw", optimizer_impl = "fused" },
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

-- The keys read here and never passed on.
stacks.keys = { stack = true, bf16 = true, fp16 = true, torch_dtype = true, pure_bf16 = true, tf32 = true }

local function truthy(v) return v == true or v == "true" or v == 1 or v == "1" end

local function dtype_name(v)
  if v == nil then return nil end
  local s = tostring(v):lower():gsub("^torch%.", "")
  local names = { bfloat16 = "bf16", bf16 = "bf16", float16 = "fp16", fp16 = "fp16", half = "fp16", float32 = "fp32",
                  fp32 = "fp32", float = "fp32", auto = "auto" }
  return names[s]
end

-- The precision a stack runs with its flags: returns the precision and why.
local function precision_rule(profile, framework, flags, finetune, origin)
  local bf16, fp16 = flags.bf16, flags.fp16
  if bf16 == nil and profile.bf16_default and not fp16 then bf16 = true end
  local weights = flags.weights
  if profile.rule == "fixed" then return nil end
  if framework == "deepspeed" or framework == "megatron" or profile.rule == "mixed" then
    if bf16 then return "mixed-bf16", "bf16: 16-bit weights, fp32 master weights" end
    if fp16 then return "mixed-fp16", "fp16: 16-bit weights, fp32 master weights" end
    return nil
  end
  if framework == "fsdp" and (bf16 or fp16) then
    -- accelerate's FullyShardedDataParallelPlugin.set_mixed_precision: FSDP
    -- MixedPrecision(param_dtype=16-bit) over the fp32 sharded parameters
    return bf16 and "mixed-bf16" or "mixed-fp16", "FSDP mixed precision over fp32 sharded parameters"
  end
  if profile.weights_follow_flags and weights == nil then
    weights = bf16 and "bf16" or fp16 and "fp16" or nil
    if profile.trainable_fp32 and (finetune == nil or finetune == "full" or finetune == "freeze")
      and not flags.pure_bf16 then
      weights = "fp32"
    end
  end
  if flags.pure_bf16 then return "bf16", "pure_bf16: weights, gradients and states in bf16" end
  weights = weights or "fp32"
  if bf16 then
    if weights == "bf16" then return "bf16", "bf16=True over bf16 weights: autocast changes nothing" end
    return "amp-bf16", "bf16=True over " .. weights .. " weights: autocast"
  end
  if fp16 then
    if weights == "fp16" and (finetune == "lora" or finetune == "qlora") then
      -- PEFT keeps the adapters, the only trainable parameters, in fp32
      return "fp16", "fp16=True over fp16 weights, fp32 adapters"
    end
    if weights == "fp16" then
      error(string.format("%s: fp16: the Trainer's fp16 autocast over fp16 weights fails (its GradScaler "
        .. "refuses fp16 gradients: \"Attempting to unscale FP16 gradients\"); load the model in fp32", origin), 0)
    end
    return "amp-fp16", "fp16=True over " .. weights .. " weights: autocast"
  end
  if weights ~= "fp32" then return weights, "no autocast, weights in " .. weights end
  return nil
end

-- Applies `stack` and the precision flags to `keys` (recipe keys, in
-- place, only where unset). Returns what was assumed: { stack = name?,
-- precision = why? } or nil.
function stacks.apply(keys, origins)
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
    if d ~= "auto" then flags.weights = d end
    flag_origin = flag_origin or origins.torch_dtype
  end
  local stack_origin = origins.stack
  for k in pairs(stacks.keys) do keys[k], origins[k] = nil, nil end
  if name == nil and next(flags) == nil then return nil end
  local profile = stacks.profiles[name or "hf-trainer"]
  if not profile then
    local names = {}
    for n in pairs(stacks.profiles) do names[#names + 1] = n end
    table.sort(names)
    error(string.format("%s: stack: %s is not one of %s", stack_origin or "recipe", tostring(name),
      table.concat(names, " | ")), 0)
  end
  local source = name and string.format("stack %s", name) or "bf16 / fp16 as transformers and accelerate apply them"
  if profile.framework and keys.framework == nil and keys.zero == nil and (keys.fsdp == nil or keys.fsdp == "none") then
    keys.framework, origins.framework = profile.framework, stack_origin .. " (" .. source .. ")"
  end
  local assumed = { stack = name }
  if keys.precision == nil then
    local framework = keys.framework or (keys.zero ~= nil and "deepspeed") or
      ((keys.fsdp ~= nil and keys.fsdp ~= "none") and "fsdp") or nil
    local precision, why = precision_rule(profile, framework, flags, keys.finetune, flag_origin or stack_origin)
    if precision then
      keys.precision, origins.precision = precision, (flag_origin or stack_origin) .. " (" .. source .. ": " .. why .. ")"
      assumed.precision = why
    end
  end
  if name then assumed.defaults, assumed.origin = profile.defaults, stack_origin .. " (" .. source .. "'s default)" end
  return assumed
end

-- The stack's defaults, where the recipe (and what it implies) left keys unset.
function stacks.defaults(keys, origins, assumed)
  for k, v in pairs(assumed.defaults or {}) do
    if keys[k] == nil then keys[k], origins[k] = v, assumed.origin end
  end
end

return stacks
