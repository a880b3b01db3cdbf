-- Data parallelism: the ZeRO paper's per-device model states, DeepSpeed's
-- estimator and where it over-counts, the layouts' errors, offload.
local helper = require("tests.lua.helper")
local function states(r)
  local p = r.per_gpu
  return p.params_bytes + p.grads_bytes + p.master_bytes + p.optimizer_bytes
end

-- Model states per device of a real model under a DeepSpeed stage. The
-- ZeRO paper partitions every parameter: DeepSpeed's persistent small
-- parameters (stage3_param_persistence_threshold) are left out here.
local function zero(stage, dp, ...)
  return helper.estimate("llama2-7b", "--set", "framework=deepspeed", "--set", "zero=" .. stage, "--set",
    "dp=" .. dp, "--set", "precision=mixed-fp16", "--set", "optimizer=adam", "--set", "seq_len=256", "--set",
    "stage3_param_persistence_threshold=0", ...)
end

local stages = { ["baseline DP"] = 0, Pos = 1, ["Pos+g"] = 2, ["Pos+g+p"] = 3 }

describe("the ZeRO paper's model states (Rajbhandari et al. 2020)", function()
  for _, ref in ipairs(helper.read_json("tests/reference/zero.json")) do
    if ref.id:match("^zero") then
      it(string.format("%s: %s of a %.4g-parameter model on %d GPUs", ref.id, ref.value_raw, ref.params, ref.dp),
        function()
          -- vramplan's bytes per parameter for this stage and data-parallel
          -- degree, from a real model, carried to the paper's generic model
          local r = zero(stages[ref.stage], ref.dp)
          local per_param = states(r) / r.model.params
          local expected = ref.value_bytes
          -- the paper prints three significant figures
          assert.is_true(math.abs(per_param * ref.params - expected) / expected < 0.005,
            string.format("%.4g bytes vs the paper's %.4g", per_param * ref.params, expected))
        end)
    end
  end

  it("shards nothing but the states at stage 1, also gradients at 2, also parameters at 3", function()
    local n, dp = 6738415616, 8
    local z1, z2, z3 = zero(1, dp), zero(2, dp), zero(3, dp)
    assert.are.equal(2 * n, z1.per_gpu.params_bytes)
    assert.are.equal(2 * n, z1.per_gpu.grads_bytes)
    assert.are.equal(2 * n, z2.per_gpu.params_bytes)
    assert.is_true(z2.per_gpu.grads_bytes < 2 * n / dp + 2 * 64 * 8) -- per-tensor padding only
    assert.is_true(z3.per_gpu.params_bytes < 2 * n / dp + 2 * 64 * 8)
  end)
end)

describe("DeepSpeed's estimator", function()
  -- estimate_zero2_model_states_mem_needs: 4P + 16P/N without offload, 2P
  -- with the optimizer offloaded. It counts the fp16 gradients whole (2P),
  -- though stage 2 keeps only their partition (2P/N), and it counts the fp32
  -- gradient partition the step makes (4P/N) as a model state, where
  -- vramplan puts it on the optimizer step's timeline: vramplan's resident
  -- model states are lower by exactly 2P - 2P/N + 4P/N. With the optimizer
  -- offloaded both keep the 2P of fp16 parameters on the GPU.
  for _, ref in ipairs(helper.read_json("tests/reference/zero.json")) do
    if ref.id:match("^ds%-est") and ref.stage == 2 then
      it(ref.id .. ": " .. ref.value_raw .. " (" .. ref.offload .. ")", function()
        local p, n = ref.params, ref.dp
        local offload = ref.offload ~= "none"
        local ds = offload and 2 * p or 4 * p + 16 * p / n
        assert.is_true(math.abs(ds - ref.value_bytes) / ref.value_bytes < 0.002) -- the formula, as DeepSpeed prints it
        local r = zero(2, n, "--set", "offload_optimizer=" .. (offload and "cpu" or "none"))
        local per_param = states(r) / r.model.params
        local expected_over = offload and 0 or 2 - 2 / n + 4 / n
        assert.is_true(math.abs(ds / p - per_param - expected_over) < 1e-6,
          string.format("DeepSpeed %.4f vs vramplan %.4f bytes per parameter", ds / p, per_param))
      end)
    end
  end
end)

