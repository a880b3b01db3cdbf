-- Non-reentrant gradient checkpointing (use_reentrant = false,
-- checkpoint_early_stop): torch.utils.checkpoint's saved-tensor hooks. What
-- the engine keeps and reruns is checked tensor by tensor against PyTorch in
-- tests/torch/compare.py (1.13's own checkpoint and 2.x's written out); these
-- are the consequences a user plans with.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")

local function mistral(...)
  return helper.estimate("mistral-7b", "--set", "precision=bf16", "--set", "optimizer=sgd", "--set", "micro_batch=2",
    "--set", "seq_len=1024", "--set", "keep_logits=false", "--set", "checkpointing=full", ...)
end

describe("non-reentrant checkpointing", function()
  it("echoes its keys, early stop following the PyTorch version", function()
    local r = helper.estimate("gpt2", "--set", "seq_len=1024", "--set", "checkpointing=full")
    assert.is_true(r.recipe.use_reentrant)
    assert.is_true(r.recipe.checkpoint_early_stop)
    r = helper.estimate("gpt2", "--set", "seq_len=1024", "--set", "checkpointing=full", "--set", "use_reentrant=false", "--set",
      "torch_version=1.13")
    assert.is_false(r.recipe.use_reentrant)
    assert.is_false(r.recipe.checkpoint_early_stop) -- 1.13's checkpoint has none
    r = helper.estimate("gpt2", "--set", "seq_len=1024", "--set", "checkpointing=full", "--set", "use_reentrant=false", "--set",
      "checkpoint_early_stop=false")
    assert.is_false(r.recipe.checkpoint_early_stop)
  end)

  it("says so in the text report", function()
    local out = helper.run("estimate", "gpt2", "--set", "seq_len=1024", "--set", "checkpointing=full", "--set",
      "use_reentrant=false")
    assert.truthy(out:find("checkpointing full (non-reentrant), ", 1, true), out)
    out = helper.run("estimate", "gpt2", "--set", "seq_len=1024", "--set", "checkpointing=full")
    assert.truthy(out:find("checkpointing full, ", 1, true), out)
  end)

  it("keeps the same activations through the forward: only each chunk's input", function()
    assert.are.equal(mistral().per_gpu.activations_bytes,
      mistral("--set", "use_reentrant=false").per_gpu.activations_bytes)
  end)

  it("lets a layer's output go before the layer's backward", function()
    -- CheckpointFunction.backward holds its rerun's output (the layer's
    -- hidden states, [2, 1024, 4096] in bf16) until the inner backward
    -- returns; the non-reentrant rerun's outputs go as it ends
    local hidden = 2 * 1024 * 4096 * 2
    local reentrant = mistral().per_gpu
    local hooks = mistral("--set", "use_reentrant=false").per_gpu
    assert.are.equal("backward", reentrant.peak_phase)
    assert.are.equal(hidden, reentrant.peak_allocated_bytes - hooks.peak_allocated_bytes)
  end)

  it("stops the rerun early where it saves nothing more", function()
    -- a LLaMA chunk's last save is down_proj's input: with early stop the
    -- rerun never makes down_proj's output nor the residual sum after it,
    -- which without it are both alive as the rerun ends (its peak): two
    -- [1, 1024, 4096] bf16 tensors
    local function rerun_peak(early_stop)
      return helper.phase_high_water(helper.model("llama2-7b", 4), {
        precision = "bf16", optimizer = "none", micro_batch = 1, seq_len = 1024, checkpointing = "every-2",
        use_reentrant = false, checkpoint_early_stop = early_stop, keep_logits = false,
      }, "recompute")
    end
    assert.are.equal(2 * 1024 * 4096 * 2, rerun_peak(false) - rerun_peak(true))
  end)

  it("stops after what an autograd.Function computes, before what a native op would", function()
    -- the rerun's last new tensor: bf16's down_proj (a native mm) saves its
    -- input before computing, so the stop comes before its output;
    -- Transformer Engine's FP8 Linear packs after its forward, so its output
    -- is made ([1, 1024, 4096] bf16) and the residual sum is not
    local function last_made(precision)
      local r = vramplan.estimate(helper.model("llama2-7b", 2), {
        precision = precision, optimizer = "none", micro_batch = 1, seq_len = 1024, checkpointing = "every-2",
        use_reentrant = false, keep_logits = false,
      }, nil, { timeline = true, fold = false })
      local last
      for _, e in ipairs(r.timeline) do
        if e.phase == "recompute" and e.delta > 0 then last = e end
      end
      return last
    end
    assert.are.equal("mlp.gate_mul", last_made("bf16").op)
    local fp8 = last_made("fp8")
    assert.are.equal("mlp.down_proj", fp8.op)
    assert.are.equal(1024 * 4096 * 2, fp8.delta)
  end)

  describe("inside FSDP units", function()
    local function fsdp(reentrant)
      return vramplan.estimate(helper.model("llama2-7b", 4), {
        framework = "fsdp", dp = 8, precision = "mixed-bf16", checkpointing = "full", micro_batch = 2,
        seq_len = 4096, use_reentrant = reentrant,
      }, nil, { timeline = true, fold = false })
    end

    it("reruns a layer on the parameters its pre-backward hook gathered", function()
      -- FSDP(CheckpointWrapper(layer)): the rerun runs inside the unit,
      -- whose hooks skip a recomputed forward; the reentrant call of HF's
      -- loop reruns the unit itself, gathering and resharding it
      local function gathers_in_rerun(r)
        local n = 0
        for _, e in ipairs(r.timeline) do
          if e.phase == "recompute" and e.op:find("^all_gather") and e.delta ~= 0 then n = n + 1 end
        end
        return n
      end
      assert.are.equal(0, gathers_in_rerun(fsdp(false)))
      assert.is_true(gathers_in_rerun(fsdp(true)) > 0)
    end)

    it("lets a layer's output go before its backward, as on one GPU", function()
      local function peak(reentrant)
        return helper.estimate("llama2-7b", "--set", "framework=fsdp", "--set", "dp=8", "--set", "precision=mixed-bf16",
          "--set", "checkpointing=full", "--set", "micro_batch=2", "--set", "seq_len=4096", "--set",
          "use_reentrant=" .. tostring(reentrant)).per_gpu
      end
      local reentrant, hooks = peak(true), peak(false)
      assert.are.equal("backward", reentrant.peak_phase)
      assert.are.equal(2 * 4096 * 4096 * 2, reentrant.peak_allocated_bytes - hooks.peak_allocated_bytes)
    end)
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { precision = "bf16", checkpointing = "full", use_reentrant = false },
      { precision = "amp-bf16", checkpointing = "every-2", use_reentrant = false, checkpoint_early_stop = false },
      { finetune = "lora", lora_targets = "all-linear", lora_dropout = 0.1, checkpointing = "full",
        use_reentrant = false, precision = "bf16" },
      { finetune = "qlora", checkpointing = "full", use_reentrant = false, precision = "bf16" },
      { precision = "bf16", checkpointing = "full", use_reentrant = false, pp = 2, num_microbatches = 4 },
      { precision = "amp-bf16", checkpointing = "every-2", use_reentrant = false, grad_accum = 2,
        keep_logits = false },
      { framework = "deepspeed", zero = 2, dp = 2, precision = "mixed-bf16", checkpointing = "full",
        use_reentrant = false },
      { framework = "deepspeed", zero = 3, dp = 2, precision = "mixed-bf16", checkpointing = "every-2",
        use_reentrant = false },
      { framework = "deepspeed", zero = 3, dp = 2, precision = "mixed-bf16", checkpointing = "full",
        use_reentrant = false, finetune = "lora" },
      { framework = "fsdp", dp = 4, precision = "mixed-bf16", checkpointing = "full", use_reentrant = false },
      { framework = "fsdp", dp = 4, precision = "bf16", checkpointing = "full", use_reentrant = false,
        finetune = "qlora" },
      { framework = "fsdp", fsdp = "shard_grad_op", dp = 4, precision = "bf16", checkpointing = "full",
        use_reentrant = false, finetune = "lora" },
      { framework = "fsdp", fsdp = "hybrid_shard", fsdp_shard_size = 2, dp = 4, precision = "mixed-bf16",
        checkpointing = "full", use_reentrant = false, offload_params = "cpu" },
    })
    helper.assert_folds_agree(helper.model("t5-large", 6), {
      { precision = "bf16", checkpointing = "full", use_reentrant = false, target_len = 64 },
      { precision = "amp-bf16", checkpointing = "every-2", use_reentrant = false, finetune = "lora",
        lora_targets = "all-linear", target_len = 64 },
    })
    helper.assert_folds_agree(helper.model("mixtral-8x7b", 4), {
      { precision = "bf16", checkpointing = "every-2", use_reentrant = false, optimizer = "none" },
    })
  end)

  it("rejects early stop for reentrant checkpoints", helper.rejection(
    { "gpt2", "--set", "checkpointing=full", "--set", "checkpoint_early_stop=true" },
    "checkpoint_early_stop: applies to non-reentrant checkpointing"))
  it("rejects Megatron's selective recompute", helper.rejection(
    { "llama2-7b", "--set", "checkpointing=selective", "--set", "use_reentrant=false" },
    "use_reentrant: selective recompute is Megatron's own"))
  it("rejects megatron", helper.rejection(
    { "llama2-7b", "--set", "framework=megatron", "--set", "checkpointing=full", "--set", "use_reentrant=false" },
    "use_reentrant: false is modelled for transformers' gradient checkpointing"))
  describe("under ZeRO-3", function()
    -- DeepSpeed's module hooks fire inside the rerun (layout.c,
    -- rerun_gather): a layer of the call whose backward has not begun is
    -- gathered by the rerun and stays gathered, its storage held by the
    -- rerun's saved tensors, until its own backward, which then gathers
    -- nothing more and releases it. Llama-2-7B's layer in bf16, by its
    -- shapes: q, k, v, o 4096 x 4096; gate, up, down 4096 x 11008; two
    -- RMSNorm weights of 4096; nothing prefetched, kept or persistent.
    local layer = 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096)
    local function gathers(checkpointing)
      local r = vramplan.estimate(helper.model("llama2-7b", 4), { framework = "deepspeed", zero = 3, dp = 2,
        precision = "mixed-bf16", checkpointing = checkpointing, use_reentrant = false, seq_len = 64,
        stage3_prefetch_bucket_size = 0, stage3_max_reuse_distance = 0, stage3_param_persistence_threshold = 0 },
        nil, { timeline = true, fold = false })
      local seen = {}
      for _, e in ipairs(r.timeline) do
        if e.op and e.op:find("^all_gather") and e.layer and e.phase ~= "forward" then
          seen[#seen + 1] = string.format("%s %d %d", e.phase, e.layer, e.delta)
        end
      end
      return seen
    end

    it("gathers the earlier layers of a call in its rerun, until their backward (every-2)", function()
      assert.are.same({ "backward 3 " .. layer, "recompute 2 " .. layer, "backward 3 " .. -layer,
        "backward 2 " .. -layer, "backward 1 " .. layer, "recompute 0 " .. layer, "backward 1 " .. -layer,
        "backward 0 " .. -layer }, gathers("every-2"))
    end)

    it("gathers nothing more where the layer being unpacked is the call (full)", function()
      local want = {}
      for l = 3, 0, -1 do
        want[#want + 1] = "backward " .. l .. " " .. layer
        want[#want + 1] = "backward " .. l .. " " .. -layer
      end
      assert.are.same(want, gathers("full"))
    end)
  end)

  it("rejects FSDP with several layers a call", function()
    helper.rejection({ "llama2-7b", "--set", "framework=fsdp", "--set", "dp=2", "--set", "use_reentrant=false",
      "--set", "checkpointing=every-2" }, "use_reentrant: false with FSDP is modelled for checkpointing = full")()
  end)

  it("packs the call's tensors under save_on_cpu as the reentrant call does (PyTorch 2.x)", function()
    -- 2.x keeps the positional tensors as saved variables, which save_on_cpu
    -- packs: per layer the hidden states (512 x 4096 bf16, 4 MiB) and
    -- position_ids and cache_position (512 int64 each), the (cos, sin)
    -- tuple staying as it is; the holders inside are never packed
    local function host(layers, version)
      return vramplan.estimate(helper.model("llama2-7b", layers), {
        precision = "bf16", micro_batch = 1, seq_len = 512, checkpointing = "full", offload_activations = true,
        use_reentrant = false, torch_version = version,
      }).host_bytes
    end
    local layer = 4 * 2 ^ 20 + 2 * 4096
    assert.are.equal(2 * layer, host(4, "2.x") - host(2, "2.x"))
    -- 1.13 keeps them in closures: nothing a layer packs
    assert.are.equal(0, host(4, "1.13") - host(2, "1.13"))
  end)

  it("keeps T5's first cross-attention zero bias, and its gradient, with the graph", function()
    -- T5Attention makes the zeros require grad under gradient checkpointing;
    -- a non-reentrant forward runs with grad, so the graph keeps the leaf
    -- ([1, heads, target, source]) from the forward on, not just in a rerun
    local function forward_activations(reentrant)
      return helper.estimate("t5-large", "--set", "checkpointing=full", "--set", "seq_len=512", "--set",
        "target_len=128", "--set", "precision=bf16", "--set", "use_reentrant=" .. tostring(reentrant)
      ).per_gpu.activations_bytes
    end
    assert.are.equal(16 * 128 * 512 * 2, forward_activations(false) - forward_activations(true))
  end)

  it("rejects a value that is not a boolean", helper.rejection(
    { "gpt2", "--set", "use_reentrant=no" }, "use_reentrant: must be true or false"))
end)
