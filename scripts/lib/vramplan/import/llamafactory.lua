-- vramplan.import.llamafactory — a LLaMA-Factory training YAML as recipe keys.
-- Meanings and defaults: LLaMA-Factory's argument classes
-- (src/llamafactory/hparams/finetuning_args.py: finetuning_type "lora",
-- lora_rank 8, lora_alpha None (twice the rank), lora_dropout 0,
-- lora_target "all", freeze_trainable_layers 2; model_args.py:
-- quantization_bit None with bitsandbytes nf4 and double quantization,
-- flash_attn "auto", disable_gradient_checkpointing False (checkpointing
-- on, src/llamafactory/model/model_utils/checkpointing.py);
-- data_args.py: cutoff_len 2048), and transformers' TrainingArguments for
-- the rest (per_device_train_batch_size 8, gradient_accumulation_steps 1).
local common = require("vramplan.import.common")

local llamafactory = {}

local no_memory = {}
for k in ([[model_name_or_path trust_remote_code enable_liger_kernel stage do_train do_eval do_predict dataset eval_dataset dataset_dir
  template max_samples overwrite_cache preprocessing_num_workers dataloader_num_workers output_dir logging_steps
  save_steps plot_loss overwrite_output_dir save_only_model report_to learning_rate num_train_epochs max_steps
  lr_scheduler_type warmup_ratio warmup_steps ddp_timeout resume_from_checkpoint val_size per_device_eval_batch_size
  eval_strategy eval_steps seed adapter_name_or_path export_dir export_size export_device export_legacy_format
  run_name logging_dir save_strategy save_total_limit max_grad_norm adam_beta1 adam_beta2 adam_epsilon
  tokenized_path streaming buffer_size mix_strategy packing neat_packing tf32 include_num_input_tokens_seen
  finetuning_type lora_rank lora_alpha lora_dropout lora_target quantization_bit quantization_method
  quantization_type double_quantization per_device_train_batch_size gradient_accumulation_steps cutoff_len
  bf16 fp16 pure_bf16 deepspeed flash_attn disable_gradient_checkpointing use_reentrant_gc optim weight_decay
  freeze_trainable_layers use_dora additional_target]]):gmatch("%S+") do
  no_memory[k] = true
end

local function truthy(v) return v == true or (type(v) == "string" and v:lower() == "true") end

