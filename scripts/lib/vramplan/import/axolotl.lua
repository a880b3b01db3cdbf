-- vramplan.import.axolotl — an axolotl training YAML as recipe keys.
-- Meanings and defaults: axolotl's config schema
-- (src/axolotl/utils/schemas/config.py, AxolotlInputConfig, and
-- schemas/peft.py, schemas/training.py; axolotl 0.8-0.12) and its model
-- loader (src/axolotl/loaders/model.py: the model loaded in bfloat16 /
-- float16 when bf16 / fp16 is set; for 4-bit QLoRA a BitsAndBytesConfig
-- with nf4, double quantization and the training dtype as compute dtype).
local common = require("vramplan.import.common")

local axolotl = {}

-- Keys with no memory of their own in a training step (data, logging,
-- saving, schedules, hub) or read below.
local no_memory = {}
for k in ([[base_model base_model_config model_type tokenizer_type tokenizer_config trust_remote_code strict datasets
  test_datasets dataset_prepared_path val_set_size output_dir lora_model_dir wandb_project wandb_entity wandb_watch
  wandb_name wandb_log_model wandb_mode wandb_run_id num_epochs max_steps lr_scheduler learning_rate warmup_steps
  warmup_ratio logging_steps evals_per_epoch eval_steps saves_per_epoch save_steps save_total_limit special_tokens
  resume_from_checkpoint hub_model_id hub_strategy seed chat_template eval_sample_packing pad_to_sequence_len
  train_on_inputs group_by_length local_rank early_stopping_patience debug tf32 xformers_attention
  dataset_processes shuffle_merged_datasets eval_table_size eval_max_new_tokens max_grad_norm adam_beta1 adam_beta2
  adam_epsilon loss_watchdog_threshold loss_watchdog_patience save_safetensors auto_resume_from_checkpoints
  tokens dataloader_num_workers dataloader_pin_memory dataloader_prefetch_factor lr_scheduler_kwargs cosine_min_lr_ratio
  model_config_type is_llama_derived_model is_mistral_derived_model is_qwen_derived_model plugins
  bf16 fp16 load_in_4bit load_in_8bit adapter lora_r lora_alpha lora_dropout lora_target_modules lora_target_linear
  lora_modules_to_save sequence_len micro_batch_size gradient_accumulation_steps gradient_checkpointing
  gradient_checkpointing_kwargs flash_attention sdp_attention eager_attention optimizer weight_decay deepspeed fsdp
  fsdp_config fsdp_version peft_use_dora torch_dtype liger_rms_norm liger_rope liger_glu_activation
  liger_fused_linear_cross_entropy liger_cross_entropy
  cut_cross_entropy attn_implementation activation_offloading dp_shard_size lora_target_parameters
  model_quantization_config model_quantization_config_kwargs]]):gmatch("%S+") do
  no_memory[k] = true
end

local function truthy(v) return v == true or (type(v) == "string" and v:lower() == "true") end

local function read_precision(r, c)
  -- bf16: auto means bf16 where the GPU has it (Ampere and later)
  if c.bf16 ~= nil then
    local v = c.bf16 == "auto" or truthy(c.bf16)
    r.set("bf16", v, { "bf16" }, false, c.bf16 == "auto" and "auto: bf16 on GPUs that have it" or nil)
  end
  if c.fp16 ~= nil then r.set("fp16", truthy(c.fp16), { "fp16" }) end
end

