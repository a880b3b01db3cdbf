-- LoRA as Hugging Face PEFT applies it: frozen base weights, trained
-- adapters beside the targeted linear layers, the published trainable
-- counts, and recipes that name modules a model does not have. (The
-- activations are checked against PyTorch in tests/torch/compare.py.)
local helper = require("tests.lua.helper")
local json = require("dkjson")

local function reference(path)
  local f = assert(io.open(helper.root .. "/" .. path, "r"))
  local data = json.decode(f:read("a"))
  f:close()
  return data
end

local function lora(...)
  return helper.estimate("llama2-7b", "--set", "seq_len=256", "--set", "finetune=lora", ...)
end

describe("LoRA", function()
  for _, entry in ipairs(reference("tests/reference/peft.json")) do
    it(string.format("trains %d parameters of %s (%s)", entry.published_trainable, entry.model, entry.source), function()
      local args = { entry.model, "--set", "seq_len=256" }
      for k, v in pairs(entry.recipe) do
        args[#args + 1] = "--set"
        args[#args + 1] = k .. "=" .. tostring(v)
      end
      local r = helper.estimate(table.unpack(args))
      assert.are.equal(entry.published_trainable, r.model.trainable_params)
      assert.are.equal(entry.published_all, r.model.params + r.model.trainable_params)
    end)
  end

  it("keeps gradients and Adam states for the adapters alone, in fp32 beside a bf16 model", function()
    local r = lora("--set", "precision=bf16", "--set", "lora_targets=q_proj,v_proj")
    local adapters = 32 * 2 * 8 * (4096 + 4096)
    assert.are.equal(2 * 6738415616 + 4 * adapters, r.per_gpu.params_bytes) -- PEFT's autocast_adapter_dtype
    assert.are.equal(4 * adapters, r.per_gpu.grads_bytes)
    assert.are.equal(2 * 4 * adapters, r.per_gpu.optimizer_bytes)
  end)

  it("adapts every linear layer but the head with all-linear", function()
    local r = lora("--set", "lora_targets=all-linear", "--set", "lora_rank=16")
    local h, f = 4096, 11008
    local per_layer = 16 * (4 * (h + h) + 2 * (h + f) + (f + h))
    assert.are.equal(32 * per_layer, r.model.trainable_params)
  end)

  it("trains modules_to_save in full beside the adapters, as PEFT's copy beside the frozen original", function()
    local r = lora("--set", "lora_targets=q_proj", "--set", "modules_to_save=lm_head")
    assert.are.equal(32 * 8 * (4096 + 4096) + 32000 * 4096, r.model.trainable_params)
    -- ModulesToSaveWrapper deep-copies the head: its bf16 bytes twice
    local plain = lora("--set", "lora_targets=q_proj")
    assert.are.equal(2 * 32000 * 4096, r.per_gpu.params_bytes - plain.per_gpu.params_bytes)
  end)

  it("trains a classifier's head as PEFT's SEQ_CLS copy, on BERT's own module names", function()
    local r = helper.estimate("bert-base-cased", "--set", "finetune=lora", "--set", "seq_len=128")
    assert.are.equal("query,value", r.model.lora_modules) -- PEFT's default targets for bert
    assert.are.equal("classifier", r.model.saved_modules)
    -- 12 layers x 2 modules x r 8 x (768 + 768), and the head's 768 x 2 + 2
    assert.are.equal(12 * 2 * 8 * (768 + 768) + 768 * 2 + 2, r.model.trainable_params)
    local all = helper.estimate("bert-base-cased", "--set", "finetune=lora", "--set", "lora_targets=all-linear",
      "--set", "seq_len=128")
    -- all-linear: query, key, value and every dense (attention output, MLP, pooler); not the classifier
    local h, f = 768, 3072
    local per_layer = 8 * (4 * (h + h) + (h + f) + (f + h))
    assert.are.equal(12 * per_layer + 8 * (h + h) + h * 2 + 2, all.model.trainable_params)
  end)

  it("costs far less than a full fine-tune and agrees with evaluating every layer", function()
    local full = helper.estimate("llama2-7b", "--set", "seq_len=256")
    local adapted = lora()
    assert.is_true(adapted.per_gpu.peak_allocated_bytes < full.per_gpu.peak_allocated_bytes / 3)
    local model = helper.model("llama2-7b", 5)
    helper.assert_folds_agree(model, {
      { finetune = "lora", precision = "bf16", attention = "eager" },
      { finetune = "lora", precision = "amp-bf16", checkpointing = "full", lora_dropout = 0.1 },
      { finetune = "lora", lora_targets = "all-linear", checkpointing = "every-2", precision = "bf16" },
      { finetune = "lora", framework = "deepspeed", zero = 3, dp = 4, precision = "mixed-bf16", checkpointing = "full" },
      { finetune = "lora", framework = "fsdp", dp = 4, precision = "mixed-bf16", modules_to_save = "lm_head" },
    })
  end)

  local bad = {
    { { "gpt2", "--set", "finetune=lora", "--set", "lora_targets=q_proj" }, "lora_targets: the model has no linear module" },
    { { "llama2-7b", "--set", "finetune=lora", "--set", "lora_targets=qproj" }, "lora_targets: no linear module of the model is called qproj" },
    { { "llama2-7b", "--set", "finetune=lora", "--set", "lora_rank=0" }, "lora_rank: must be between 1" },
    { { "llama2-7b", "--set", "finetune=lora", "--set", "framework=megatron" }, "finetune: LoRA runs as PEFT does" },
    { { "llama2-7b", "--set", "finetune=lora", "--set", "modules_to_save=wpe" }, "modules_to_save: the model has no module" },
    { { "gpt2", "--set", "seq_len=512", "--set", "finetune=lora", "--set", "modules_to_save=embed_tokens" },
      "modules_to_save: this model's head is tied to its embeddings" },
    { { "llama2-7b", "--set", "finetune=qlora", "--set", "modules_to_save=q_proj" },
      "modules_to_save: a module QLoRA stores quantized cannot be trained" },
  }
  for _, case in ipairs(bad) do
    local args = { table.unpack(case[1]) }
    it("rejects " .. table.concat(args, " "), helper.rejection(args, case[2]))
  end
end)

describe("freezing layers", function()
  local function freeze(n, ...)
    return helper.estimate("llama2-7b", "--set", "seq_len=256", "--set", "finetune=freeze",
      "--set", "trainable_layers=" .. n, ...)
  end

  it("trains the last layers, the final norm and the head", function()
    local h, f = 4096, 11008
    local layer = 4 * h * h + 3 * h * f + 2 * h
    local r = freeze(2)
    assert.are.equal(2 * layer + h + 32000 * h, r.model.trainable_params)
    assert.are.equal(2 * r.model.trainable_params, r.per_gpu.grads_bytes) -- bf16 gradients of what is trained
    local more = freeze(0, "--set", "modules_to_save=embed_tokens")
    assert.are.equal(h + 2 * 32000 * h, more.model.trainable_params)
  end)

  it("refuses reentrant checkpoints behind frozen embeddings, which give the trained layers no gradients", function()
    local _, err, code = helper.run("estimate", "llama2-7b", "--set", "finetune=freeze", "--set", "trainable_layers=2",
      "--set", "checkpointing=full")
    assert.are.equal(1, code)
    assert.truthy(err:find("checkpointing: reentrant checkpoints (use_reentrant = true) behind frozen embeddings", 1,
      true), err)
    -- non-reentrant ones, or trained embeddings, are fine
    assert.is_true(freeze(2, "--set", "checkpointing=full", "--set", "use_reentrant=false").per_gpu.peak_allocated_bytes > 0)
    assert.is_true(freeze(2, "--set", "checkpointing=full", "--set", "modules_to_save=embed_tokens").per_gpu
      .peak_allocated_bytes > 0)
  end)

  it("keeps activations only where gradients flow: each trained layer adds the same", function()
    local one, two, three = freeze(1), freeze(2), freeze(3)
    local step = two.per_gpu.activations_bytes - one.per_gpu.activations_bytes
    assert.is_true(step > 0)
    assert.are.equal(step, three.per_gpu.activations_bytes - two.per_gpu.activations_bytes)
  end)

  it("agrees with evaluating every layer, sharded too", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 6), {
      { finetune = "freeze", trainable_layers = 2, precision = "bf16" },
      { finetune = "freeze", trainable_layers = 3, checkpointing = "every-2", precision = "amp-bf16",
        use_reentrant = false },
      { finetune = "freeze", trainable_layers = 3, checkpointing = "every-2", modules_to_save = "embed_tokens" },
      { finetune = "freeze", trainable_layers = 2, framework = "deepspeed", zero = 3, dp = 4, precision = "mixed-bf16" },
      { finetune = "freeze", trainable_layers = 4, framework = "fsdp", dp = 4, precision = "mixed-bf16",
        checkpointing = "full", use_reentrant = false },
      { finetune = "freeze", trainable_layers = 2, framework = "fsdp", fsdp = "shard_grad_op", dp = 4,
        precision = "mixed-bf16" },
    })
  end)

  it("rejects more trained layers than the model has", helper.rejection(
    { "llama2-7b", "--set", "finetune=freeze", "--set", "trainable_layers=33" }, "trainable_layers: more than"))
  it("rejects trainable_layers without freezing", helper.rejection(
    { "llama2-7b", "--set", "trainable_layers=3" }, "trainable_layers: needs finetune = freeze"))
end)

