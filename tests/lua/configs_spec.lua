-- Other tools' configuration files as recipes (docs/configs.md): each
-- import is checked against the same recipe written as --set keys (the
-- estimate's recipe echo and its peak), on the configurations the tools
-- publish (tests/fixtures/configs/, SOURCES.md) and on malformed files.
local helper = require("tests.lua.helper")
local json = require("dkjson")

local FIXTURES = helper.root .. "/tests/fixtures/configs/"

-- The recipe echo and peak of an estimate, failing unless it succeeds.
local function estimate(...)
  local r = helper.estimate(...)
  return r.recipe, r.per_gpu.peak_allocated_bytes
end

-- Fails unless every key of `want` has that value in the recipe echo.
local function assert_keys(recipe, want)
  for k, v in pairs(want) do
    assert(recipe[k] == v, string.format("%s: %s, want %s", k, tostring(recipe[k]), tostring(v)))
  end
end

-- --set arguments for a table of keys.
local function sets(keys)
  local args = {}
  for k, v in pairs(keys) do
    args[#args + 1] = "--set"
    args[#args + 1] = k .. "=" .. tostring(v)
  end
  return table.unpack(args)
end

-- Fails unless the config gives the same recipe keys and peak as `keys` set by hand.
local function assert_same_as_sets(model, config, extra, keys)
  local recipe, peak = estimate(model, "--recipe", config, table.unpack(extra))
  assert_keys(recipe, keys)
  local args = { model, sets(keys) }
  for _, a in ipairs(extra) do args[#args + 1] = a end
  local _, want = estimate(table.unpack(args))
  assert.are.equal(want, peak)
  return recipe
end

describe("DeepSpeed configs as recipes", function()
  -- The example issue 19 quotes from a widely read guide on training
  -- memory: 1024 sequences a step on 8 GPUs with 8 accumulation steps is
  -- 16 sequences per GPU and micro-batch.
  local EXAMPLE = [[{"train_batch_size": 1024, "gradient_accumulation_steps": 8, "optimizer": {"type": "AdamW", "params": {"lr": 6e-5}}, "fp16": {"enabled": true, "loss_scale_window": 1000}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}]]

  it("loads the guide's example and evaluates it on 8 GPUs at micro-batch 16", function()
    local path = helper.write(EXAMPLE, ".json")
    assert_same_as_sets("llama3.2-1b", path, { "--set", "gpus=8", "--set", "seq_len=512" }, {
      framework = "deepspeed", zero = 2, dp = 8, micro_batch = 16, grad_accum = 8, global_batch = 1024,
      precision = "mixed-fp16", optimizer = "adamw", offload_optimizer = "cpu",
    })
  end)

  it("takes the GPU count from dp too, and any two batch sizes imply the third", function()
    local path = helper.write('{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}', ".json")
    local recipe = estimate("gpt2", "--recipe", path, "--set", "dp=4", "--set", "seq_len=128")
    assert_keys(recipe, { micro_batch = 4, grad_accum = 2, global_batch = 32, dp = 4, framework = "deepspeed", zero = 0 })
    path = helper.write('{"train_batch_size": 64}', ".json")
    recipe = estimate("gpt2", "--recipe", path, "--set", "gpus=8", "--set", "seq_len=128")
    assert_keys(recipe, { micro_batch = 8, grad_accum = 1, global_batch = 64, dp = 8 })
    path = helper.write('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}', ".json")
    recipe = estimate("gpt2", "--recipe", path, "--set", "gpus=2", "--set", "seq_len=128")
    assert_keys(recipe, { micro_batch = 4, grad_accum = 8, global_batch = 64, dp = 2 })
  end)

  it("refuses batch sizes that do not divide", function()
    local path = helper.write('{"train_batch_size": 100, "gradient_accumulation_steps": 8}', ".json")
    local err = helper.fails("gpt2", "--recipe", path, "--set", "gpus=8")
    assert.truthy(err:find(path .. ":1", 1, true), err)
    assert.truthy(err:find("global_batch 100 is not grad_accum 8 x dp 8", 1, true), err)
  end)

  it("reads accelerate's ZeRO-2 offload template, auto values from the run and the model", function()
    local recipe = assert_same_as_sets("llama3.2-1b", FIXTURES .. "accelerate/examples/deepspeed_config_templates/zero_stage2_offload_config.json",
      { "--set", "gpus=2", "--set", "seq_len=256", "--set", "micro_batch=2" }, {
        framework = "deepspeed", zero = 2, precision = "mixed-fp16", optimizer = "adamw", optimizer_impl = "foreach",
        offload_optimizer = "cpu", overlap_comm = true,
        reduce_bucket_size = 2048 * 2048, -- "auto": hidden_size^2 (transformers' trainer_config_finalize)
      })
    assert.are.equal(1, recipe.grad_accum)
  end)

  it("reads LLaMA-Factory's ZeRO-3 config, resolving its auto buckets from the model's width", function()
    local recipe = estimate("llama3.2-1b", "--recipe", FIXTURES .. "llamafactory/examples/deepspeed/ds_z3_config.json", "--set", "gpus=4",
      "--set", "seq_len=256")
    assert_keys(recipe, { zero = 3, overlap_comm = true, reduce_bucket_size = 2048 * 2048,
      stage3_prefetch_bucket_size = math.floor(0.9 * 2048 * 2048), stage3_param_persistence_threshold = 20480,
      stage3_max_live_parameters = 1e9 })
  end)

  it("lists every key it does not model in one warning", function()
    local path = helper.write('{"zero_optimization": {"stage": 1, "round_robin_gradients": true,\n' ..
      '"offload_optimizer": {"device": "cpu", "buffer_count": 8}}, "amp": {"enabled": true}, "gradient_clipping": 1.0}', ".json")
    local _, err, code = helper.run("estimate", "gpt2", "--recipe", path, "--set", "seq_len=128")
    assert.are.equal(0, code)
    assert.truthy(err:find("amp, zero_optimization.offload_optimizer.buffer_count, zero_optimization.round_robin_gradients",
      1, true), err)
    assert.falsy(err:find("gradient_clipping", 1, true), err)
  end)

  it("reads fp16's loss-scale keys in a bf16 section as DeepSpeed does: not at all", function()
    -- DeepSpeed's tests/torch_compile/ds_config_z2.json
    local path = helper.write('{"bf16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 8, "hysteresis": 2}, '
      .. '"zero_optimization": {"stage": 2}}', ".json")
    local _, err, code = helper.run("estimate", "gpt2", "--recipe", path, "--set", "seq_len=128")
    assert.are.equal(0, code, err)
    assert.are.equal("", err)
  end)

  it("lists a parameter offload below stage 3, which DeepSpeed ignores, rather than refusing the config", function()
    -- DeepSpeed's tests/hybrid_engine/hybrid_engine_config.json: stage 0 with offload_param cpu
    local path = helper.write('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0, '
      .. '"offload_param": {"device": "cpu"}}, "fp16": {"enabled": true}}', ".json")
    local out, err, code = helper.run("estimate", "gpt2", "--recipe", path, "--set", "seq_len=128", "--json")
    assert.are.equal(0, code, err)
    assert.are.equal("none", json.decode(out).recipe.offload_params)
    assert.truthy(err:find("zero_optimization.offload_param (only ZeRO stage 3 offloads parameters)", 1, true), err)
    path = helper.write('{"zero_optimization": {"stage": 2, "cpu_offload_param": true}}', ".json")
    _, err, code = helper.run("estimate", "gpt2", "--recipe", path, "--set", "seq_len=128")
    assert.are.equal(0, code, err)
    assert.truthy(err:find("zero_optimization.cpu_offload_param (only ZeRO stage 3", 1, true), err)
    -- at stage 3 it is read
    path = helper.write('{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}', ".json")
    assert.are.equal("cpu", estimate("gpt2", "--recipe", path, "--set", "seq_len=128").offload_params)
  end)

  it("blames a malformed file's line and column", function()
    local path = helper.write('{\n  "zero_optimization": {\n    "stage": 2,\n    "overlap_comm": tru\n  }\n}\n', ".json")
    local err = helper.fails("gpt2", "--recipe", path)
    assert.truthy(err:find("^vramplan: " .. path:gsub("%p", "%%%0") .. ":4:21: "), err)
    -- what Python's json (DeepSpeed's reader) refuses, though dkjson would forgive it
    path = helper.write('{\n  "zero_optimization": {\n    "stage": 2\n    "overlap_comm": true\n  }\n}\n', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":4:5: expected ',' or '}'", 1, true))
    path = helper.write('{"zero_optimization": {"stage": 2,}}', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":1:35: a trailing comma", 1, true))
    path = helper.write('{"fp16": {"enabled": true},\n "fp16": {"enabled": false}}', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ':2:2: duplicate key "fp16"', 1, true))
    path = helper.write('{"zero_optimization": {"stage": 2}}\n}\n', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":2:1: unexpected text after the JSON value", 1, true))
    path = helper.write('[1, 2]', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":1:1: a DeepSpeed config is a JSON object", 1, true))
    path = helper.write('{"zero_optimization": {\n  "stage": 7}}', ".json")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":2: zero: must be between 0 and 3", 1, true))
  end)
end)