local function read_adapter(r, c)
  local adapter = c.adapter
  local four, eight = truthy(c.load_in_4bit), truthy(c.load_in_8bit)
  if adapter == "lora" or adapter == "qlora" then
    -- LoRA over 8-bit or 4-bit weights is vramplan's qlora with that format
    local quantized = adapter == "qlora" or four or eight
    r.set("finetune", quantized and "qlora" or "lora", { "adapter" })
    if quantized then
      r.set("quant", eight and "int8" or "nf4", { eight and "load_in_8bit" or (four and "load_in_4bit" or "adapter") })
      if not eight then r.set("double_quant", true, { "adapter" }, false, "axolotl's BitsAndBytesConfig") end
    end
  elseif adapter ~= nil then
    r.skip({ "adapter=" .. common.show(adapter) })
  end
  if c.lora_r ~= nil then r.set("lora_rank", c.lora_r, { "lora_r" }) end
  if c.lora_alpha ~= nil then r.set("lora_alpha", c.lora_alpha, { "lora_alpha" }) end
  if c.lora_dropout ~= nil then r.set("lora_dropout", c.lora_dropout, { "lora_dropout" }) end
  if truthy(c.lora_target_linear) then
    r.set("lora_targets", "all-linear", { "lora_target_linear" })
  elseif c.lora_target_modules ~= nil then
    -- one string is a regular expression to PEFT (tuners_utils.py,
    -- check_target_module_exists: re.fullmatch against each module's full
    -- name), which vramplan does not match
    local t = c.lora_target_modules
    if type(t) == "string" and t:find("[%[%]%(%)|*+?\\]") then
      error(string.format("%s: lora_target_modules: %s is a regular expression (PEFT matches a string against full "
        .. "module names), which vramplan does not read: list the module names (q_proj, v_proj, ...)",
        r.where({ "lora_target_modules" }), t), 0)
    end
    r.set("lora_targets", common.list(t), { "lora_target_modules" })
  end
  -- lora_target_parameters: PEFT's target_parameters, as listed
  if c.lora_target_parameters ~= nil then
    r.set("lora_target_parameters", common.list(c.lora_target_parameters), { "lora_target_parameters" })
  end
  if c.lora_modules_to_save ~= nil then
    r.set("modules_to_save", common.list(c.lora_modules_to_save), { "lora_modules_to_save" })
  end
  if c.peft_use_dora ~= nil then r.set("use_dora", truthy(c.peft_use_dora), { "peft_use_dora" }) end
end

