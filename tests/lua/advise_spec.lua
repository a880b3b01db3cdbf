-- `vramplan advise`: every fix it prints must estimate as it says, and the
-- hand-found answers of the planning issue must be among them.
local helper = require("tests.lua.helper")
local json = require("dkjson")

-- The issue's third question: Llama-2-13B, 4 x A100 80GB, ZeRO-2, batch 4,
-- 4096 tokens, no checkpointing (short by 144 GiB).
local llama13 = { "llama2-13b", "--gpu", "a100-80gb", "--set", "framework=deepspeed", "--set", "zero=2",
                  "--set", "dp=4", "--set", "micro_batch=4", "--set", "seq_len=4096" }

local function advise(args)
  local out, err, code = helper.run("advise", "--json", table.unpack(args))
  assert(code == 0, err)
  return json.decode(out)
end

local function with_changes(args, changes)
  local full = { table.unpack(args) }
  for k, v in pairs(changes) do
    full[#full + 1] = "--set"
    full[#full + 1] = k .. "=" .. tostring(v)
  end
  return full
end

local function find(fixes, changes)
  for _, f in ipairs(fixes) do
    local same = true
    for k, v in pairs(changes) do if tostring(f.changes[k]) ~= tostring(v) then same = false end end
    for k in pairs(f.changes) do if changes[k] == nil then same = false end end
    if same then return f end
  end
end

describe("vramplan advise", function()
  local o = advise(llama13)
  local fixes = o.advice.fixes

  it("names the binding term: the peak's place and its largest category", function()
    local e = helper.estimate(table.unpack(llama13))
    local b = o.advice.binding
    assert.are.equal(e.per_gpu.peak_phase, b.phase)
    assert.are.equal(e.per_gpu.peak_op, b.op)
    local largest, bytes = nil, -1
    for k, v in pairs(e.per_gpu.peak_breakdown) do if v > bytes then largest, bytes = k, v end end
    assert.are.equal(largest, b.category)
    assert.are.equal(bytes, b.bytes)
  end)

  it("prints fixes that estimate as it says", function()
    assert.is_true(#fixes > 5)
    for _, f in ipairs(fixes) do
      local e = helper.estimate(table.unpack(with_changes(llama13, f.changes)))
      assert.are.equal(e.per_gpu.peak_total_bytes, f.peak_total_bytes, json.encode(f.changes))
      assert.are.equal(e.fits, f.fits, json.encode(f.changes))
      assert.are.equal(e.headroom_bytes, f.headroom_bytes, json.encode(f.changes))
    end
  end)

  it("estimates its fixes on a node as estimate does: more ranks are more GPUs of the node", function()
    -- at dp 1 the job holds one GPU of the DGX; the fix's dp 2 is two GPUs of one node (gpus_per_node 2, NVLink),
    -- as `estimate --gpu dgx-h100 --set dp=2` places them, not two nodes of one GPU
    local args = { "llama3-8b", "--gpu", "dgx-h100", "--set", "framework=fsdp", "--set", "fsdp=full_shard", "--set",
                   "checkpointing=full" }
    local a = advise(args)
    local base = helper.estimate(table.unpack(args))
    local more = 0
    for _, f in ipairs(a.advice.fixes) do
      local e = helper.estimate(table.unpack(with_changes(args, f.changes)))
      assert.are.equal(e.per_gpu.peak_total_bytes, f.peak_total_bytes, json.encode(f.changes))
      assert.is_true(math.abs(e.time.step_s / base.time.step_s - f.step_time_ratio) < 1e-9, json.encode(f.changes))
      if f.changes.dp then more = more + 1 end
    end
    assert.are.equal(1, more) -- the "more GPUs" fix is there
  end)

  it("offers more GPUs that keep a global_batch: the fewest whose dp divides it", function()
    -- on 7400 MiB, 5 ranks fit but do not divide global_batch 12 (estimate refuses them); 6 do (fit's dividing)
    local gpu = helper.write('return gpu { name = "test 7400 MiB", memory_mib = 7400 }', ".lua")
    local args = { "llama3.2-1b", "--gpu", gpu, "--set", "seq_len=512", "--set", "framework=fsdp", "--set",
                   "global_batch=12" }
    local more
    for _, f in ipairs(advise(args).advice.fixes) do if f.changes.dp then more = f end end
    assert.is_table(more, "no more-GPUs fix")
    assert.are.equal(6, more.changes.dp)
    local e = helper.estimate(table.unpack(with_changes(args, more.changes)))
    assert.is_true(e.fits)
    assert.are.equal(e.per_gpu.peak_total_bytes, more.peak_total_bytes)
    assert.is_false(helper.estimate(table.unpack(with_changes(args, { dp = 4, global_batch = 12 }))).fits)
  end)

  it("finds what 14 hand runs found: checkpointing alone is not enough; with ZeRO-3 or optimizer offload it fits", function()
    local alone = find(fixes, { checkpointing = "full" })
    assert.is_false(alone.fits)
    assert.is_true(find(fixes, { checkpointing = "full", zero = 3 }).fits)
    assert.is_true(find(fixes, { checkpointing = "full", offload_optimizer = "cpu" }).fits)
  end)

  it("lists the same-training fixes that fit before those that do not among single changes", function()
    local seen_no = false
    for _, f in ipairs(fixes) do
      if f.changes_training then break end
      local n = 0
      for _ in pairs(f.changes) do n = n + 1 end
      if n == 1 then
        if not f.fits then seen_no = true end
        assert.is_false(f.fits and seen_no, "a fitting single after a failing one: " .. json.encode(f.changes))
      end
    end
  end)

  it("keeps changes to what is trained apart, after the others", function()
    local training = find(fixes, { finetune = "lora" })
    assert.is_true(training.changes_training)
    local after = false
    for _, f in ipairs(fixes) do
      if f.changes_training then after = true else assert.is_false(after, "a same-training fix after a training one") end
    end
  end)

  it("says what will not help: flash attention where SDPA already runs it", function()
    local flash = find(o.advice.no_help, { attention = "flash" })
    assert.is_not_nil(flash)
    assert.truthy(flash.note:find("SDPA", 1, true))
    local e = helper.estimate(table.unpack(with_changes(llama13, { attention = "flash" })))
    assert.is_true(e.per_gpu.peak_total_bytes >= o.per_gpu.peak_total_bytes * 0.995)
  end)

  it("offers today's stacks' techniques where they apply, each estimated as it says", function()
    -- Llama-3.2-3B in bf16 on one 24 GB card, checkpointing full: the peak
    -- is the optimizer step with every gradient alive, so stepping in
    -- backward (torchtune's optimizer_in_bwd) is the one same-training fix
    local args = { "llama3.2-3b", "--gpu", "rtx4090", "--set", "seq_len=1024", "--set", "micro_batch=1",
                   "--set", "precision=bf16", "--set", "checkpointing=full" }
    local whole = advise(args)
    local oib = find(whole.advice.fixes, { optimizer_in_backward = true })
    assert.is_not_nil(oib)
    assert.is_false(whole.fits)
    assert.is_true(oib.fits)
    assert.is_not_true(oib.changes_training)
    local e = helper.estimate(table.unpack(with_changes(args, { optimizer_in_backward = true })))
    assert.are.equal(e.per_gpu.peak_total_bytes, oib.peak_total_bytes)
    -- where the loss binds, the kernels that never hold the fp32 logits
    for _, loss in ipairs({ "chunked", "fused-linear" }) do
      assert.is_not_nil(find(fixes, { loss = loss }) or find(o.advice.no_help, { loss = loss }), loss)
    end
    -- over several ranks of plain DDP, FSDP2 is among the sharding fixes;
    -- with accumulation or several GPUs stepping in backward is not offered
    local ddp = advise({ "llama2-7b", "--gpu", "a100-80gb", "--set", "dp=4", "--set", "grad_accum=2" }).advice
    local all = {}
    for _, f in ipairs(ddp.fixes) do all[#all + 1] = f end
    for _, f in ipairs(ddp.no_help) do all[#all + 1] = f end
    assert.is_not_nil(find(all, { framework = "fsdp2" }))
    assert.is_nil(find(all, { optimizer_in_backward = true }))
  end)

  it("offers loading the model in bf16 where the Trainer autocasts over fp32 weights", function()
    local args = { "llama3-8b", "--gpu", "a100-80gb", "--set", "precision=amp-bf16", "--set", "seq_len=2048" }
    local fix = find(advise(args).advice.fixes, { precision = "bf16-autocast" })
    assert.is_not_nil(fix)
    assert.is_true(fix.changes_training)
    local e = helper.estimate(table.unpack(with_changes(args, { precision = "bf16-autocast" })))
    assert.are.equal(e.per_gpu.peak_total_bytes, fix.peak_total_bytes)
    -- and not where the weights are bf16 already
    local bf16 = { "llama3-8b", "--gpu", "a100-80gb", "--set", "precision=bf16-autocast", "--set", "seq_len=2048" }
    assert.is_nil(find(advise(bf16).advice.fixes, { precision = "bf16-autocast" }))
  end)

  it("offers the newest PyTorch where transformers' enable_gqa sends SDPA to its math backend", function()
    -- a T4 (no flash kernel) with transformers 5 on PyTorch 2.10: the memory-efficient kernel refuses the
    -- key/value heads, the math backend keeps every layer's [s, s] probabilities
    local args = { "llama3.2-1b", "--gpu", "t4", "--set", "precision=fp16", "--set", "finetune=lora",
      "--set", "transformers_version=5", "--set", "torch_version=2.10", "--set", "seq_len=8192" }
    local fix = find(advise(args).advice.fixes, { torch_version = "2.x" })
    assert.is_not_nil(fix)
    assert.is_false(fix.changes_training)
    local e = helper.estimate(table.unpack(with_changes(args, { torch_version = "2.x" })))
    assert.are.equal(e.per_gpu.peak_total_bytes, fix.peak_total_bytes)
    -- not where the flash kernel runs
    local a100 = { "llama3.2-1b", "--gpu", "a100-80gb", "--set", "finetune=lora", "--set", "transformers_version=5",
      "--set", "torch_version=2.10", "--set", "seq_len=65536" }
    local o = advise(a100).advice
    assert.is_nil(find(o.fixes, { torch_version = "2.x" }))
    assert.is_nil(find(o.no_help, { torch_version = "2.x" }))
  end)

  it("says plainly when the recipe already fits, with the binding term and the headroom", function()
    local out, err, code = helper.run("advise", "gpt2", "--gpu", "a100-80gb", "--set", "seq_len=1024")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("the recipe fits with", 1, true), out)
    assert.truthy(out:find("binding: ", 1, true), out)
  end)

  it("needs --gpu", function()
    local _, err, code = helper.run("advise", "gpt2")
    assert.are.equal(2, code)
    assert.truthy(err:find("advise needs --gpu", 1, true), err)
  end)
end)
