-- The command line and its JSON contract: field names other tools rely on.
local helper = require("tests.lua.helper")
local json = require("dkjson")

describe("vramplan estimate", function()
  it("prints a verdict, the breakdown and the peak's place", function()
    local out, err, code = helper.run("estimate", "models/llama2-7b.lua", "--recipe",
      "scripts/recipes/full-bf16-adamw.lua", "--gpu", "a100-80gb")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("does not fit on NVIDIA A100 80GB: needs [%d.]+ GiB, has 80.00 GiB"))
    for _, row in ipairs({ "parameters", "gradients", "master weights", "optimizer states", "activations",
      "transient", "allocator", "runtime", "total" }) do
      assert.truthy(out:find(row, 1, true), row)
    end
    assert.truthy(out:find("peak: %a+"))
  end)

  it("says how much room is left when a recipe fits", function()
    local out, _, code = helper.run("estimate", "models/llama2-7b.lua", "--set", "precision=bf16", "--set",
      "optimizer=sgd", "--set", "seq_len=512", "--set", "checkpointing=full", "--gpu", "h200")
    assert.are.equal(0, code)
    assert.truthy(out:find("fits on NVIDIA H200[%w ]* with [%d.]+ GiB to spare"))
  end)

  it("writes the documented JSON fields", function()
    local r = helper.estimate("models/llama2-7b.lua", "--gpu", "a100-80gb", "--set", "micro_batch=2",
      "--set", "seq_len=1024")
    assert.are.equal("Llama-2-7B", r.model.name)
    assert.are.equal(6738415616, r.model.params)
    for _, k in ipairs({ "params_bytes", "grads_bytes", "master_bytes", "optimizer_bytes", "activations_bytes",
      "peak_allocated_bytes", "peak_reserved_bytes", "peak_total_bytes" }) do
      assert.are.equal("number", type(r.per_gpu[k]), k)
      assert.is_true(math.type(r.per_gpu[k]) == "integer", k)
    end
    assert.are.equal("string", type(r.per_gpu.peak_phase))
    assert.are.equal("NVIDIA A100 80GB", r.gpu.name)
    assert.are.equal(81920 * 1024 * 1024, r.gpu.memory_bytes)
    assert.are.equal("boolean", type(r.fits))
    assert.are.equal(r.gpu.memory_bytes - r.per_gpu.peak_total_bytes, r.headroom_bytes)
    assert.are.equal(r.fits, r.headroom_bytes >= 0)
    assert.are.equal(2, r.recipe.micro_batch)
    assert.are.equal(1024, r.recipe.seq_len)
    -- the figures nest: allocated <= reserved <= total
    assert.is_true(r.per_gpu.peak_allocated_bytes <= r.per_gpu.peak_reserved_bytes)
    assert.is_true(r.per_gpu.peak_reserved_bytes < r.per_gpu.peak_total_bytes)
  end)

  it("gives null verdict fields without a GPU", function()
    local out, _, code = helper.run("estimate", "--json", "models/llama2-7b.lua")
    assert.are.equal(0, code)
    assert.truthy(out:find('"fits":null'))
    assert.truthy(out:find('"gpu":null'))
  end)

  -- Every object's keys once: JSON readers keep only one of two equal keys.
  local function duplicate_key(text)
    local objects, i = {}, 1
    while i <= #text do
      local c = text:sub(i, i)
      if c == "{" then
        objects[#objects + 1] = {}
      elseif c == "}" then
        objects[#objects] = nil
      elseif c == '"' then
        local j = i + 1
        while text:sub(j, j) ~= '"' do j = j + (text:sub(j, j) == "\\" and 2 or 1) end
        local key = text:sub(i + 1, j - 1)
        if text:match("^%s*:", j + 1) then
          local seen = objects[#objects]
          if seen[key] then return key end
          seen[key] = true
        end
        i = j
      end
      i = i + 1
    end
  end

  it("names every JSON field once per object", function()
    for _, args in ipairs({ { "models/llama2-7b.lua" }, { "models/llama2-7b.lua", "--set", "pp=2", "--set", "framework=deepspeed", "--set", "zero=1",
        "--set", "dp=2", "--gpu", "A100-80GB" } }) do
      local out, err, code = helper.run("estimate", "--json", table.unpack(args))
      assert.are.equal(0, code, err)
      assert.is_nil(duplicate_key(out))
    end
  end)

  it("reads a Hugging Face config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/llama2-7b-config.json", "models/llama2-7b.lua")
    -- Llama 3.2: a tied head and llama3 rope scaling (inverse frequencies only)
    helper.assert_same_model("tests/fixtures/llama3.2-1b-config.json", "models/llama3.2-1b.lua")
    helper.assert_same_model("tests/fixtures/qwen2.5-7b-config.json", "models/qwen2.5-7b.lua")
    helper.assert_same_model("tests/fixtures/qwen3-8b-config.json", "models/qwen3-8b.lua")
    helper.assert_same_model("tests/fixtures/bloom-560m-config.json", "models/bloom-560m.lua")
    helper.assert_same_model("tests/fixtures/gpt-oss-20b-config.json", "models/gpt-oss-20b.lua")
    helper.assert_same_model("tests/fixtures/gpt-oss-120b-config.json", "models/gpt-oss-120b.lua")
  end)

  it("names what a BLOOM config asks for that is not modelled", function()
    helper.assert_config_rejected('{"model_type": "bloom", "apply_residual_connection_post_layernorm": true}',
      "apply_residual_connection_post_layernorm")
    helper.assert_config_rejected('{"model_type": "bloom", "pretraining_tp": 4, "slow_but_exact": true}',
      "slow_but_exact")
  end)

  it("refuses a flash kernel for BLOOM's ALiBi attention and runs sdpa eagerly", function()
    local _, err, code = helper.run("estimate", "bloom-560m", "--set", "attention=flash")
    assert.are.equal(1, code)
    assert.truthy(err:find("attention: BLOOM's ALiBi attention runs eagerly", 1, true), err)
    local sdpa = helper.estimate("bloom-560m", "--set", "seq_len=128")
    local eager = helper.estimate("bloom-560m", "--set", "seq_len=128", "--set", "attention=eager")
    assert.are.equal(eager.per_gpu.peak_allocated_bytes, sdpa.per_gpu.peak_allocated_bytes)
  end)

  it("reads a Qwen2 config's sliding window only when use_sliding_window is on", function()
    local function config(use)
      return helper.write(string.format('{"model_type": "qwen2", "hidden_size": 256, "num_hidden_layers": 2, '
        .. '"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, '
        .. '"sliding_window": 64, "use_sliding_window": %s}', tostring(use)), ".json")
    end
    local function activations(use)
      return helper.estimate(config(use), "--set", "seq_len=128", "--set", "precision=bf16",
        "--set", "use_cache=false").per_gpu.activations_bytes
    end
    -- 128 keys reach the 64-token window: SDPA gets the 4-D mask, which its
    -- memory-efficient kernel keeps per layer (rows of 129, padded to 136)
    assert.are.equal(2 * 128 * 136 * 2, activations(true) - activations(false))
  end)

  it("lets --set override model fields, so one script describes a family", function()
    local small = helper.estimate("models/llama2-7b.lua", "--set", "layers=2", "--set", "hidden=1024",
      "--set", "intermediate=2816", "--set", "heads=8", "--set", "kv_heads=8")
    -- 2 layers of (4 x 1024^2 attention + 3 x 1024 x 2816 MLP + 2 x 1024 norms),
    -- two 32000 x 1024 embeddings and the final norm
    local per_layer = 4 * 1024 * 1024 + 3 * 1024 * 2816 + 2 * 1024
    assert.are.equal(2 * per_layer + 2 * 32000 * 1024 + 1024, small.model.params)
  end)

  it("prints the whole step with --timeline", function()
    local out, _, code = helper.run("estimate", "models/llama2-7b.lua", "--set", "layers=2", "--set",
      "seq_len=128", "--timeline")
    assert.are.equal(0, code)
    for _, phase in ipairs({ "setup", "forward", "loss", "backward", "optimizer" }) do
      assert.truthy(out:find("\n" .. phase .. " "), phase)
    end
    assert.truthy(out:find("attention.softmax", 1, true) or out:find("attention.flash", 1, true))
  end)

  it("lists models, GPUs and recipes", function()
    local out, _, code = helper.run("list", "gpus")
    assert.are.equal(0, code)
    assert.truthy(out:find("a100%-80gb"))
    assert.truthy(out:find("h100%-80gb"))
    assert.truthy(out:find("rtx4090"))
  end)

  it("names the modules LoRA adapts in this model, not the recipe's list of candidates", function()
    -- PEFT's defaults name modules of several families; BLOOM has one of them
    local bloom = helper.estimate("bloom-560m", "--set", "finetune=lora", "--set", "seq_len=64")
    assert.are.equal("query_key_value", bloom.model.lora_modules)
    -- all-linear: every linear module but the head, routers included
    local moe = helper.estimate("qwen1.5-moe-a2.7b", "--set", "finetune=lora", "--set", "lora_targets=all-linear",
      "--set", "seq_len=64")
    assert.are.equal("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,gate,shared_expert_gate",
      moe.model.lora_modules)
    assert.is_nil(helper.estimate("gpt2", "--set", "seq_len=64").model.lora_modules)
    local out = helper.run("estimate", "bloom-560m", "--set", "finetune=lora", "--set", "seq_len=64")
    -- modules alone: no target_parameters clause (the echo's empty list)
    assert.truthy(out:find("fine-tuning: lora, r 8 on query_key_value (dropout 0)\n", 1, true), out)
    -- PEFT trains copies of modules_to_save; freezing trains them as they are
    out = helper.run("estimate", "llama2-7b", "--set", "finetune=lora", "--set", "modules_to_save=lm_head")
    assert.truthy(out:find("training copies of lm_head (the originals kept, frozen)", 1, true), out)
    out = helper.run("estimate", "llama2-7b", "--set", "finetune=freeze", "--set", "modules_to_save=lm_head")
    assert.truthy(out:find("fine-tuning: freeze, no layer trained with the final norm and head, training lm_head\n",
      1, true), out)
  end)

  it("lists every value an option key takes, from the tables its parser reads", function()
    local out, _, code = helper.run("keys")
    assert.are.equal(0, code)
    local function line(key) return out:match("\n  " .. key .. " +([^\n]*)") end
    for _, opt in ipairs({ "adafactor", "adamw-8bit", "paged-adamw-32bit", "lion", "sm3" }) do
      assert.truthy(line("optimizer"):find(opt, 1, true), opt)
    end
    assert.truthy(line("precision"):find("| fp8 | fp8-torchao | bf16-autocast | fp16-autocast:", 1, true))
    assert.truthy(line("framework"):find("torch | deepspeed | fsdp | megatron", 1, true))
    assert.truthy(line("finetune"):find("prefix | prompt", 1, true))
    -- every listed choice is accepted
    for choice in line("optimizer"):match("^([^:]*)"):gmatch("[%w%-]+") do
      local _, err, rc = helper.run("estimate", "gpt2", "--set", "optimizer=" .. choice, "--set", "seq_len=64")
      assert.are.equal(0, rc, choice .. ": " .. tostring(err))
    end
  end)

  it("lists every model family's fields, each one a --set that its models accept", function()
    local out = helper.run("keys")
    local llama = out:match("\n  llama — [^\n]*\n(.-)\n  %S")
    assert.truthy(llama, out)
    local n = 0
    for row in (llama .. "\n"):gmatch("([^\n]*)\n") do
      local name = row:match("^      (%S+)")
      n = n + 1
      assert.truthy(name and name:match("^[%w_]+$"), row)
    end
    assert.is_true(n > 40, tostring(n))
    for _, field in ipairs({ "sliding_pattern", "router_aux_loss", "local_rope", "final_softcap" }) do
      assert.truthy(llama:find("      " .. field .. " ", 1, true), field)
    end
    -- a listed field is one --set accepts for the family's models
    local r = helper.estimate("gemma-2-2b", "--set", "final_softcap=0", "--set", "seq_len=64")
    assert.truthy(r.per_gpu)
    -- a field that takes names lists them, and each listed one is accepted
    local activation = llama:match("\n      activation +string +default silu +([^:\n]*):")
    assert.truthy(activation, llama)
    local listed = 0
    for name in activation:gmatch("[%w_]+") do
      listed = listed + 1
      local _, err, rc = helper.run("estimate", "llama3.2-1b", "--set", "activation=" .. name, "--set", "seq_len=64")
      assert.are.equal(0, rc, name .. ": " .. tostring(err))
    end
    assert.is_true(listed >= 5, activation)
  end)

  it("echoes the GPU count over every parallel dimension", function()
    local r = helper.estimate("models/llama2-7b.lua", "--set", "framework=megatron", "--set", "dp=2",
      "--set", "tp=2", "--set", "cp=2", "--set", "pp=2", "--set", "seq_len=1024")
    assert.are.equal(16, r.recipe.gpus)
    assert.are.equal(8, r.recipe.gpus_per_node)
  end)
end)