describe("DeepSpeed's ZeRO-3 estimator on T5 models", function()
  -- estimate_zero3_model_states_mem_needs: 4L + 18P/N without offload,
  -- 4L + 2P/N with the optimizer offloaded, 4L with the parameters too,
  -- where P counts what AutoModel loads (T5Model: no head; an untied head
  -- is left out) and L is the largest module's parameters (T5's shared
  -- embedding, vocab x d_model). vramplan's resident states are 16P/N (fp16
  -- parameters and gradients, fp32 master weights, momentum and variance,
  -- all partitioned), 2P/N and 0: DeepSpeed adds 2P/N more where nothing
  -- is offloaded, and 4L (the largest layer gathered, its parameters and
  -- gradients in fp16) that vramplan puts on the step's timeline where the
  -- gather happens instead of among the model states.
  local settings = {
    none = { "none", "none" }, optimizer = { "cpu", "none" }, ["optimizer+params"] = { "cpu", "cpu" },
  }
  for _, ref in ipairs(helper.read_json("tests/reference/zero.json")) do
    if ref.id:match("^ds%-est") and ref.stage == 3 then
      it(string.format("%s: %s for %s on %d GPUs (offload: %s)", ref.id, ref.value_raw, ref.model, ref.dp, ref.offload),
        function()
          local set = settings[ref.offload]
          local r = helper.estimate(ref.model, "--set", "framework=deepspeed", "--set", "zero=3", "--set",
            "dp=" .. ref.dp, "--set", "precision=mixed-fp16", "--set", "optimizer=adam", "--set", "seq_len=128",
            "--set", "offload_optimizer=" .. set[1], "--set", "offload_params=" .. set[2])
          -- AutoModel's count is the tied model's (T5Model has no head); the
          -- embedding is what untying the head adds
          local tied = helper.estimate(ref.model, "--set", "seq_len=128", "--set", "tie_embeddings=true")
          local untied = helper.estimate(ref.model, "--set", "seq_len=128", "--set", "tie_embeddings=false")
          local p, embedding = tied.model.params, untied.model.params - tied.model.params
          local n = ref.dp
          local extra = ref.offload == "none" and 2 * p / n or 0
          local ds = 4 * embedding + (ref.offload == "none" and 18 * p / n or ref.offload == "optimizer" and 2 * p / n or 0)
          local tolerance = ref.printed_unit_bytes
          -- DeepSpeed's formula on vramplan's counts reproduces the printed figure
          assert.is_true(math.abs(ds - ref.value_bytes) <= tolerance,
            string.format("formula %.0f vs printed %.0f", ds, ref.value_bytes))
          -- vramplan's states, carried to AutoModel's count, plus the two
          -- known differences, reproduce it too
          local per_param = states(r) / r.model.params
          local carried = per_param * p + 4 * embedding + extra
          assert.is_true(math.abs(carried - ref.value_bytes) <= tolerance + 1e-3 * ref.value_bytes,
            string.format("vramplan %.0f + differences vs DeepSpeed %.0f", carried, ref.value_bytes))
        end)
    end
  end
end)

describe("DeepSpeed's reduce buckets", function()
  local function comm(...)
    return helper.estimate("llama2-7b", "--set", "framework=deepspeed", "--set", "dp=8", "--set", "precision=mixed-bf16",
      "--set", "seq_len=512", ...).per_gpu.comm_bytes
  end

  it("keeps ZeRO-3's IPG bucket from the optimizer's setup on, stage 1 and 2's only in backward", function()
    -- stage3.py: __ipg_bucket_flat_buffer, reduce_bucket_size elements of the
    -- 16-bit gradients, made in _setup_for_real_optimizer and never freed;
    -- stage_1_and_2.py makes its ipg_buffer in backward
    assert.are.equal(2 * 5e8, comm("--set", "zero=3"))
    assert.are.equal(2 * 1e6, comm("--set", "zero=3", "--set", "reduce_bucket_size=1e6"))
    assert.are.equal(0, comm("--set", "zero=3", "--set", "optimizer=none"))
    assert.are.equal(0, comm("--set", "zero=2"))
  end)
end)