describe("other tools' names for recipe keys", function()
  it("implies DeepSpeed from a ZeRO stage, FSDP from a sharding strategy, Megatron from tp", function()
    local recipe, peak = estimate("gpt2", "--set", "seq_len=128", "--set", "zero=3")
    assert.are.equal("deepspeed", recipe.framework)
    local _, want = estimate("gpt2", "--set", "seq_len=128", "--set", "zero=3", "--set", "framework=deepspeed")
    assert.are.equal(want, peak)
    recipe = estimate("gpt2", "--set", "seq_len=128", "--set", "fsdp=FULL_SHARD", "--set", "gpus=4")
    assert_keys(recipe, { framework = "fsdp", fsdp = "full_shard", dp = 4 })
    recipe = estimate("gpt2", "--set", "seq_len=128", "--set", "tp=2", "--set", "gpus=4")
    assert_keys(recipe, { framework = "megatron", tp = 2, dp = 2 })
  end)

  it("keeps an explicit framework: zero without deepspeed is still refused", function()
    local err = helper.fails("gpt2", "--set", "zero=3", "--set", "framework=torch")
    assert.truthy(err:find("ZeRO stages need framework", 1, true), err)
  end)

  it("reads Hugging Face's, PEFT's and DeepSpeed's names and PyTorch's spellings", function()
    local theirs = { "gpt2", "--set", "per_device_train_batch_size=2", "--set", "gradient_checkpointing=true",
      "--set", "finetune=lora", "--set", "r=16", "--set", "max_seq_length=256", "--set", "precision=bfloat16",
      "--set", "attn_implementation=flash_attention_2", "--set", "optim=adamw_bnb_8bit" }
    local ours = { "gpt2", "--set", "micro_batch=2", "--set", "checkpointing=full", "--set", "finetune=lora",
      "--set", "lora_rank=16", "--set", "seq_len=256", "--set", "precision=bf16", "--set", "attention=flash",
      "--set", "optimizer=adamw-8bit" }
    local recipe, peak = estimate(table.unpack(theirs))
    assert_keys(recipe, { micro_batch = 2, checkpointing = "full", lora_rank = 16, seq_len = 256, precision = "bf16",
      attention = "flash", optimizer = "adamw-8bit" })
    local _, want = estimate(table.unpack(ours))
    assert.are.equal(want, peak)
    recipe = estimate("gpt2", "--set", "seq_len=128", "--set", "train_batch_size=1024", "--set",
      "gradient_accumulation_steps=8", "--set", "zero_stage=2", "--set", "gpus=8")
    assert_keys(recipe, { framework = "deepspeed", zero = 2, micro_batch = 16, grad_accum = 8, dp = 8 })
    recipe = estimate("gpt2", "--set", "seq_len=128", "--set", "fsdp_sharding_strategy=1", "--set", "num_processes=2")
    assert_keys(recipe, { framework = "fsdp", fsdp = "full_shard", dp = 2, gpus = 2 })
    -- torchtune's config keys
    recipe = estimate("llama3.2-1b", "--set", "seq_len=128", "--set", "stack=torchtune", "--set",
      "optimizer_in_bwd=true", "--set", "num_output_chunks=4")
    assert_keys(recipe, { optimizer_in_backward = true, loss = "chunked", loss_chunks = 4 })
  end)

  it("reads transformers' adamw_torch_fused as AdamW with its fused kernels, from any file or --set", function()
    local recipe = estimate("llama3.2-1b", "--set", "optim=adamw_torch_fused", "--set", "seq_len=128")
    assert_keys(recipe, { optimizer = "adamw", optimizer_impl = "fused" })
    local path = helper.write("base_model: gpt2\nsequence_len: 128\noptimizer: adamw_torch_fused\n", ".yml")
    assert_keys(estimate("--recipe", path), { optimizer = "adamw", optimizer_impl = "fused" })
    assert_keys(estimate("llama3.2-1b", "--set", "optim=adamw_torch", "--set", "seq_len=128"), { optimizer_impl = "foreach" })
    -- axolotl's default optimizer is adamw_torch_fused (src/axolotl/utils/schemas/training.py)
    path = helper.write("base_model: gpt2\nsequence_len: 128\n", ".yml")
    assert_keys(estimate("--recipe", path), { optimizer = "adamw", optimizer_impl = "fused" })
    -- and an axolotl export of vramplan's default AdamW names it
    local out = helper.run("export", "--format", "axolotl", "--set", "seq_len=128", "--model", "gpt2")
    assert.truthy(out:find("optimizer: 'adamw_torch'\n", 1, true), out)
  end)

  it("refuses two names for one key that disagree", function()
    local err = helper.fails("gpt2", "--set", "finetune=lora", "--set", "r=16", "--set", "lora_rank=8")
    assert.truthy(err:find("r (16) disagrees with lora_rank = 8", 1, true), err)
  end)
end)