describe("prompt tuning", function()
  it("trains the virtual tokens' table and runs the model on them too", function()
    local r = helper.estimate("llama2-7b", "--set", "finetune=prompt", "--set", "num_virtual_tokens=20",
      "--set", "seq_len=256", "--set", "precision=bf16")
    assert.are.equal(20 * 4096, r.model.trainable_params)
    assert.are.equal(4 * 20 * 4096, r.per_gpu.grads_bytes) -- fp32, as PEFT keeps it beside a bf16 model
    -- the same frozen model on 256 + 20 tokens, less the table's gradient
    local longer = helper.estimate("llama2-7b", "--set", "finetune=prompt", "--set", "num_virtual_tokens=40",
      "--set", "seq_len=236", "--set", "precision=bf16")
    assert.is_true(math.abs(longer.per_gpu.activations_bytes / r.per_gpu.activations_bytes - 1) < 0.01)
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { finetune = "prompt", num_virtual_tokens = 16, precision = "bf16" },
      { finetune = "prompt", num_virtual_tokens = 16, precision = "amp-bf16", checkpointing = "full" },
      { finetune = "prompt", num_virtual_tokens = 8, framework = "deepspeed", zero = 3, dp = 2,
        precision = "mixed-bf16" },
    })
  end)

  it("rejects prompt tuning without virtual tokens", helper.rejection(
    { "llama2-7b", "--set", "finetune=prompt" }, "num_virtual_tokens: prompt tuning needs at least one"))
  it("rejects virtual tokens without prompt tuning", helper.rejection(
    { "llama2-7b", "--set", "num_virtual_tokens=8" }, "num_virtual_tokens: needs finetune = prompt or prefix"))