describe("DeepSpeed ZeRO-3's parameter coordinator", function()
  -- partitioned_param_coordinator.py, once the step's trace is recorded:
  -- after a module runs, its gathered weights are released unless a module
  -- within stage3_max_reuse_distance elements of the trace ahead uses them
  -- again. In forward the next use of a weight is its own backward, after
  -- every module behind it twice (forward, then backward in reverse): the
  -- last modules stay gathered into backward, where the peak is.
  local function peak(reuse, ...)
    return helper.estimate("llama2-7b", "--set", "framework=deepspeed", "--set", "zero=3", "--set", "dp=8", "--set",
      "precision=mixed-bf16", "--set", "seq_len=2048", "--set", "stage3_max_reuse_distance=" .. reuse, ...)
      .per_gpu.peak_allocated_bytes
  end

  it("keeps the weights used again within the reuse distance, as DeepSpeed's trace scan decides", function()
    -- LLaMA-2-7B's modules in forward order: q, k, v, o of 4096 x 4096, and
    -- up, gate, down of 4096 x 11008, in 32 layers; then the final norm and
    -- the untied head (32000 x 4096). The norms (4096) are persistent: they
    -- count toward distances but are never released.
    local h, f, vocab = 4096, 11008, 32000
    local modules = {}
    for _ = 1, 32 do
      modules[#modules + 1] = { h } -- input_layernorm
      for _ = 1, 4 do modules[#modules + 1] = { h * h, layer = true } end
      modules[#modules + 1] = { h } -- post_attention_layernorm
      for _ = 1, 3 do modules[#modules + 1] = { h * f, layer = true } end
    end
    modules[#modules + 1] = { h }
    modules[#modules + 1] = { vocab * h }
    local function kept_elements(reuse)
      local behind, kept = 0, 0
      for i = #modules, 1, -1 do
        if modules[i].layer and 2 * behind < reuse then kept = kept + modules[i][1] end
        behind = behind + modules[i][1]
      end
      return kept
    end
    -- bf16 weights; the peak's moment may move by a norm's gradient
    -- (480 KiB), far less than one module (32 MiB)
    for _, reuse in ipairs({ 1e9, 2e9 }) do
      local extra = peak(reuse) - peak(0)
      assert.is_true(math.abs(extra - 2 * kept_elements(reuse)) < 2 ^ 20,
        string.format("%d bytes kept, DeepSpeed's rule %d", extra, 2 * kept_elements(reuse)))
    end
  end)

  it("folds the layers beyond the reuse distance, as evaluating every layer finds", function()
    -- 16 layers of Llama-2-7B: the last 6 evaluated one by one, the rest folded
    helper.assert_folds_agree(helper.model("llama2-7b", 16), {
      { framework = "deepspeed", zero = 3, dp = 8, precision = "mixed-bf16" },
      { framework = "deepspeed", zero = 3, dp = 8, precision = "mixed-bf16", checkpointing = "full" },
      { framework = "deepspeed", zero = 3, dp = 8, precision = "mixed-bf16", checkpointing = "every-3" },
      { framework = "deepspeed", zero = 3, dp = 4, precision = "mixed-bf16", finetune = "lora",
        stage3_max_reuse_distance = 5e8 },
    })
  end)

  it("stops prefetching at stage3_max_live_parameters gathered", function()
    -- the weights backward prefetches: none once the kept weights (370M
    -- elements at the default reuse distance) exceed the cap
    local function prefetched(max_live)
      local r = helper.estimate("llama2-7b", "--set", "framework=deepspeed", "--set", "zero=3", "--set", "dp=8",
        "--set", "seq_len=256", "--set", "stage3_max_live_parameters=" .. max_live, "--timeline")
      local total = 0
      for _, e in ipairs(r.timeline) do
        if e.phase == "backward" and e.op == "all_gather.prefetch" then total = total + e.delta end
      end
      return total
    end
    assert.is_true(prefetched(1e9) > 0)
    assert.are.equal(0, prefetched(1e8))
  end)
end)

describe("offload", function()
  it("keeps fp32 master weights, Adam states and gradients of the partition in host memory", function()
    local r = zero(2, 8, "--set", "offload_optimizer=cpu")
    local n = r.model.params
    assert.are.equal(0, r.per_gpu.master_bytes + r.per_gpu.optimizer_bytes)
    -- 4 (master) + 8 (Adam) + 4 (fp32 gradient partition) bytes per parameter, per rank
    assert.is_true(math.abs(r.host.cpu_bytes_per_rank - 16 * n / 8) < 16 * 1024)
    assert.are.equal(r.host.cpu_bytes_per_rank * 8, r.host.cpu_bytes_per_node)
  end)

  it("moves ZeRO-3 parameter shards to NVMe with offload_params", function()
    local r = zero(3, 8, "--set", "offload_params=nvme", "--set", "offload_optimizer=nvme")
    assert.are.equal(0, r.per_gpu.params_bytes)
    assert.is_true(r.host.nvme_bytes_per_rank > 0)
    -- DeepSpeed's persistent parameters (fewer than 1e5 elements: LLaMA's
    -- 65 RMSNorm weights of 4096) stay gathered on the GPU, fp16, whatever
    -- the offload
    local persisted = zero(3, 8, "--set", "offload_params=nvme", "--set", "offload_optimizer=nvme", "--set",
      "stage3_param_persistence_threshold=1e5")
    assert.are.equal((2 * 32 + 1) * 4096 * 2, persisted.per_gpu.params_bytes)
  end)
end)

describe("DDP and FSDP", function()
  it("returns to the resident state with gathered layers whose blocks round (GPT-2 XL's 1600-wide biases)", function()
    -- each gathered block is rounded to 512 bytes: what is released must
    -- mirror what was allocated, prefetch and partial keeps included
    for _, args in ipairs({
      { "--set", "framework=fsdp", "--set", "dp=4", "--set", "checkpointing=every-2" },
      { "--set", "framework=deepspeed", "--set", "zero=3", "--set", "dp=4", "--set", "checkpointing=full",
        "--set", "stage3_max_reuse_distance=2e8" },
    }) do
      local r = helper.estimate("gpt2-xl", "--set", "seq_len=64", table.unpack(args))
      assert.is_true(r.per_gpu.peak_allocated_bytes > 0)
    end
  end)

  it("gives DDP a bucket as large as the gradients", function()
    local r = helper.estimate("llama2-7b", "--set", "dp=8", "--set", "seq_len=256")
    assert.are.equal(r.per_gpu.grads_bytes, r.per_gpu.comm_bytes)
  end)

  it("keeps FSDP's shards in fp32 under MixedPrecision and gathers layers in bf16", function()
    local r = helper.estimate("llama2-7b", "--set", "framework=fsdp", "--set", "dp=8", "--set", "seq_len=256")
    local n = r.model.params
    assert.is_true(math.abs(r.per_gpu.params_bytes - 4 * n / 8) < 4 * 1024)
    assert.are.equal(0, r.per_gpu.master_bytes)
    assert.is_true(math.abs(r.per_gpu.grads_bytes - 4 * n / 8) < 4 * 1024)
    assert.are.equal("full_shard", r.recipe.fsdp == "none" and "full_shard" or r.recipe.fsdp)
  end)

  it("needs more memory for SHARD_GRAD_OP than for FULL_SHARD, and less than NO_SHARD", function()
    local function peak(strategy)
      return helper.estimate("llama2-7b", "--set", "framework=fsdp", "--set", "fsdp=" .. strategy, "--set", "dp=8",
        "--set", "seq_len=256").per_gpu.peak_allocated_bytes
    end
    local full, grad_op, none = peak("full_shard"), peak("shard_grad_op"), peak("no_shard")
    assert.is_true(full < grad_op and grad_op < none)
  end)
end)

describe("layouts that do not hold together", function()
  local function fails(...)
    local _, err, code = helper.run("estimate", "llama2-7b", ...)
    assert.are.equal(1, code, err)
    return err
  end
  it("names the key at fault", function()
    -- alone, zero implies DeepSpeed and fsdp FSDP (docs/configs.md); with another framework they are refused
    assert.truthy(fails("--set", "framework=torch", "--set", "zero=2", "--set", "dp=8")
      :find("--set zero=2: zero: ZeRO stages need framework", 1, true))
    assert.truthy(fails("--set", "framework=torch", "--set", "fsdp=full_shard")
      :find("fsdp: a sharding strategy needs framework", 1, true))
    assert.truthy(fails("--set", "framework=deepspeed", "--set", "zero=2", "--set", "offload_params=cpu")
      :find("offload_params: parameter offload needs zero = 3", 1, true))
    assert.truthy(fails("--set", "framework=deepspeed", "--set", "zero=2", "--set", "offload_optimizer=nvme")
      :find("offload_optimizer: NVMe offload needs zero = 3", 1, true))
    assert.truthy(fails("--set", "framework=deepspeed", "--set", "precision=amp-bf16")
      :find("precision: DeepSpeed runs its own mixed precision", 1, true))
    assert.truthy(fails("--set", "framework=fsdp", "--set", "fsdp=hybrid_shard", "--set", "dp=8",
      "--set", "fsdp_shard_size=3"):find("fsdp_shard_size: HYBRID_SHARD needs a shard group that divides dp", 1, true))
    assert.truthy(fails("--set", "zero=4"):find("zero: must be between 0 and 3", 1, true))
  end)
end)
