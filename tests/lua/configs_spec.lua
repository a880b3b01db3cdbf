-- Other tools' configuration files as recipes (docs/configs.md): each
-- import is checked against the same recipe written as --set keys (the
-- estimate's recipe echo and its peak), on the configurations the tools
-- publish (tests/fixtures/configs/, SOURCES.md) and on malformed files.
local helper = require("tests.lua.helper")

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
    local recipe = assert_same_as_sets("llama3.2-1b", FIXTURES .. "accelerate-zero_stage2_offload_config.json",
      { "--set", "gpus=2", "--set", "seq_len=256", "--set", "micro_batch=2" }, {
        framework = "deepspeed", zero = 2, precision = "mixed-fp16", optimizer = "adamw", optimizer_impl = "foreach",
        offload_optimizer = "cpu", overlap_comm = true,
        reduce_bucket_size = 2048 * 2048, -- "auto": hidden_size^2 (transformers' trainer_config_finalize)
      })
    assert.are.equal(1, recipe.grad_accum)
  end)

  it("reads LLaMA-Factory's ZeRO-3 config, resolving its auto buckets from the model's width", function()
    local recipe = estimate("llama3.2-1b", "--recipe", FIXTURES .. "llamafactory-ds_z3_config.json", "--set", "gpus=4",
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

  it("blames a malformed file's line and column", function()
    local path = helper.write('{\n  "zero_optimization": {\n    "stage": 2,\n    "overlap_comm": tru\n  }\n}\n', ".json")
    local err = helper.fails("gpt2", "--recipe", path)
    assert.truthy(err:find("^vramplan: " .. path:gsub("%p", "%%%0") .. ":4:21: "), err)
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
  end)

  it("refuses two names for one key that disagree", function()
    local err = helper.fails("gpt2", "--set", "finetune=lora", "--set", "r=16", "--set", "lora_rank=8")
    assert.truthy(err:find("r (16) disagrees with lora_rank = 8", 1, true), err)
  end)
end)