describe("axolotl and LLaMA-Factory YAML as recipes", function()
  it("reads axolotl's QLoRA example: the model by its Hugging Face id, 4-bit adapters, bf16 weights", function()
    local recipe = assert_same_as_sets("llama3-8b", FIXTURES .. "axolotl/examples/llama-3/qlora.yml", {}, {
      finetune = "qlora", quant = "nf4", double_quant = true, lora_rank = 32, lora_alpha = 16, lora_dropout = 0.05,
      lora_targets = "all-linear", micro_batch = 2, grad_accum = 4, seq_len = 4096, optimizer = "paged-adamw-32bit",
      checkpointing = "full", attention = "flash", precision = "bf16-autocast", weight_decay = 0,
      keep_logits = false, -- the Trainer keeps the loss, not the outputs
    })
    -- and without MODEL: base_model NousResearch/Meta-Llama-3-8B is llama3-8b
    local r = helper.estimate("--recipe", FIXTURES .. "axolotl/examples/llama-3/qlora.yml")
    assert.are.equal("Meta-Llama-3-8B", r.model.name)
    assert.are.same(recipe, r.recipe)
  end)

  it("runs a checkpoint with its own modeling file as the tool loads it: transformers' class unless trust_remote_code", function()
    -- DeepSeek-V2-Lite's config.json has an auto_map; both tools pass
    -- trust_remote_code=False by default, so transformers' own class runs
    local axolotl = helper.write("base_model: deepseek-ai/DeepSeek-V2-Lite\nadapter: lora\nlora_target_linear: true\n" ..
      "sequence_len: 128\nbf16: true\n", ".yml")
    assert.are.equal("DeepSeek-V2-Lite (transformers)", helper.estimate("--recipe", axolotl).model.name)
    local factory = helper.write("model_name_or_path: deepseek-ai/DeepSeek-V2-Lite\nfinetuning_type: lora\n" ..
      "cutoff_len: 128\n", ".yaml")
    assert.are.equal("DeepSeek-V2-Lite (transformers)", helper.estimate("--recipe", factory).model.name)
    -- trusted, the checkpoint's own modeling_deepseek.py runs (fp32 only)
    local trusted = helper.write("base_model: deepseek-ai/DeepSeek-V2-Lite\ntrust_remote_code: true\nadapter: lora\n" ..
      "lora_target_linear: true\nsequence_len: 128\nbf16: false\n", ".yml")
    assert.are.equal("DeepSeek-V2-Lite", helper.estimate("--recipe", trusted).model.name)
    factory = helper.write("model_name_or_path: deepseek-ai/DeepSeek-V2-Lite\ntrust_remote_code: true\n" ..
      "finetuning_type: lora\ncutoff_len: 128\n", ".yaml")
    -- (LLaMA-Factory infers bf16, which that file cannot train in)
    local out = helper.fails("--recipe", factory)
    assert.truthy(out:find("precision: DeepSeek-V2's own modeling code trains only in fp32", 1, true), out)
    -- a model transformers has no other class for is unaffected
    local llama = helper.write("base_model: meta-llama/Meta-Llama-3-8B\ntrust_remote_code: true\nsequence_len: 128\n", ".yml")
    assert.are.equal("Meta-Llama-3-8B", helper.estimate("--recipe", llama).model.name)
  end)

  it("reads axolotl's Liger and Cut Cross Entropy plugins as fused kernels and their losses", function()
    local liger = helper.write("base_model: meta-llama/Meta-Llama-3-8B\nplugins:\n"
      .. "  - axolotl.integrations.liger.LigerPlugin\nliger_rope: true\nliger_rms_norm: true\nliger_glu_activation: true\n"
      .. "liger_fused_linear_cross_entropy: true\nsequence_len: 256\n", ".yml")
    local out, err, code = helper.run("estimate", "--recipe", liger, "--json")
    assert.are.equal(0, code, err)
    local recipe = json.decode(out).recipe
    assert.are.equal("fused", recipe.kernels)
    assert.are.equal("fused-linear", recipe.loss)
    -- the memory of Liger's RMSNorm and SwiGLU (liger_glu_activation), no longer listed as ignored
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
    assert.falsy(err:find("liger_glu_activation", 1, true), err)
    local cce = helper.write("base_model: meta-llama/Meta-Llama-3-8B\ncut_cross_entropy: true\nbf16: true\n"
      .. "sequence_len: 256\n", ".yml")
    recipe = helper.estimate("--recipe", cce).recipe
    assert.are.equal("cut", recipe.loss)
    assert.are_not.equal("fused", recipe.kernels)
  end)

  it("reads transformers' use_liger_kernel as Liger's kernels and its fused linear cross-entropy", function()
    local recipe = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "use_liger_kernel=true").recipe
    assert.are.equal("fused", recipe.kernels)
    assert.are.equal("fused-linear", recipe.loss)
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
    -- one patch turned off (apply_liger_kernel_to_*'s own switches)
    recipe = helper.estimate("mixtral-8x7b", "--set", "seq_len=256", "--set", "use_liger_kernel=true",
      "--set", "liger_swiglu=false").recipe
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(false, recipe.liger_swiglu)
    recipe = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "use_liger_kernel=false").recipe
    assert.are.equal("cross-entropy", recipe.loss)
    local err = helper.fails("llama3.2-1b", "--set", "use_liger_kernel=true", "--set", "loss=chunked")
    assert.truthy(err:find("use_liger_kernel gives loss = fused-linear, but loss = chunked", 1, true), err)
  end)

  it("reads LLaMA-Factory's enable_liger_kernel: Liger's kernels and, for sft, its fused linear cross-entropy", function()
    local factory = helper.write("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\n"
      .. "enable_liger_kernel: true\ncutoff_len: 256\nbf16: true\n", ".yaml")
    local recipe = helper.estimate("--recipe", factory).recipe
    assert.are.equal("fused", recipe.kernels)
    assert.are.equal("fused-linear", recipe.loss)
    assert.are.equal(true, recipe.liger_rms_norm)
    assert.are.equal(true, recipe.liger_swiglu)
  end)

  it("names axolotl's keys it does not model, and lets fit take the model from the file", function()
    local out, err, code = helper.run("fit", "--recipe", FIXTURES .. "axolotl/examples/llama-3/qlora.yml", "--gpu", "a100-80gb")
    assert.are.equal(0, code, err)
    assert.truthy(err:find("axolotl keys vramplan does not model (the estimate ignores them): sample_packing\n", 1, true), err)
    assert.truthy(out:find("Meta-Llama-3-8B on NVIDIA A100 80GB", 1, true), out)
  end)

  it("reads axolotl's attn_implementation (its attention key since the boolean flags were deprecated)", function()
    local path = FIXTURES .. "axolotl/examples/llama-3/lora-1b.yml"
    local out, err, code = helper.run("estimate", "--recipe", path, "--json")
    assert.are.equal(0, code, err)
    assert.are.equal("flash", json.decode(out).recipe.attention) -- attn_implementation: flash_attention_2
    assert.truthy(err:find("(the estimate ignores them): sample_packing\n", 1, true), err)
    -- a Hub kernel of FlashAttention is flash; a kernel vramplan does not model is named
    local hub = helper.write("base_model: NousResearch/Llama-3.2-1B\nsequence_len: 128\n"
      .. "attn_implementation: kernels-community/vllm-flash-attn3\n", ".yml")
    assert.are.equal("flash", helper.estimate("--recipe", hub).recipe.attention)
    local flex = helper.write("base_model: NousResearch/Llama-3.2-1B\nsequence_len: 128\n"
      .. "attn_implementation: flex_attention\n", ".yml")
    _, err, code = helper.run("estimate", "--recipe", flex)
    assert.are.equal(0, code, err)
    assert.truthy(err:find("ignores them): attn_implementation=flex_attention\n", 1, true), err)
  end)

  it("says a lora_target_modules string is PEFT's regular expression, not a module name", function()
    -- axolotl's gemma3/gemma-3-4b-vision-qlora.yml and a dozen other examples
    local path = helper.write("base_model: gpt2\nsequence_len: 128\nadapter: lora\n"
      .. "lora_target_modules: 'model.layers.[\\d]+.(mlp|self_attn).(up|down|gate|q|k|v|o)_proj'\n", ".yml")
    local err = helper.fails("--recipe", path)
    assert.truthy(err:find(path .. ":4: lora_target_modules: model.layers.[\\d]+.(mlp|self_attn)", 1, true), err)
    assert.truthy(err:find("is a regular expression (PEFT matches a string against full module names)", 1, true), err)
    -- one plain name is still a name
    path = helper.write("base_model: gpt2\nsequence_len: 128\nadapter: lora\nlora_target_modules: c_attn\n", ".yml")
    assert.are.equal("c_attn", estimate("--recipe", path).lora_targets)
  end)

  it("reads axolotl's LoRA example over 8-bit weights as LLM.int8", function()
    local r = helper.estimate("--recipe", FIXTURES .. "axolotl/examples/llama-3/lora-8b.yml")
    assert_keys(r.recipe, { finetune = "qlora", quant = "int8", lora_rank = 32, optimizer = "adamw-8bit" })
    assert.truthy(r.recipe.modules_to_save:find("embed_tokens", 1, true) and r.recipe.modules_to_save:find("lm_head", 1, true))
  end)

  it("reads LLaMA-Factory's LoRA example with its own defaults (rank 8, alpha 16, checkpointing on)", function()
    assert_same_as_sets("llama3-8b", FIXTURES .. "llamafactory/examples/train_lora/llama3_lora_sft.yaml", {}, {
      finetune = "lora", lora_rank = 8, lora_alpha = 16, lora_dropout = 0, lora_targets = "all-linear",
      micro_batch = 1, grad_accum = 8, seq_len = 1024, precision = "bf16-autocast", checkpointing = "full",
      keep_logits = false,
    })
  end)

  it("reads a LLaMA-Factory config without bf16 / fp16 in its inferred compute dtype, not vramplan's default", function()
    -- model/patcher.py: infer_optim_dtype gives bf16; model/adapter.py upcasts
    -- the trainable parameters (full tuning's weights, LoRA's adapters) to fp32
    local lora = helper.write("model_name_or_path: meta-llama/Meta-Llama-3-8B\nfinetuning_type: lora\n" ..
      "per_device_train_batch_size: 1\ncutoff_len: 256\n", ".yaml")
    local r = assert_same_as_sets("llama3-8b", lora, {}, {
      finetune = "lora", lora_rank = 8, lora_alpha = 16, lora_dropout = 0, lora_targets = "all-linear", micro_batch = 1,
      seq_len = 256, precision = "bf16", checkpointing = "full", keep_logits = false,
    })
    assert.are.equal("auto", r.lora_dtype) -- PEFT's fp32 adapters
    local full = helper.write("model_name_or_path: meta-llama/Llama-3.2-1B\nfinetuning_type: full\n" ..
      "per_device_train_batch_size: 1\ncutoff_len: 256\n", ".yaml")
    assert_same_as_sets("llama3.2-1b", full, {}, {
      finetune = "full", micro_batch = 1, seq_len = 256, precision = "fp32", checkpointing = "full", keep_logits = false,
    })
    -- and the export writes neither flag (bf16: true would add the Trainer's autocast: bf16-autocast)
    local out = helper.run("export", "--format", "llama-factory", lora)
    assert.is_nil(out:find("\nbf16:", 1, true), out)
    assert.is_nil(out:find("\nfp16:", 1, true), out)
  end)

  it("follows LLaMA-Factory's deepspeed: FILE to the ZeRO-3 config, bf16 filling its auto", function()
    local recipe = estimate("--recipe", FIXTURES .. "llamafactory/examples/train_lora/llama3_lora_sft_ds3.yaml",
      "--set", "gpus=4")
    assert_keys(recipe, { framework = "deepspeed", zero = 3, dp = 4, precision = "mixed-bf16", micro_batch = 1,
      grad_accum = 2, seq_len = 2048, reduce_bucket_size = 4096 * 4096 })
  end)

  it("finds deepspeed: FILE beside the YAML, and refuses one that is missing or disagrees", function()
    local ds = helper.write('{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}', ".json")
    local name = ds:match("([^/]+)$")
    local path = helper.write("base_model: gpt2\nmicro_batch_size: 4\nsequence_len: 128\ndeepspeed: " .. name .. "\n", ".yml")
    assert_keys(estimate("--recipe", path), { framework = "deepspeed", zero = 2, micro_batch = 4 })
    path = helper.write("base_model: gpt2\nmicro_batch_size: 2\nsequence_len: 128\ndeepspeed: " .. name .. "\n", ".yml")
    local err = helper.fails("--recipe", path)
    assert.truthy(err:find(ds .. ":1: micro_batch = 4 disagrees with micro_batch = 2 (" .. path .. ":2)", 1, true), err)
    path = helper.write("base_model: gpt2\nsequence_len: 128\ndeepspeed: no-such-file.json\n", ".yml")
    err = helper.fails("--recipe", path)
    assert.truthy(err:find(path .. ":3: cannot find the DeepSpeed config no-such-file.json", 1, true), err)
  end)

  it("names the DeepSpeed file's keys it does not model under that file, apart from the YAML's", function()
    local ds = helper.write('{"zero_optimization": {"stage": 3, "sub_group_size": 0}}', ".json")
    local path = helper.write("base_model: gpt2\nsequence_len: 128\nsample_packing: true\nuse_ray: true\ndeepspeed: "
      .. ds:match("([^/]+)$") .. "\n", ".yml")
    local _, err, code = helper.run("estimate", "--recipe", path)
    assert.are.equal(0, code, err)
    assert.truthy(err:find(path .. ": axolotl keys vramplan does not model (the estimate ignores them): sample_packing, "
      .. "use_ray; in " .. ds .. ": zero_optimization.sub_group_size\n", 1, true), err)
  end)

  it("runs the DeepSpeed config's optimizer section when it has one, else the Trainer's as the client optimizer", function()
    -- transformers' deepspeed_optim_sched: an optimizer section means DummyOptim, the Trainer's optim unused
    local ds = helper.write('{"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "zero_optimization": {"stage": 2}}',
      ".json")
    local path = helper.write("base_model: gpt2\nsequence_len: 128\noptimizer: adamw_bnb_8bit\ndeepspeed: "
      .. ds:match("[^/]+$") .. "\n", ".yml")
    local out, err, code = helper.run("estimate", "--recipe", path, "--json")
    assert.are.equal(0, code, err)
    assert_keys(json.decode(out).recipe, { optimizer = "adamw", optimizer_impl = "fused" })
    assert.truthy(err:find("optimizer=adamw_bnb_8bit (the DeepSpeed config's optimizer section runs instead)", 1, true), err)
    -- without one, the Trainer's torch.optim.AdamW (foreach) is DeepSpeed's client optimizer
    ds = helper.write('{"zero_optimization": {"stage": 2}}', ".json")
    path = helper.write("base_model: gpt2\nsequence_len: 128\noptimizer: adamw_torch\ndeepspeed: "
      .. ds:match("[^/]+$") .. "\n", ".yml")
    assert_keys(estimate("--recipe", path), { framework = "deepspeed", optimizer = "adamw", optimizer_impl = "foreach" })
  end)

  it("refuses a DeepSpeed file whose fp16 / bf16 contradicts the YAML's, as transformers does", function()
    -- accelerate's zero_stage2_config.json (fp16 enabled) named by a bf16 axolotl config
    local ds = helper.write('{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}', ".json")
    local path = helper.write("base_model: gpt2\nsequence_len: 128\nbf16: true\ndeepspeed: " .. ds:match("[^/]+$") .. "\n",
      ".yml")
    local err = helper.fails("--recipe", path)
    assert.truthy(err:find(ds .. ":1: precision = mixed-fp16 disagrees with bf16: true (" .. path .. ":3)", 1, true), err)
    -- "auto" takes the YAML's
    ds = helper.write('{"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}', ".json")
    path = helper.write("base_model: gpt2\nsequence_len: 128\nbf16: true\ndeepspeed: " .. ds:match("[^/]+$") .. "\n", ".yml")
    assert.are.equal("mixed-bf16", estimate("--recipe", path).precision)
  end)

  it("finds deepspeed: FILE from the repository's root when run inside the config's folder", function()
    -- axolotl's examples name deepspeed_configs/zero3.json from the repository's root; a user runs
    -- `cd examples/llama-3 && vramplan estimate --recipe lora-1b-ray.yml`
    local top = helper.write("", ".d")
    os.remove(top)
    os.execute("mkdir -p '" .. top .. "/deepspeed_configs' '" .. top .. "/examples/llama-3'")
    local function put(path, text)
      local f = assert(io.open(top .. "/" .. path, "w"))
      f:write(text)
      f:close()
    end
    put("deepspeed_configs/z3.json", '{"zero_optimization": {"stage": 3}}')
    put("examples/llama-3/c.yml", "base_model: gpt2\nsequence_len: 128\ndeepspeed: deepspeed_configs/z3.json\n")
    local bin = helper.bin:sub(1, 1) == "/" and helper.bin or (io.popen("pwd"):read("l") .. "/" .. helper.bin)
    local pipe = io.popen("cd '" .. top .. "/examples/llama-3' && " .. bin .. " estimate --recipe c.yml --json 2>&1")
    local out = pipe:read("a")
    pipe:close()
    os.execute("rm -r '" .. top .. "'")
    local ok, r = pcall(json.decode, out)
    assert(ok and type(r) == "table", out)
    assert_keys(r.recipe, { framework = "deepspeed", zero = 3 })
  end)

  it("reads aliases once each: ten levels of nine (a billion laughs) are not copied 9^10 times", function()
    -- found while writing the fuzz target (tests/fuzz/regressions/)
    local lines = { "base_model: gpt2", "micro_batch_size: 2", "sequence_len: 128", "a0: &a0 [x, x, x, x, x, x, x, x, x]" }
    for i = 1, 9 do
      lines[#lines + 1] = string.format("a%d: &a%d [%s]", i, i, string.rep("*a" .. (i - 1), 9, ", "))
    end
    local path = helper.write(table.concat(lines, "\n") .. "\n", ".yaml")
    assert_keys(estimate("--recipe", path), { micro_batch = 2, seq_len = 128 })
  end)

  it("takes the model from MODEL or --model when the id is unknown, and says so when neither is given", function()
    local path = helper.write("base_model: someone/unknown-model\nadapter: lora\nsequence_len: 128\n", ".yaml")
    local err = helper.fails("--recipe", path)
    assert.truthy(err:find(path .. ":1: someone/unknown-model is not a model vramplan knows", 1, true), err)
    local r = helper.estimate("--recipe", path, "--model", helper.root .. "/tests/fixtures/llama3.2-1b-config.json")
    assert.are.equal("lora", r.recipe.finetune)
    assert.are.equal(128, r.recipe.seq_len)
  end)

  it("names a LLaMA-Factory prediction run (do_predict without do_train): not the training step it estimates", function()
    -- LLaMA-Factory's examples/extras/nlg_eval/llama3_lora_predict.yaml
    local path = helper.write("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\ndo_predict: true\n"
      .. "finetuning_type: lora\ncutoff_len: 128\n", ".yaml")
    local _, err, code = helper.run("estimate", "--recipe", path)
    assert.are.equal(0, code, err)
    assert.truthy(err:find("do_train=false (a prediction or evaluation run", 1, true), err)
    path = helper.write("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\ndo_train: true\ndo_eval: true\n"
      .. "finetuning_type: lora\ncutoff_len: 128\n", ".yaml")
    _, err = helper.run("estimate", "--recipe", path)
    assert.are.equal("", err)
  end)

  it("refuses LLaMA-Factory's v1 configs by name rather than reading them as axolotl's (micro_batch_size)", function()
    local path = FIXTURES .. "llamafactory/examples/v1/train_lora/train_lora_sft.yaml"
    local err = helper.fails("qwen3-4b", "--recipe", path)
    assert.truthy(err:find(path .. ": a LLaMA-Factory v1 config (model, model_class): vramplan reads LLaMA-Factory's "
      .. "configs with model_name_or_path", 1, true), err)
    assert.falsy(err:find("axolotl", 1, true), err)
  end)

  it("blames a malformed YAML file's line and column", function()
    local path = helper.write("base_model: gpt2\nadapter: lora\n  lora_r: 8\n", ".yaml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":3:9: mapping values are not allowed", 1, true))
    path = helper.write("base_model: gpt2\nlora_target_modules: [q_proj,\n", ".yml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":3:1: did not find expected node content", 1, true))
    path = helper.write("- 1\n- 2\n", ".yaml")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":1:1: a training config is a YAML mapping", 1, true))
    -- values of the wrong kind: blamed on their line, never an internal error
    path = helper.write("base_model: [gpt2]\n", ".yaml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":1: base_model: a Hugging Face id is a string (got a list)",
      1, true))
    path = helper.write("base_model: gpt2\nsequence_len: [1, 2]\n", ".yaml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":2: seq_len: must be a whole number", 1, true))
    path = helper.write("model_name_or_path: gpt2\ncutoff_len: 64\nlora_rank: abc\n", ".yaml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":3: lora_rank: must be a whole number (got abc)", 1, true))
    path = helper.write("model_name_or_path: gpt2\ncutoff_len: 64\nquantization_bit: four\n", ".yaml")
    assert.truthy(helper.fails("--recipe", path):find(path .. ":3: quantization_bit: must be a number of bits", 1, true))
    path = helper.write("distributed_type: FSDP\nnum_machines: 2\nnum_processes: two\n", ".yaml")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find(path .. ":3: gpus: must be a whole number (got two)", 1, true))
    path = helper.write("learning_rate: 1\n", ".yaml")
    assert.truthy(helper.fails("gpt2", "--recipe", path):find("not a config vramplan reads", 1, true))
  end)
end)

describe("Hugging Face ids of the models in models/", function()
  local hub_ids = require("vramplan.hub_ids")
  it("has one for every model, each named in the model script's header", function()
    local names = {}
    for id, name in pairs(hub_ids.ids) do names[name] = id end
    for _, name in ipairs(require("vramplan.models").list(helper.root)) do
      local id = names[hub_ids.implementations[name] or name]
      assert(id, name .. " has no Hugging Face id")
      local f = assert(io.open(helper.root .. "/models/" .. name .. ".lua"))
      local header = f:read("a"):sub(1, 600)
      f:close()
      assert(header:find(id, 1, true), name .. ": its header does not name " .. id)
    end
  end)

  it("finds mirrors and instruct variants, not unrelated names", function()
    assert.are.equal("llama3-8b", (hub_ids.lookup("meta-llama/Meta-Llama-3-8B")))
    assert.are.equal("llama3-8b", (hub_ids.lookup("NousResearch/Meta-Llama-3-8B")))
    assert.are.equal("llama3-8b", (hub_ids.lookup("meta-llama/Meta-Llama-3-8B-Instruct")))
    assert.are.equal("qwen2.5-7b", (hub_ids.lookup("Qwen/Qwen2.5-7B-Instruct")))
    assert.is_nil(hub_ids.lookup("meta-llama/Meta-Llama-3-8B-Vision"))
    assert.are.equal("deepseek-v2", (hub_ids.lookup("deepseek-ai/DeepSeek-V2-Chat")))
    assert.are.equal("deepseek-v2-lite", (hub_ids.lookup("deepseek-ai/DeepSeek-V2-Lite-Chat")))
    assert.are.equal("deepseek-v2.5", (hub_ids.lookup("deepseek-ai/DeepSeek-V2.5")))
    assert.are.equal("falcon-180b", (hub_ids.lookup("tiiuae/falcon-180B-chat")))
    assert.are.equal("falcon-11b", (hub_ids.lookup("tiiuae/falcon-11B")))
    -- Gemma's -it checkpoints are the instruction-tuned -pt ones (axolotl's examples name them)
    assert.are.equal("gemma-3-1b", (hub_ids.lookup("google/gemma-3-1b-it")))
    assert.are.equal("gemma-3-27b", (hub_ids.lookup("google/gemma-3-27b-it")))
    assert.are.equal("gemma-2-9b", (hub_ids.lookup("google/gemma-2-9b-it")))
    -- Qwen3's 2507 refresh: LLaMA-Factory's examples (train_lora/qwen3_lora_sft.yaml) name it
    assert.are.equal("qwen3-4b", (hub_ids.lookup("Qwen/Qwen3-4B-Instruct-2507")))
    assert.are.equal("qwen3-30b-a3b", (hub_ids.lookup("Qwen/Qwen3-30B-A3B-Thinking-2507")))
    assert.are.equal("qwen3-235b-a22b", (hub_ids.lookup("Qwen/Qwen3-235B-A22B-Instruct-2507")))
    assert.is_nil(hub_ids.lookup("Qwen/Qwen3-4B-Instruct-2601"))
    -- Llama 3.1 8B / 70B have Llama 3's shapes (axolotl's llama-3/fft-8b.yaml names NousResearch/Meta-Llama-3.1-8B)
    assert.are.equal("llama3-8b", (hub_ids.lookup("NousResearch/Meta-Llama-3.1-8B")))
    assert.are.equal("llama3-8b", (hub_ids.lookup("meta-llama/Llama-3.1-8B-Instruct")))
    assert.are.equal("llama3-70b", (hub_ids.lookup("meta-llama/Llama-3.1-70B")))
    assert.are.equal("llama3.1-405b", (hub_ids.lookup("meta-llama/Llama-3.1-405B")))
    assert.is_nil(hub_ids.lookup("meta-llama/Llama-3.1-8B-Vision"))
    local r = helper.estimate("--recipe", FIXTURES .. "llamafactory/examples/train_lora/qwen3_lora_sft.yaml")
    assert.are.equal("Qwen3-4B", r.model.name)
  end)