-- flash_attn: auto (transformers' choice: SDPA), fa2, sdpa, disabled (eager)
local attention = { auto = "sdpa", fa2 = "flash", fa3 = "flash", sdpa = "sdpa", disabled = "eager" }

function llamafactory.read(r, c)
  r.set("stack", "llama-factory", nil, false, "a LLaMA-Factory config")
  common.set_model(r, c.model_name_or_path, { "model_name_or_path" }, c.trust_remote_code)
  local kind = c.finetuning_type or "lora"
  local kp = c.finetuning_type and { "finetuning_type" } or nil
  if kind == "lora" then
    local bits = tonumber(c.quantization_bit)
    if c.quantization_bit ~= nil and not bits then
      error(string.format("%s: quantization_bit: must be a number of bits, 4 or 8 (got %s)",
        r.where({ "quantization_bit" }), common.show(c.quantization_bit)), 0)
    end
    if bits then
      r.set("finetune", "qlora", { "quantization_bit" })
      if bits == 4 then
        local qtype = c.quantization_type or "nf4"
        r.set("quant", qtype, { "quantization_bit" })
        r.set("double_quant", c.double_quantization == nil or truthy(c.double_quantization),
          c.double_quantization ~= nil and { "double_quantization" } or { "quantization_bit" })
      elseif bits == 8 then
        r.set("quant", "int8", { "quantization_bit" })
      else
        r.skip({ "quantization_bit=" .. bits })
      end
      if c.quantization_method and c.quantization_method ~= "bnb" and c.quantization_method ~= "bitsandbytes" then
        r.skip({ "quantization_method=" .. common.show(c.quantization_method) })
      end
    else
      r.set("finetune", "lora", kp, false, not kp and "LLaMA-Factory's default finetuning_type" or nil)
    end
    local rank = c.lora_rank or 8
    r.set("lora_rank", rank, c.lora_rank and { "lora_rank" } or kp)
    r.set("lora_alpha", c.lora_alpha or (tonumber(rank) and 2 * tonumber(rank)), c.lora_alpha and { "lora_alpha" } or kp, false,
      not c.lora_alpha and "LLaMA-Factory's default: twice lora_rank" or nil)
    r.set("lora_dropout", c.lora_dropout or 0, c.lora_dropout and { "lora_dropout" } or kp)
    local target = c.lora_target or "all"
    r.set("lora_targets", target == "all" and "all-linear" or common.list(target), c.lora_target and { "lora_target" } or kp)
    if c.use_dora ~= nil then r.set("use_dora", truthy(c.use_dora), { "use_dora" }) end
    if c.additional_target ~= nil then r.set("modules_to_save", common.list(c.additional_target), { "additional_target" }) end
  elseif kind == "full" then
    r.set("finetune", "full", kp)
  elseif kind == "freeze" then
    r.set("finetune", "freeze", kp)
    r.set("trainable_layers", c.freeze_trainable_layers or 2, { "freeze_trainable_layers" })
  else
    r.skip({ "finetuning_type=" .. common.show(kind) })
  end
  -- TrainingArguments.do_train is False by default; LLaMA-Factory's
  -- workflows train only with it (train/sft/workflow.py: `if
  -- training_args.do_train`): a predict or eval run is not a training step
  if c.do_train == false or (c.do_train == nil and (truthy(c.do_predict) or truthy(c.do_eval))) then
    r.skip({ "do_train=false (a prediction or evaluation run; vramplan estimates a training step)" })
  end
  if c.stage and c.stage ~= "sft" and c.stage ~= "pt" then
    r.skip({ "stage=" .. common.show(c.stage) .. " (a reference or reward model beside the trained one)" })
  end
  r.set("micro_batch", c.per_device_train_batch_size or 8, c.per_device_train_batch_size and
    { "per_device_train_batch_size" } or nil, false, not c.per_device_train_batch_size and "TrainingArguments' default" or nil)
  if c.gradient_accumulation_steps then
    r.set("grad_accum", c.gradient_accumulation_steps, { "gradient_accumulation_steps" })
  end
  r.set("seq_len", c.cutoff_len or 2048, c.cutoff_len and { "cutoff_len" } or nil, false,
    not c.cutoff_len and "LLaMA-Factory's default cutoff_len" or nil)
  for _, flag in ipairs({ "bf16", "fp16", "pure_bf16" }) do
    if c[flag] ~= nil then r.set(flag, truthy(c[flag]), { flag }) end
  end
  local gc_off = truthy(c.disable_gradient_checkpointing)
  r.set("checkpointing", gc_off and "none" or "full", c.disable_gradient_checkpointing ~= nil and
    { "disable_gradient_checkpointing" } or nil, false, c.disable_gradient_checkpointing == nil and
    "LLaMA-Factory checkpoints by default" or nil)
  if c.use_reentrant_gc ~= nil then r.set("use_reentrant", truthy(c.use_reentrant_gc), { "use_reentrant_gc" }) end
  local fa = c.flash_attn or "auto"
  if attention[fa] then r.set("attention", attention[fa], c.flash_attn and { "flash_attn" } or nil)
  else r.skip({ "flash_attn=" .. common.show(fa) }) end
  if c.optim ~= nil then r.set("optimizer", c.optim, { "optim" }) end -- adamw_torch_fused: vramplan.aliases
  if c.weight_decay ~= nil then r.set("weight_decay", c.weight_decay, { "weight_decay" }) end
  -- enable_liger_kernel (model/model_utils/liger_kernel.py, apply_liger_kernel):
  -- Liger's kernels for the model type with their defaults (its RMSNorm,
  -- rotary embedding and SwiGLU; for stages pt and sft, which need no
  -- logits, its fused linear cross-entropy)
  if truthy(c.enable_liger_kernel) then
    r.set("kernels", "fused", { "enable_liger_kernel" }, false, "Liger's kernels")
    r.set("liger_rms_norm", true, { "enable_liger_kernel" }, false, "Liger's RMSNorm")
    r.set("liger_swiglu", true, { "enable_liger_kernel" }, false, "Liger's SwiGLU")
    if c.stage == nil or c.stage == "sft" or c.stage == "pt" then
      r.set("loss", "fused-linear", { "enable_liger_kernel" }, false, "Liger's fused linear cross-entropy (stage sft or pt)")
    end
  end
  if type(c.deepspeed) == "string" then common.merge_deepspeed(r, c.deepspeed, { "deepspeed" }) end
  for k in pairs(c) do
    if not no_memory[k] then r.skip({ k }) end
  end
  return r
end

return llamafactory