-- axolotl's fsdp: a list of FSDP options ("full_shard", "auto_wrap",
-- "offload") with fsdp_config beside it. fsdp_version 2 (axolotl hands
-- accelerate an FSDP2 plugin: fully_shard on each decoder layer and the
-- root) is vramplan's fsdp2 over transformers' model code, as
-- vramplan.import.accelerate reads it, its options and keys saying
-- reshard_after_forward instead of a strategy. QLoRA's 4-bit base under
-- fsdp2 is axolotl's fsdp2_qlora patch (Params4bit sharded on dim 0 of its
-- bf16 storage, its quant_state whole on every rank); the engine refuses an
-- 8-bit base there, naming quant.
local function read_fsdp(r, c)
  local options = type(c.fsdp) == "table" and c.fsdp or (c.fsdp and { c.fsdp }) or {}
  local fc = type(c.fsdp_config) == "table" and c.fsdp_config or {}
  local version = tostring(fc.fsdp_version or c.fsdp_version)
  local v2 = version == "2"
  local reshard = fc.reshard_after_forward
  if reshard == nil then reshard = fc.fsdp_reshard_after_forward end
  if v2 then
    local at = fc.fsdp_version ~= nil and { "fsdp_config", "fsdp_version" } or { "fsdp_version" }
    r.set("framework", "fsdp2", at)
    r.set("model_code", "transformers", at, false, "axolotl runs transformers' models")
  end
  for _, o in ipairs(options) do
    local s = common.show(o):lower()
    if v2 and (s == "full_shard" or s == "shard_grad_op") then
      if reshard == nil then reshard = s == "full_shard" end
    elseif not v2 and (s == "full_shard" or s == "shard_grad_op" or s == "hybrid_shard" or s == "no_shard") then
      r.set("fsdp", s, { "fsdp" })
    elseif s == "offload" then
      r.set("offload_params", "cpu", { "fsdp" })
    elseif s ~= "auto_wrap" then
      r.skip({ "fsdp=" .. s })
    end
  end
  local strategy = not v2 and (fc.fsdp_sharding_strategy or fc.sharding_strategy) or nil
  if v2 then
    if reshard ~= nil then r.set("reshard_after_forward", truthy(reshard), { "fsdp_config" }) end
  elseif strategy ~= nil then
    r.set("fsdp", strategy, { "fsdp_config" })
  elseif reshard ~= nil then
    -- FSDP2's key under FSDP1: resharding after forward is FULL_SHARD,
    -- keeping the gathered parameters until backward is SHARD_GRAD_OP
    r.set("fsdp", truthy(reshard) and "full_shard" or "shard_grad_op", { "fsdp_config" })
  end
  local offload = fc.fsdp_offload_params
  if offload == nil then offload = fc.offload_params end
  if offload ~= nil then r.set("offload_params", truthy(offload) and "cpu" or "none", { "fsdp_config" }) end
  local ac = fc.fsdp_activation_checkpointing
  if ac == nil then ac = fc.activation_checkpointing end
  if truthy(ac) then r.set("checkpointing", "full", { "fsdp_config" }) end
  if not v2 and (#options > 0 or next(fc)) and r.keys.fsdp == nil then
    r.set("fsdp", "full_shard", { "fsdp" }, false, "FSDP's default strategy")
  end
  local known = { fsdp_sharding_strategy = not v2 or nil, sharding_strategy = not v2 or nil, reshard_after_forward = 1,
    fsdp_reshard_after_forward = 1, fsdp_offload_params = 1, offload_params = 1, fsdp_activation_checkpointing = 1,
    activation_checkpointing = 1, fsdp_version = 1, fsdp_state_dict_type = 1, state_dict_type = 1,
    fsdp_sync_module_states = 1, sync_module_states = 1, fsdp_cpu_ram_efficient_loading = 1,
    cpu_ram_efficient_loading = 1, fsdp_auto_wrap_policy = 1, auto_wrap_policy = 1,
    fsdp_transformer_layer_cls_to_wrap = 1, transformer_layer_cls_to_wrap = 1, fsdp_use_orig_params = 1,
    use_orig_params = 1 }
  for k, v in pairs(fc) do
    if not known[k] and not common.fsdp_prefetch_key(r, { "fsdp_config", k }, k:gsub("^fsdp_", ""), v, version) then
      r.skip({ "fsdp_config", k })
    end
  end
end

-- axolotl's Liger plugin (src/axolotl/integrations/liger/args.py:
-- liger_rms_norm and liger_rope swap in Liger's fused RMSNorm and rotary
-- kernels, liger_fused_linear_cross_entropy its fused linear cross-entropy)
-- and its Cut Cross Entropy plugin (integrations/cut_cross_entropy:
-- cut_cross_entropy); liger_glu_activation is its SwiGLU,
-- liger_cross_entropy its cross-entropy inside transformers' loss. Liger's
-- LayerNorm stays listed as not modelled.
-- The plugin's own arguments default its kernel on: CutCrossEntropyArgs'
-- cut_cross_entropy is True unless the file says otherwise
-- (integrations/cut_cross_entropy/args.py), so naming the plugin is enough.
local cce_plugin = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"

local function has_plugin(c, name)
  for _, p in ipairs(type(c.plugins) == "table" and c.plugins or {}) do
    if p == name then return true end
  end
  return false
end

local function read_kernels(r, c)
  for _, k in ipairs({ "liger_rms_norm", "liger_rope", "liger_glu_activation" }) do
    if truthy(c[k]) then r.set("kernels", "fused", { k }, false, "Liger's kernels") end
  end
  -- the memory of its RMSNorm and SwiGLU (its rotary embedding's is transformers')
  if truthy(c.liger_rms_norm) then r.set("liger_rms_norm", true, { "liger_rms_norm" }) end
  if truthy(c.liger_glu_activation) then r.set("liger_swiglu", true, { "liger_glu_activation" }) end
  if truthy(c.liger_fused_linear_cross_entropy) then
    r.set("loss", "fused-linear", { "liger_fused_linear_cross_entropy" })
  elseif truthy(c.liger_cross_entropy) then
    r.set("loss", "liger-ce", { "liger_cross_entropy" })
  elseif truthy(c.cut_cross_entropy) then
    r.set("loss", "cut", { "cut_cross_entropy" })
  elseif c.cut_cross_entropy == nil and has_plugin(c, cce_plugin) then
    r.set("loss", "cut", { "plugins" }, false, "the Cut Cross Entropy plugin (cut_cross_entropy defaults to true)")
  end