end)

describe("a Hugging Face config.json as the model", function()
  it("is named by the checkpoint folder its config.json sits in, or by the file's own name", function()
    -- tests/fixtures/qwen3-8b-config.json has no _name_or_path: it was named "fixtures"
    local r = helper.estimate("--model", FIXTURES .. "../qwen3-8b-config.json", "--set", "seq_len=128")
    assert.are.equal("qwen3-8b-config", r.model.name)
    local top = helper.write("", ".d")
    os.remove(top)
    local dir = top .. "/Qwen3-8B"
    os.execute("mkdir -p '" .. dir .. "'")
    local src = assert(io.open(FIXTURES .. "../qwen3-8b-config.json"))
    local f = assert(io.open(dir .. "/config.json", "w"))
    f:write(src:read("a"))
    f:close()
    src:close()
    assert.are.equal("Qwen3-8B", helper.estimate("--model", dir .. "/config.json", "--set", "seq_len=128").model.name)
    os.remove(dir .. "/config.json")
    os.remove(dir)
    os.remove(top)
  end)
end)

describe("accelerate config YAML as recipes", function()
  local DIR = FIXTURES .. "accelerate/examples/config_yaml_templates/"

  it("reads the FSDP template: FULL_SHARD on 2 processes, bf16 mixed precision over fp32 shards", function()
    local _, err, code = helper.run("estimate", "llama3.2-1b", "--recipe", DIR .. "fsdp.yaml", "--set", "seq_len=256")
    assert.are.equal(0, code)
    -- its fsdp_backward_prefetch: BACKWARD_PRE is what vramplan's FSDP does (the next layer gathered in backward)
    assert.are.equal("", err)
    local path = helper.write("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\nfsdp_config:\n"
      .. "  fsdp_backward_prefetch: NO_PREFETCH\n  fsdp_forward_prefetch: true\n  fsdp_limit_all_gathers: true\n", ".yaml")
    _, err, code = helper.run("estimate", "llama3.2-1b", "--recipe", path, "--set", "seq_len=256")
    assert.are.equal(0, code)
    assert.truthy(err:find("(the estimate ignores them): fsdp_config.fsdp_backward_prefetch, "
      .. "fsdp_config.fsdp_forward_prefetch\n", 1, true), err)
    -- axolotl's fsdp_config the same way
    path = helper.write("base_model: gpt2\nsequence_len: 128\nfsdp:\n  - full_shard\nfsdp_config:\n"
      .. "  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_limit_all_gathers: true\n", ".yml")
    _, err, code = helper.run("estimate", "--recipe", path)
    assert.are.equal(0, code)
    assert.are.equal("", err)
    assert_same_as_sets("llama3.2-1b", DIR .. "fsdp.yaml", { "--set", "seq_len=256" }, {
      framework = "fsdp", fsdp = "full_shard", dp = 2, gpus = 2, precision = "mixed-bf16", offload_params = "none",
    })
  end)

  it("reads the DeepSpeed template through its deepspeed_config_file", function()
    assert_same_as_sets("llama3.2-1b", DIR .. "deepspeed.yaml", { "--set", "seq_len=256" }, {
      framework = "deepspeed", zero = 1, dp = 2, precision = "mixed-fp16", optimizer_impl = "foreach",
      overlap_comm = true, reduce_bucket_size = 2048 * 2048,
    })
  end)

  it("reads mixed_precision no (accelerate's default) as fp32, not vramplan's default", function()
    -- the multi-node template sets no mixed_precision: DDP over fp32 weights, no autocast
    assert_same_as_sets("llama3.2-1b", DIR .. "multi_node.yaml", { "--set", "seq_len=256" }, {
      framework = "torch", dp = 8, gpus = 8, gpus_per_node = 4, precision = "fp32",
    })
    -- under DeepSpeed without a file: DeepSpeedPlugin leaves fp16 and bf16 off
    local path = helper.write("distributed_type: DEEPSPEED\nmixed_precision: 'no'\nnum_processes: 2\n"
      .. "deepspeed_config:\n  zero_stage: 2\n", ".yaml")
    assert.are.equal("fp32", estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256").precision)
    -- a DeepSpeed file's "auto" is filled with false; its explicit fp16 stays
    local ds = helper.write('{"fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 1}}', ".json")
    path = helper.write("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  deepspeed_config_file: "
      .. ds:match("([^/]+)$") .. "\n", ".yaml")
    assert.are.equal("fp32", estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256").precision)
    assert.are.equal("mixed-fp16", estimate("llama3.2-1b", "--recipe", DIR .. "deepspeed.yaml", "--set", "seq_len=256").precision)
  end)

  it("reads the plugin fields without a DeepSpeed file, and the machines' count", function()
    local path = helper.write("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nmixed_precision: bf16\n" ..
      "num_machines: 2\nnum_processes: 16\ndeepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n" ..
      "  offload_param_device: none\n  gradient_accumulation_steps: 4\n", ".yaml")
    local recipe = estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256")
    assert_keys(recipe, { framework = "deepspeed", zero = 3, offload_optimizer = "cpu", offload_params = "none",
      grad_accum = 4, gpus = 16, dp = 16, gpus_per_node = 8, precision = "mixed-bf16" })
  end)
end)

describe("training stacks", function()
  -- transformers 4.x's from_pretrained loads fp32 weights unless told a dtype
  it("runs HF Trainer's bf16=True as autocast over fp32 weights, or over bf16 weights (transformers 4)", function()
    local v4 = { "--set", "seq_len=256", "--set", "transformers_version=4.57.1" }
    local recipe, peak = estimate("llama3.2-1b", "--set", "stack=hf-trainer", "--set", "bf16=true", table.unpack(v4))
    assert_keys(recipe, { precision = "amp-bf16", micro_batch = 8, optimizer = "adamw", optimizer_impl = "foreach",
      checkpointing = "none", keep_logits = false })
    local _, want = estimate("llama3.2-1b", "--set", "precision=amp-bf16", "--set", "micro_batch=8",
      "--set", "optimizer_impl=foreach", "--set", "keep_logits=false", table.unpack(v4))
    assert.are.equal(want, peak)
    recipe = estimate("llama3.2-1b", "--set", "stack=hf-trainer", "--set", "bf16=true",
      "--set", "torch_dtype=torch.bfloat16", table.unpack(v4))
    assert.are.equal("bf16-autocast", recipe.precision)
    -- the flags alone are read as transformers applies them
    recipe = estimate("llama3.2-1b", "--set", "fp16=true", table.unpack(v4))
    assert.are.equal("amp-fp16", recipe.precision)
    -- neither flag (the Trainer's default) or bf16=False: fp32 weights without
    -- autocast, not the core's own default (mixed-bf16)
    assert.are.equal("fp32", estimate("llama3.2-1b", "--set", "stack=hf-trainer", table.unpack(v4)).precision)
    assert.are.equal("fp32", estimate("llama3.2-1b", "--set", "bf16=false", table.unpack(v4)).precision)
    -- torch_dtype auto: the checkpoint's own dtype (Llama-3.2-1B's config.json: bfloat16)
    recipe = estimate("llama3.2-1b", "--set", "stack=hf-trainer", "--set", "bf16=true", "--set", "torch_dtype=auto",
      table.unpack(v4))
    assert.are.equal("bf16-autocast", recipe.precision)
  end)

  -- transformers 5's from_pretrained loads the checkpoint's dtype (dtype
  -- "auto", its default since 5.0), and its gradient_checkpointing_enable
  -- passes use_reentrant False when the Trainer gives no kwargs
  it("runs the Trainer stacks as transformers 5 unless told 4", function()
    local recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=hf-trainer", "--set", "bf16=true")
    assert_keys(recipe, { precision = "bf16-autocast", use_reentrant = false })
    -- fp16=True over Llama-2-7B's fp16 checkpoint: the Trainer's GradScaler refuses fp16 gradients
    local err = helper.fails("llama2-7b", "--set", "stack=hf-trainer", "--set", "fp16=true")
    assert.truthy(err:find("fp16 autocast over fp16 weights (transformers 5 loads the checkpoint's dtype, fp16) fails",
      1, true), err)
    -- GPT-2's checkpoint is fp32: autocast over it, as in 4.x
    assert.are.equal("amp-bf16", estimate("gpt2", "--set", "stack=hf-trainer", "--set", "bf16=true").precision)
    -- a config.json's torch_dtype is the checkpoint's
    local path = helper.write('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "torch_dtype": "float32"}', ".json")
    assert.are.equal("amp-bf16", estimate(path, "--set", "stack=trl").precision)
    path = helper.write('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, ' ..
      '"num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "dtype": "bfloat16"}', ".json")
    assert_keys(estimate(path, "--set", "stack=trl"), { precision = "bf16-autocast", use_reentrant = false })
    -- a model that records no checkpoint dtype: bf16, said
    local r = helper.estimate("mistral-7b", "--set", "seq_len=256", "--set", "stack=hf-trainer", "--set", "bf16=true")
    assert.are.equal("bf16-autocast", r.recipe.precision)
    assert.truthy(r.assumed.precision:find("the model records no checkpoint_dtype: bf16 assumed, set torch_dtype", 1, true),
      r.assumed.precision)
    -- named, the version alone brings 5's checkpointing default
    assert.are.equal(false, estimate("llama3.2-1b", "--set", "transformers_version=5", "--set", "seq_len=256").use_reentrant)
    assert.are.equal(true, estimate("llama3.2-1b", "--set", "seq_len=256").use_reentrant)
    err = helper.fails("gpt2", "--set", "transformers_version=3")
    assert.truthy(err:find("transformers_version: 3 is not 4 or 5", 1, true), err)
  end)

  it("says which stack and precision it assumed", function()
    local args = { "--set", "seq_len=256", "--set", "stack=hf-trainer", "--set", "bf16=true" }
    local out = helper.run("estimate", "llama3.2-1b", table.unpack(args))
    assert.truthy(out:find("stack: hf-trainer, precision bf16-autocast (bf16=True over bf16 weights (transformers 5 "
      .. "loads the checkpoint's dtype, bf16): autocast over a bf16 model)", 1, true), out)
    local r = helper.estimate("llama3.2-1b", "--set", "transformers_version=4", table.unpack(args))
    assert.are.same({ stack = "hf-trainer", precision = "bf16=True over fp32 weights: autocast" }, r.assumed)
    assert.is_nil(helper.estimate("llama3.2-1b", "--set", "seq_len=256").assumed)
  end)

  it("refuses the Trainer's fp16 autocast over fp16 weights, and unknown stacks", function()
    local err = helper.fails("gpt2", "--set", "stack=hf-trainer", "--set", "fp16=true", "--set", "torch_dtype=float16")
    assert.truthy(err:find("--set fp16=true: fp16: the Trainer's fp16 autocast over fp16 weights fails", 1, true), err)
    err = helper.fails("gpt2", "--set", "stack=keras")
    assert.truthy(err:find("--set stack=keras: stack: keras is not one of axolotl | deepspeed | hf-trainer", 1, true), err)
  end)

  it("sets each stack's own defaults and precision", function()
    local recipe = estimate("llama3.2-1b", "--set", "stack=trl", "--set", "transformers_version=4")
    assert_keys(recipe, { precision = "amp-bf16", checkpointing = "full", seq_len = 1024, micro_batch = 8 })
    -- SFTTrainer's non-reentrant default under transformers 4 (TRL 0.28+), and
    -- its activation_offloading, TRL's own OffloadActivations
    assert.are.equal(false, recipe.use_reentrant)
    assert.are_not.equal(true, recipe.offload_trl)
    recipe = estimate("llama3.2-1b", "--set", "stack=trl", "--set", "seq_len=256", "--set", "offload_activations=true")
    assert_keys(recipe, { offload_torchtune = true, offload_trl = true, use_reentrant = false })
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=llama-factory", "--set", "bf16=true",
      "--set", "finetune=full")
    assert.are.equal("amp-bf16", recipe.precision) -- trainable parameters upcast to fp32
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=llama-factory", "--set", "bf16=true",
      "--set", "finetune=lora")
    assert.are.equal("bf16-autocast", recipe.precision)
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=deepspeed", "--set", "fp16=true",
      "--set", "zero=2", "--set", "gpus=2")
    assert_keys(recipe, { framework = "deepspeed", precision = "mixed-fp16", optimizer_impl = "fused", dp = 2 })
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=torchtitan", "--set", "gpus=4")
    assert_keys(recipe, { framework = "fsdp2", precision = "mixed-bf16", optimizer_impl = "fused", dp = 4 })
    assert.are_not.equal(true, recipe.sequence_parallel)
    -- torchtitan's tp plan always runs the norms sequence-parallel
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=torchtitan", "--set", "gpus=4",
      "--set", "tp=2")
    assert_keys(recipe, { tp = 2, dp = 2, sequence_parallel = true })
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=torchtune")
    assert_keys(recipe, { precision = "bf16", checkpointing = "full" })
    -- a recipe key set by hand wins over the stack's default
    recipe = estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=trl", "--set", "checkpointing=none")
    assert.are.equal("none", recipe.checkpointing)
  end)