end)

describe("prefix tuning", function()
  local function prefix(model, ...)
    return helper.estimate(model, "--set", "finetune=prefix", "--set", "attention=eager", "--set", "precision=bf16",
      "--set", "micro_batch=1", "--set", "seq_len=256", ...)
  end

  it("trains a key and a value per layer and virtual token, cut to the key/value heads", function()
    -- PrefixEncoder: num_virtual_tokens x (num_layers * 2 * token_dim), fp32
    local mha = prefix("llama2-7b", "--set", "num_virtual_tokens=20")
    assert.are.equal(20 * 32 * 2 * 4096, mha.model.trainable_params)
    assert.are.equal(4 * 20 * 32 * 2 * 4096, mha.per_gpu.grads_bytes)
    -- Llama-3-8B: 8 of 32 heads carry keys and values (PEFT #1901)
    local gqa = prefix("llama3-8b", "--set", "num_virtual_tokens=20")
    assert.are.equal(20 * 32 * 2 * 8 * 128, gqa.model.trainable_params)
  end)

  it("keeps every layer's joined keys and values in the cache the outputs hold", function()
    -- with grouped-query attention eager attention saves the repeated
    -- copies, so the cache's own tensors are what keeping the outputs adds
    -- beside the bf16 logits: 2 x 32 layers x 8 heads x (256 + 20) x 128
    local kept = prefix("llama3-8b", "--set", "num_virtual_tokens=20", "--set", "keep_logits=true")
    local dropped = prefix("llama3-8b", "--set", "num_virtual_tokens=20", "--set", "keep_logits=false")
    local cache = 2 * 32 * 8 * (256 + 20) * 128 * 2
    local logits = 256 * 128256 * 2
    assert.are.equal(cache + logits, kept.per_gpu.activations_bytes - dropped.per_gpu.activations_bytes)
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama3-8b", 4), {
      { finetune = "prefix", num_virtual_tokens = 16, precision = "bf16", attention = "eager" },
      { finetune = "prefix", num_virtual_tokens = 8, precision = "amp-bf16", attention = "flash" },
      { finetune = "prefix", num_virtual_tokens = 7, precision = "bf16", attention = "sdpa" },
      { finetune = "prefix", num_virtual_tokens = 8, framework = "deepspeed", zero = 3, dp = 2,
        precision = "mixed-bf16", attention = "eager" },
    })
  end)

  it("rejects prefix tuning without virtual tokens", helper.rejection(
    { "llama2-7b", "--set", "finetune=prefix", "--set", "attention=eager" },
    "num_virtual_tokens: prefix tuning needs at least one"))
  it("rejects gradient checkpointing, as PEFT does", helper.rejection(
    { "llama2-7b", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8", "--set", "attention=eager",
      "--set", "checkpointing=full" }, "checkpointing: PEFT's prefix tuning does not work with gradient checkpointing"))
  it("gives SDPA the 4-D mask, which its memory-efficient kernel keeps per layer, padded where misaligned", function()
    -- keys outnumber queries behind the prefix, so transformers keeps the
    -- mask and SDPA runs its memory-efficient kernel; preprocess_mask pads
    -- rows whose stride is not a multiple of 8 elements (a copy each layer
    -- keeps)
    local function pads(tokens, precision)
      local r = helper.estimate("llama2-7b", "--set", "finetune=prefix", "--set", "num_virtual_tokens=" .. tokens,
        "--set", "precision=" .. precision, "--set", "micro_batch=2", "--set", "seq_len=512", "--timeline")
      local n, bytes = 0, 0
      for _, e in ipairs(r.timeline) do
        if e.phase == "forward" and (e.op == "attention.mask_pad" or e.op == "attention.mask_cast") and e.delta > 0 then
          n, bytes = n + 1, bytes + e.delta
        end
      end
      return n, bytes
    end
    -- bf16: LlamaModel builds s + 1 columns past the prefix's (no attention
    -- mask: target_length = past_seen_tokens + s + 1), so the keys' slice
    -- has a row stride of 512 + 8 + 1 with 8 virtual tokens: padded to
    -- 520 + 8 columns; with 7 the stride is 520 and nothing is copied
    assert.are.same({ 32, 32 * 2 * 512 * 528 * 2 }, { pads(8, "bf16") })
    assert.are.same({ 0, 0 }, { pads(7, "bf16") })
    -- amp-bf16: autocast casts the keys' columns of the fp32 mask to a
    -- contiguous bf16 copy in every layer: 520 columns need no padding
    assert.are.same({ 32, 32 * 2 * 512 * 520 * 2 }, { pads(8, "amp-bf16") })
  end)
  it("rejects Megatron's tensor parallelism", helper.rejection(
    { "llama2-7b", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8", "--set", "attention=eager",
      "--set", "framework=megatron", "--set", "tp=2" }, "finetune: prefix tuning runs as PEFT does, without tp, pp or cp"))
  it("rejects an encoder with a classifier", helper.rejection(
    { "bert-large-uncased", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8", "--set", "attention=eager" },
    "finetune: prefix tuning is modelled for causal language models"))
end)