end

-- activation_offloading: true (or "legacy", the same without streams) runs
-- the step under TRL's OffloadActivations; what else it does depends on
-- axolotl's release, which the file does not say: the importer leaves a
-- marker (axolotl_activation_offloading) that vramplan.stacks reads with
-- axolotl_version (0.18 unless given; 0.12 for the GPT-OSS examples'
-- published runs). "hidden_states" is listed as not modelled.
local function read_offloading(r, c)
  local ao = c.activation_offloading
  if ao == nil or ao == false then return end
  if ao ~= true and ao ~= "true" and ao ~= "legacy" then
    r.skip({ "activation_offloading=" .. common.show(ao) })
    return
  end
  r.set("offload_activations", true, { "activation_offloading" })
  r.set("offload_torchtune", true, { "activation_offloading" }, false, "TRL's OffloadActivations, torchtune's design")
  -- (core/trainers/mixins/activation_checkpointing.py: use_streams = mode != "legacy")
  if ao == "legacy" then r.set("offload_streams", false, { "activation_offloading" }, false, "legacy: no streams") end
  r.set("axolotl_activation_offloading", tostring(ao), { "activation_offloading" })
end

-- attn_implementation, axolotl's attention key since its boolean flags
-- (flash_attention, sdp_attention, ...) were deprecated: transformers'
-- names, or a Hub kernel's path passed through to transformers
-- (src/axolotl/utils/schemas/config.py, attn_implementation and
-- normalize_attn_implementation; axolotl at 067b021c). FlashAttention 2
-- and 3 and the Hub's flash-attn kernels keep the same per-token
-- statistics; flex_attention, xformers, sage and fp8 are not modelled.
local attn_impls = { flash_attention_2 = "flash", flash_attention_3 = "flash", sdpa = "sdpa", eager = "eager" }

local function read_attention(r, c)
  local impl = c.attn_implementation
  if impl == nil then
    if truthy(c.flash_attention) then r.set("attention", "flash", { "flash_attention" })
    elseif truthy(c.sdp_attention) then r.set("attention", "sdpa", { "sdp_attention" })
    elseif truthy(c.eager_attention) then r.set("attention", "eager", { "eager_attention" }) end
    return
  end
  local s = common.show(impl)
  local name = attn_impls[s] or (s:find("/", 1, true) and s:lower():find("flash%-attn") and "flash")
  if name then r.set("attention", name, { "attn_implementation" })
  else r.skip({ "attn_implementation=" .. s }) end
end