end)

describe("export", function()
  -- Exports `source` in `format`, then checks that importing the export
  -- gives the same recipe and peak as importing the source (with `extra`
  -- arguments to both), and that exporting the export gives the same text.
  local function assert_round_trip(format, model, source, suffix, extra)
    local out, err, code = helper.run("export", "--format", format, source, table.unpack(extra.export or {}))
    assert(code == 0, err)
    local path = helper.write(out, suffix)
    local args = extra.estimate or {}
    local a = helper.estimate(model, "--recipe", source, table.unpack(args))
    local b = helper.estimate(model, "--recipe", path, table.unpack(args))
    assert.are.same(a.recipe, b.recipe)
    assert.are.equal(a.per_gpu.peak_allocated_bytes, b.per_gpu.peak_allocated_bytes)
    local again = helper.run("export", "--format", format, path, table.unpack(extra.export or {}))
    assert.are.equal(out, again)
    return out, err
  end

  it("round-trips the guide's DeepSpeed example and LLaMA-Factory's ZeRO-3 config (auto values kept)", function()
    local path = helper.write([[{"train_batch_size": 1024, "gradient_accumulation_steps": 8, "optimizer": {"type": "AdamW", "params": {"lr": 6e-5}}, "fp16": {"enabled": true, "loss_scale_window": 1000}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}]], ".json")
    local out, err = assert_round_trip("deepspeed", "llama3.2-1b", path, ".json",
      { export = { "--set", "gpus=8" }, estimate = { "--set", "gpus=8", "--set", "seq_len=256" } })
    assert.truthy(err:find("not expressible in the deepspeed format (left out): gpus", 1, true), err)
    assert.falsy(out:find("train_micro_batch_size_per_gpu", 1, true)) -- the GPU count's, not the file's
    out = assert_round_trip("deepspeed", "llama3.2-1b", FIXTURES .. "llamafactory/examples/deepspeed/ds_z3_config.json",
      ".json", { estimate = { "--set", "gpus=2", "--set", "seq_len=256" } })
    assert.truthy(out:find('"reduce_bucket_size":"auto"', 1, true), out)
  end)

  it("round-trips axolotl's GPT-OSS LoRA example with the experts' target parameters and offloading", function()
    -- the example as August 2025 had it: lora_target_parameters on the
    -- last two layers' experts (through the checkpoint wrapper's name)
    local source = FIXTURES .. "axolotl/examples/gpt-oss/gpt-oss-20b-sft-lora-singlegpu.yaml"
    local f = assert(io.open(source))
    local text = f:read("a"):gsub("lora_target_linear: true\n", "lora_target_linear: true\nlora_target_parameters:\n"
      .. "  - 22._checkpoint_wrapped_module.mlp.experts.gate_up_proj\n  - 23.mlp.experts.down_proj\n", 1)
    f:close()
    local path = helper.write(text, ".yaml")
    -- (the simulated allocator echoes the load's keys: the MXFP4 checkpoint, the device map)
    local out = assert_round_trip("axolotl", "gpt-oss-20b", path, ".yaml",
      { estimate = { "--set", "seq_len=256", "--set", "allocator=simulated" } })
    assert.truthy(out:find("model_quantization_config: 'Mxfp4Config'\nmodel_quantization_config_kwargs:\n"
      .. "  dequantize: true\n", 1, true), out)
    assert.truthy(out:find("lora_target_parameters:\n  - '22._checkpoint_wrapped_module.mlp.experts.gate_up_proj'\n"
      .. "  - '23.mlp.experts.down_proj'", 1, true), out)
    assert.truthy(out:find("activation_offloading: true", 1, true), out)
  end)

  it("round-trips accelerate's FSDP template and a DeepSpeed plugin config", function()
    assert_round_trip("accelerate", "llama3.2-1b", FIXTURES .. "accelerate/examples/config_yaml_templates/fsdp.yaml",
      ".yaml", { estimate = { "--set", "seq_len=256" } })
    local path = helper.write("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 4\n" ..
      "deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 2\n", ".yaml")
    assert_round_trip("accelerate", "llama3.2-1b", path, ".yaml", { estimate = { "--set", "seq_len=256" } })
    -- zero3_init_flag false: the model built whole, partitioned by deepspeed.initialize
    path = helper.write("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 4\n" ..
      "deepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n", ".yaml")
    local recipe = estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256")
    assert_keys(recipe, { zero = 3, zero_init = false })
    local out = assert_round_trip("accelerate", "llama3.2-1b", path, ".yaml", { estimate = { "--set", "seq_len=256" } })
    assert.truthy(out:find("zero3_init_flag: false", 1, true), out)
  end)

  it("reads and writes FSDP2 (fsdp_version 2) as framework fsdp2 over transformers' model code", function()
    -- accelerate: fully_shard per layer and on the root, reshard_after_forward
    -- saying what FULL_SHARD and SHARD_GRAD_OP said; its prefetch key has no
    -- memory of its own under FSDP2 and is not listed
    local path = helper.write("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 4\nfsdp_config:\n"
      .. "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n  fsdp_activation_checkpointing: true\n"
      .. "  fsdp_backward_prefetch: NO_PREFETCH\n  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n", ".yaml")
    local _, err, code = helper.run("estimate", "llama3.2-1b", "--recipe", path, "--set", "seq_len=256")
    assert.are.equal(0, code, err)
    assert.are.equal("", err)
    assert_same_as_sets("llama3.2-1b", path, { "--set", "seq_len=256" }, {
      framework = "fsdp2", model_code = "transformers", reshard_after_forward = false, dp = 4,
      precision = "mixed-bf16", checkpointing = "full" })
    local out = assert_round_trip("accelerate", "llama3.2-1b", path, ".yaml", { estimate = { "--set", "seq_len=256" } })
    assert.truthy(out:find("fsdp_version: 2\n  fsdp_reshard_after_forward: false", 1, true), out)
    -- axolotl: LoRA and QLoRA under fsdp_version 2 are fsdp2; an 8-bit base there is refused, named
    local ax = "base_model: gpt2\nsequence_len: 128\nbf16: true\nadapter: lora\nlora_target_linear: true\n"
      .. "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n  offload_params: false\n"
    path = helper.write(ax, ".yml")
    local recipe = estimate("--recipe", path, "--set", "gpus=2")
    -- axolotl's own fsdp2_prepare_model does not upcast to fp32 as
    -- accelerate's does: the bf16 base stays bf16 under the Trainer's autocast, PEFT's adapters fp32
    assert_keys(recipe, { framework = "fsdp2", model_code = "transformers", reshard_after_forward = true,
                          finetune = "lora", precision = "bf16-autocast" })
    out = assert_round_trip("axolotl", "gpt2", path, ".yml", { estimate = { "--set", "gpus=2" } })
    assert.truthy(out:find("fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true", 1, true), out)
    path = helper.write(ax:gsub("adapter: lora", "adapter: qlora\nload_in_4bit: true"), ".yml")
    assert_keys(estimate("--recipe", path, "--set", "gpus=2"), { framework = "fsdp2", model_code = "transformers",
                                                                 finetune = "qlora", quant = "nf4" })
    path = helper.write(ax:gsub("adapter: lora", "adapter: lora\nload_in_8bit: true"), ".yml")
    local _, err2, code2 = helper.run("estimate", "--recipe", path, "--set", "gpus=2")
    assert.are.equal(1, code2, err2)
    assert.truthy(err2:find("quant: an 8-bit base with framework = fsdp2 is not modelled", 1, true), err2)
  end)

  it("round-trips accelerate's fp8 template, an fp32 FSDP config, and lists the auto values it cannot hold", function()
    local DIR = FIXTURES .. "accelerate/examples/config_yaml_templates/"
    assert.are.equal("fp8", estimate("llama3.2-1b", "--recipe", DIR .. "fp8.yaml", "--set", "seq_len=256").precision)
    local out = assert_round_trip("accelerate", "llama3.2-1b", DIR .. "fp8.yaml", ".yaml", { estimate = { "--set", "seq_len=256" } })
    assert.truthy(out:find("fp8_config:\n  backend: 'TE'", 1, true), out)
    -- without fp8_config, Transformer Engine is assumed (it was listed as "mixed_precision=fp8 (false)")
    local path = helper.write("distributed_type: 'NO'\nmixed_precision: fp8\n", ".yaml")
    local _, err, code = helper.run("estimate", "llama3.2-1b", "--recipe", path, "--set", "seq_len=256")
    assert.are.equal(0, code, err)
    assert.are.equal("", err)
    assert.are.equal("fp8", estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256").precision)
    -- mixed_precision no under FSDP: fp32 written back as 'no'
    path = helper.write("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n", ".yaml")
    out = assert_round_trip("accelerate", "llama3.2-1b", path, ".yaml", { estimate = { "--set", "seq_len=256" } })
    assert.truthy(out:find("mixed_precision: 'no'", 1, true), out)
    -- the DeepSpeed file's "auto" bucket has no place in the plugin section: named
    _, err = helper.run("export", "--format", "accelerate", DIR .. "deepspeed.yaml")
    assert.truthy(err:find("reduce_bucket_size (auto)", 1, true), err)
  end)

  it("round-trips axolotl's QLoRA and 8-bit LoRA examples, the model by its Hugging Face id", function()
    local out = assert_round_trip("axolotl", "llama3-8b", FIXTURES .. "axolotl/examples/llama-3/qlora.yml", ".yml", {})
    assert.truthy(out:find("base_model: 'meta-llama/Meta-Llama-3-8B'", 1, true), out)
    assert_round_trip("axolotl", "llama3-8b", FIXTURES .. "axolotl/examples/llama-3/lora-8b.yml", ".yml", {})
  end)

  it("round-trips axolotl's FSDP example with Liger: bf16 over fp32 shards, the plugin's keys, fused AdamW", function()
    local path = FIXTURES .. "axolotl/examples/llama-3/fft-8b-liger-fsdp.yaml"
    assert_keys(estimate("llama3-8b", "--recipe", path), { framework = "fsdp", precision = "mixed-bf16",
      kernels = "fused", loss = "fused-linear", optimizer = "adamw", optimizer_impl = "fused", offload_params = "cpu" })
    local out, err = assert_round_trip("axolotl", "llama3-8b", path, ".yml", { export = { "--model", "llama3-8b" } })
    assert.truthy(out:find("liger_fused_linear_cross_entropy: true", 1, true), out)
    assert.truthy(out:find("optimizer: 'adamw_torch_fused'", 1, true), out)
    assert.falsy(err:find("not expressible", 1, true), err)
    -- Cut Cross Entropy's loss too
    local cce = helper.write("base_model: meta-llama/Meta-Llama-3-8B\ncut_cross_entropy: true\nbf16: true\n"
      .. "sequence_len: 256\n", ".yml")
    out = assert_round_trip("axolotl", "llama3-8b", cce, ".yml", {})
    assert.truthy(out:find("cut_cross_entropy: true", 1, true), out)
  end)

  it("round-trips LLaMA-Factory's LoRA example and recipe scripts as LLaMA-Factory YAML", function()
    local out = assert_round_trip("llama-factory", "llama3-8b",
      FIXTURES .. "llamafactory/examples/train_lora/llama3_lora_sft.yaml", ".yaml", {})
    assert.truthy(out:find("model_name_or_path: 'meta-llama/Meta-Llama-3-8B'", 1, true), out)
    -- LoRA in bf16 with fp32 adapters; full tuning under autocast; pure bf16;
    -- QLoRA; freeze tuning; no checkpointing (LLaMA-Factory's default is on)
    local cases = {
      { "lora-q-v-checkpointed.lua" },
      { "hf-trainer-amp-bf16.lua" },
      { "pure-bf16-checkpointed.lua" },
      -- (its bf16 adapters, qlora.py's cast, have no LLaMA-Factory key: export leaves lora_dtype out, said)
      { "qlora-all-linear-paged.lua", "--set", "lora_dtype=auto" },
      { "hf-trainer-amp-bf16.lua", "--set", "finetune=freeze", "--set", "trainable_layers=3", "--set", "checkpointing=none" },
    }
    for _, case in ipairs(cases) do
      -- the Trainer under LLaMA-Factory keeps no logits; the recipes' loop does
      local sets = { "--set", "keep_logits=false", table.unpack(case, 2) }
      assert_round_trip("llama-factory", "llama3.2-1b", helper.root .. "/scripts/recipes/" .. case[1], ".yaml",
        { export = sets, estimate = { "--set", "seq_len=256", table.unpack(sets) } })
    end
  end)

  it("writes fsdp2 as FSDP with fsdp_version 2, not as MULTI_GPU, and reads it back", function()
    local out, err, code = helper.run("export", "--format", "accelerate", "scripts/recipes/full-bf16-adamw.lua",
      "--set", "framework=fsdp2", "--set", "gpus=8")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("distributed_type: 'FSDP'", 1, true), out)
    assert.truthy(out:find("fsdp_config:\n  fsdp_version: 2", 1, true), out)
    -- accelerate reduces in the compute dtype: an fp32 reduce_dtype is left out, named
    local _, err2 = helper.run("export", "--format", "accelerate", "scripts/recipes/full-bf16-adamw.lua",
      "--set", "framework=fsdp2", "--set", "gpus=8", "--set", "reduce_dtype=fp32")
    assert.truthy(err2:find("reduce_dtype", 1, true), err2)
    local path = helper.write(out, ".yaml")
    assert_keys(estimate("llama3.2-1b", "--recipe", path, "--set", "seq_len=256"),
      { framework = "fsdp2", dp = 8, precision = "mixed-bf16" })
  end)

  -- Exports `source`'s DeepSpeed half with --format deepspeed and the rest
  -- in `format`, naming that file (--deepspeed); checks that the pair reads
  -- back as `source` does (with `args`) and that without --deepspeed the
  -- export is refused with `refusal`. Returns the `format` text.
  local function assert_deepspeed_pair(format, source, suffix, args, refusal, key)
    local ds, err, code = helper.run("export", "--format", "deepspeed", source)
    assert(code == 0, err)
    local name = helper.write(ds, ".json"):match("[^/]+$")
    local out
    out, err, code = helper.run("export", "--format", format, source, "--deepspeed", name)
    assert(code == 0, err)
    assert.truthy(out:find((key or "deepspeed") .. ": '" .. name .. "'", 1, true), out)
    local path = helper.write(out, suffix) -- in the same folder as the DeepSpeed file
    local a = helper.estimate("--recipe", source, table.unpack(args))
    local b = helper.estimate("--recipe", path, table.unpack(args))
    assert.are.same(a.recipe, b.recipe)
    assert.are.equal(a.per_gpu.peak_allocated_bytes, b.per_gpu.peak_allocated_bytes)
    -- without --deepspeed the DeepSpeed half has nowhere to go
    if refusal then
      _, err, code = helper.run("export", "--format", format, source)
      assert.are.equal(1, code)
      assert.truthy(err:find(refusal, 1, true), err)
    end
    return out
  end

  it("round-trips LLaMA-Factory's ZeRO-3 LoRA example, its DeepSpeed config written beside it", function()
    local out = assert_deepspeed_pair("llama-factory", FIXTURES .. "llamafactory/examples/train_lora/llama3_lora_sft_ds3.yaml",
      ".yaml", { "--set", "gpus=2", "--set", "seq_len=256" },
      "framework = deepspeed: a LLaMA-Factory config names its DeepSpeed config")
    assert.falsy(out:find("stage3", 1, true), out) -- the ZeRO keys are the DeepSpeed file's
  end)

  it("round-trips an axolotl DeepSpeed config, its DeepSpeed file written beside it (--deepspeed)", function()
    local z3 = helper.write('{"zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": "auto"}, '
      .. '"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"}', ".json")
    local source = helper.write("base_model: NousResearch/Llama-3.2-1B\nadapter: lora\nlora_target_linear: true\n"
      .. "sequence_len: 256\nmicro_batch_size: 2\nbf16: true\noptimizer: adamw_torch\ndeepspeed: "
      .. z3:match("[^/]+$") .. "\n", ".yml")
    local out = assert_deepspeed_pair("axolotl", source, ".yml", { "--set", "gpus=4" },
      "framework = deepspeed: an axolotl config names its DeepSpeed config")
    assert.truthy(out:find("bf16: true", 1, true), out) -- mixed-bf16 under DeepSpeed
    -- a Trainer optimizer DeepSpeed has no section for (axolotl's mistral/mixtral/mixtral.yml: adamw_bnb_8bit)
    -- stays the YAML's: the DeepSpeed file has no optimizer section, DeepSpeed runs the client optimizer
    source = helper.write("base_model: NousResearch/Llama-3.2-1B\nadapter: lora\nlora_target_linear: true\n"
      .. "sequence_len: 256\nbf16: true\noptimizer: adamw_bnb_8bit\ndeepspeed: " .. z3:match("[^/]+$") .. "\n", ".yml")
    local ds, err = helper.run("export", "--format", "deepspeed", source)
    assert.falsy(ds:find('"optimizer"', 1, true), ds)
    assert.truthy(err:find("left out%): .*optimizer"), err)
    out = assert_deepspeed_pair("axolotl", source, ".yml", { "--set", "gpus=4" }, nil)
    assert.truthy(out:find("optimizer: 'adamw_bnb_8bit'", 1, true), out)
  end)

  it("round-trips accelerate's DeepSpeed template with its deepspeed_config_file (--deepspeed)", function()
    -- without the file, the plugin fields cannot hold its optimizer, overlap_comm and buckets
    local out = assert_deepspeed_pair("accelerate", FIXTURES .. "accelerate/examples/config_yaml_templates/deepspeed.yaml",
      ".yaml", { "llama3.2-1b", "--set", "seq_len=256" }, nil, "deepspeed_config_file")
    assert.falsy(out:find("zero_stage", 1, true), out)
  end)

  it("writes LLaMA-Factory YAML that parses, with LLaMA-Factory's own argument names and values", function()
    local out, err, code = helper.run("export", "--format", "llama-factory",
      helper.root .. "/scripts/recipes/lora-q-v-checkpointed.lua", "--model", "llama3-8b", "--set", "lora_rank=16",
      "--set", "lora_alpha=32", "--set", "checkpointing=none", "--set", "attention=flash", "--set", "micro_batch=2",
      "--set", "grad_accum=4", "--set", "modules_to_save=lm_head", "--set", "use_reentrant=false")
    assert(code == 0, err)
    local doc = require("lyaml").load(out)
    assert.are.same({
      model_name_or_path = "meta-llama/Meta-Llama-3-8B", stage = "sft", do_train = true, finetuning_type = "lora",
      lora_rank = 16, lora_alpha = 32, lora_dropout = 0.05, lora_target = "q_proj,v_proj", additional_target = "lm_head",
      per_device_train_batch_size = 2, gradient_accumulation_steps = 4, cutoff_len = 512, bf16 = true,
      disable_gradient_checkpointing = true, use_reentrant_gc = false, flash_attn = "fa2", optim = "adamw_torch",
    }, doc)
    -- every key is an argument LLaMA-Factory or transformers' TrainingArguments
    -- declares (hiyouga/LLaMA-Factory ff6d4d12, src/llamafactory/hparams/
    -- {model,data,finetuning}_args.py; transformers/training_args.py)
    local declared = {}
    for k in ([[model_name_or_path stage do_train finetuning_type freeze_trainable_layers quantization_bit
      quantization_type double_quantization lora_rank lora_alpha lora_dropout lora_target additional_target use_dora
      per_device_train_batch_size gradient_accumulation_steps cutoff_len bf16 fp16 pure_bf16
      disable_gradient_checkpointing use_reentrant_gc flash_attn optim weight_decay deepspeed]]):gmatch("%S+") do
      declared[k] = true
    end
    for _, recipe in ipairs({ "lora-q-v-checkpointed.lua", "qlora-all-linear-paged.lua", "pure-bf16-checkpointed.lua" }) do
      local text = helper.run("export", "--format", "llama-factory", helper.root .. "/scripts/recipes/" .. recipe,
        "--set", "weight_decay=0.1", "--set", "finetune=" .. (recipe:find("pure") and "freeze" or "qlora"))
      for k in pairs(require("lyaml").load(text)) do
        assert(declared[k], recipe .. ": " .. k .. " is not a LLaMA-Factory argument")
      end
    end
  end)

  it("refuses what a LLaMA-Factory config cannot say, naming the key", function()
    local lora = helper.root .. "/scripts/recipes/lora-q-v-checkpointed.lua"
    local refusals = {
      { { "--set", "checkpointing=layers-2" }, "checkpointing = layers-2 has no equivalent in a LLaMA-Factory config" },
      { { "--set", "framework=fsdp" }, "framework = fsdp has no equivalent in a LLaMA-Factory config" },
      { { "--set", "finetune=prefix", "--set", "num_virtual_tokens=8", "--set", "checkpointing=none" }, "finetune = prefix has no equivalent in a LLaMA-Factory config" },
      { { "--set", "precision=amp-bf16" }, "precision = amp-bf16 has no equivalent in a LLaMA-Factory config with finetuning lora" },
      { { "--set", "precision=fp32", "--set", "outputs_fp32=false" }, "precision = fp32 has no equivalent in a LLaMA-Factory config with finetuning lora" },
      { { "--deepspeed", "ds.json" }, "--deepspeed FILE: the recipe's framework is torch, not deepspeed" },
    }
    for _, r in ipairs(refusals) do
      local _, err, code = helper.run("export", "--format", "llama-factory", lora, table.unpack(r[1]))
      assert.are.equal(1, code, err)
      assert.truthy(err:find(r[2], 1, true), err)
      assert.truthy(err:find(lora, 1, true), err)
    end
  end)

  it("exports a recipe script, and refuses what the format cannot say", function()
    local out, err, code = helper.run("export", "--format", "deepspeed", helper.root .. "/scripts/recipes/full-bf16-adamw.lua",
      "--set", "zero=1")
    assert.are.equal(0, code, err)
    assert.truthy(out:find('"bf16":{\n    "enabled":true', 1, true), out)
    assert.truthy(err:find("left out): attention, checkpointing, seq_len", 1, true), err)
    _, err, code = helper.run("export", "--format", "deepspeed", helper.root .. "/scripts/recipes/hf-trainer-amp-bf16.lua")
    assert.are.equal(1, code)
    assert.truthy(err:find("precision = amp-bf16 has no equivalent in a DeepSpeed config", 1, true), err)
    _, err, code = helper.run("export", "--format", "keras", helper.root .. "/scripts/recipes/hf-trainer-amp-bf16.lua")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown format keras", 1, true), err)
  end)

  it("exports a recipe by the name `list recipes` prints, or --set keys alone, numbers as numbers", function()
    local out, err, code = helper.run("export", "--format", "axolotl", "qlora-all-linear-paged")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("adapter: 'qlora'", 1, true), out)
    out, err, code = helper.run("export", "--format", "deepspeed", "--set", "zero=2", "--set", "micro_batch=4",
      "--set", "precision=mixed-bf16")
    assert.are.equal(0, code, err)
    local ds = json.decode(out)
    assert.are.equal(4, ds.train_micro_batch_size_per_gpu)
    assert.are.equal(2, ds.zero_optimization.stage)
    assert.are.equal(true, ds.bf16.enabled)
    local _, e, c = helper.run("export", "--format", "deepspeed")
    assert.are.equal(2, c)
    assert.truthy(e:find("export needs a RECIPE, a config file or --set keys", 1, true), e)
  end)
end)