describe("full fine-tuning, LoRA and QLoRA side by side", function()
  -- the three example recipes on Llama-2-7B at 4 x 512 tokens, checkpointed
  local function run(recipe, ...)
    return helper.estimate("llama2-7b", "--recipe", helper.root .. "/scripts/recipes/" .. recipe .. ".lua",
      "--set", "micro_batch=4", "--set", "seq_len=512", "--set", "checkpointing=full", "--gpu", "rtx4090", ...)
  end

  it("fits a 24 GB card with LoRA and QLoRA, not in full", function()
    local full, lora, qlora = run("full-bf16-adamw"), run("lora-q-v-checkpointed"), run("qlora-all-linear-paged")
    assert.is_false(full.fits)
    assert.is_true(lora.fits)
    assert.is_true(qlora.fits)
    -- the same activations (the frozen base still passes input gradients
    -- back through every layer; without accelerate's fp32 copy of the kept
    -- logits, which the full recipe's plain loop does not make), different
    -- model states
    local plain = run("lora-q-v-checkpointed", "--set", "outputs_fp32=false")
    assert.is_true(math.abs(plain.per_gpu.activations_bytes / full.per_gpu.activations_bytes - 1) < 0.05)
    -- full: 2 + 2 bytes of bf16 weight and gradient, 4 + 8 of fp32 master and Adam
    assert.are.equal(16 * 6738415616, full.per_gpu.params_bytes + full.per_gpu.grads_bytes +
      full.per_gpu.master_bytes + full.per_gpu.optimizer_bytes)
    -- QLoRA's 4-bit base weighs a third of LoRA's bf16 one
    assert.is_true(qlora.per_gpu.params_bytes < lora.per_gpu.params_bytes / 2.5)
  end)

  it("keeps the adapters in the base's dtype with lora_dtype = base (PEFT before 0.12, torchtune)", function()
    local args = { "llama2-7b", "--set", "precision=bf16", "--set", "finetune=lora", "--set", "seq_len=256" }
    local auto = helper.estimate(table.unpack(args))
    local base = helper.estimate("--set", "lora_dtype=base", table.unpack(args))
    -- the same adapters, two bytes each instead of four: parameters, gradients and both Adam states
    local n = auto.model.trainable_params
    assert.are.equal(n, base.model.trainable_params)
    assert.are.equal(auto.per_gpu.params_bytes - 2 * n, base.per_gpu.params_bytes)
    assert.are.equal(auto.per_gpu.optimizer_bytes / 2, base.per_gpu.optimizer_bytes)
    assert.are.equal("base", base.recipe.lora_dtype)
    local torchtune = helper.estimate("--set", "stack=torchtune", table.unpack(args))
    assert.are.equal("base", torchtune.recipe.lora_dtype)
  end)
end)