-- Whether axolotl loads the model with a device map: outside FSDP and
-- DeepSpeed ZeRO-3 it passes device_map "auto" or the local GPU
-- (utils/config/__init__.py, loaders/model.py _set_device_map_config);
-- under them it loads on the CPU. `keys`: recipe keys (the importer's or
-- export's).
function axolotl.loads_with_device_map(keys)
  return not (keys.framework == "fsdp" or keys.framework == "fsdp2" or keys.fsdp ~= nil
    or (keys.framework == "deepspeed" and tonumber(keys.zero) == 3))
end

-- model_quantization_config: Mxfp4Config with dequantize: true (axolotl's
-- GPT-OSS examples; loaders/model.py builds transformers' Mxfp4Config from
-- model_quantization_config_kwargs): the MXFP4 checkpoint dequantized to
-- bf16 while loading (checkpoint_quant = mxfp4). Loaded with a device map
-- (loads_with_device_map): load = device-map, where the dequantization's
-- temporaries meet the weights already loaded.
local function read_quantization(r, c)
  local q = c.model_quantization_config
  if q == nil then return end
  local kwargs = type(c.model_quantization_config_kwargs) == "table" and c.model_quantization_config_kwargs or {}
  if q ~= "Mxfp4Config" or not truthy(kwargs.dequantize) then
    r.skip({ "model_quantization_config=" .. common.show(q) })
    return
  end
  r.set("checkpoint_quant", "mxfp4", { "model_quantization_config" })
  if axolotl.loads_with_device_map(r.keys) then
    r.set("load", "device-map", { "model_quantization_config" }, false, "axolotl loads with a device map")
  end
end

-- Fills recipe `r` from an axolotl config table.
function axolotl.read(r, c)
  r.set("stack", "axolotl", nil, false, "an axolotl config")
  common.set_model(r, c.base_model, { "base_model" }, c.trust_remote_code)
  read_precision(r, c)
  read_adapter(r, c)
  -- schemas/config.py: sequence_len 512, micro_batch_size 1, gradient_accumulation_steps 1
  r.set("seq_len", c.sequence_len or 512, c.sequence_len and { "sequence_len" } or nil, false,
    not c.sequence_len and "axolotl's default sequence_len" or nil)
  r.set("micro_batch", c.micro_batch_size or 1, c.micro_batch_size and { "micro_batch_size" } or nil, false,
    not c.micro_batch_size and "axolotl's default micro_batch_size" or nil)
  if c.gradient_accumulation_steps ~= nil then
    r.set("grad_accum", c.gradient_accumulation_steps, { "gradient_accumulation_steps" })
  end
  local gc = c.gradient_checkpointing
  if gc == true or gc == "true" then r.set("checkpointing", "full", { "gradient_checkpointing" })
  elseif gc == false then r.set("checkpointing", "none", { "gradient_checkpointing" })
  elseif gc ~= nil then r.skip({ "gradient_checkpointing=" .. common.show(gc) }) end
  if type(c.gradient_checkpointing_kwargs) == "table" and c.gradient_checkpointing_kwargs.use_reentrant ~= nil then
    r.set("use_reentrant", truthy(c.gradient_checkpointing_kwargs.use_reentrant), { "gradient_checkpointing_kwargs" })
  elseif (gc == true or gc == "true") and c.gradient_checkpointing_kwargs == nil then
    -- core/builders/base.py _configure_gradient_checkpointing: without
    -- kwargs it passes {"use_reentrant": False} (0.12 and 0.18 alike)
    r.set("use_reentrant", false, { "gradient_checkpointing" }, false, "axolotl's default gradient_checkpointing_kwargs")
  end
  read_offloading(r, c)
  read_attention(r, c)
  if c.xformers_attention then r.skip({ "xformers_attention" }) end
  -- schemas/training.py (axolotl 0.8 and later): optimizer adamw_torch_fused
  r.set("optimizer", c.optimizer or "adamw_torch_fused", c.optimizer and { "optimizer" } or nil, false,
    not c.optimizer and "axolotl's default optimizer" or nil)
  if c.weight_decay ~= nil then r.set("weight_decay", c.weight_decay, { "weight_decay" }) end
  if c.torch_dtype ~= nil then r.set("torch_dtype", c.torch_dtype, { "torch_dtype" }) end
  read_fsdp(r, c)
  -- dp_shard_size (axolotl's N-D parallelism, August 2025 on): the ranks
  -- one model's FSDP shards span, the others replicating it
  if c.dp_shard_size ~= nil then r.set("fsdp_shard_size", c.dp_shard_size, { "dp_shard_size" }) end
  read_kernels(r, c)
  if type(c.deepspeed) == "string" then common.merge_deepspeed(r, c.deepspeed, { "deepspeed" }) end
  read_quantization(r, c)
  for k, v in pairs(c) do
    if not no_memory[k] and v ~= false then r.skip({ k }) end
  end
  return r
end

return axolotl
