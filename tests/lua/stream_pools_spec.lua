-- The constant allocator's per-stream pools (engine/step/estimate.c,
-- constant_reserved): where FSDP allocates on its own streams, the
-- reservation is the default stream's peak with its segments and the
-- fragmentation share plus each side stream's high-water in whole segments
-- (c10/cuda/CUDACachingAllocator.cpp: a freed block serves its own stream
-- only). Checked against a brute force over the unfolded timeline, written
-- here from the allocator's constants, not from the engine's ledger.
local helper = require("tests.lua.helper")

local MIB = 1024 * 1024

-- CUDACachingAllocator.cpp: kSmallSize 1 MiB (small pool, kSmallBuffer 2 MiB
-- segments), kMinLargeAlloc 10 MiB (below it kLargeBuffer 20 MiB segments),
-- larger blocks rounded to kRoundLarge 2 MiB, a segment each
local function round_to(x, m) return (x + m - 1) // m * m end
local function pool_of(bytes)
  if bytes <= MIB then return "small" elseif bytes < 10 * MIB then return "medium" end
  return "large"
end
local function pool_bytes(bytes) return pool_of(bytes) == "large" and round_to(bytes, 2 * MIB) or bytes end
local function segments(pools)
  return round_to(pools.small, 2 * MIB) + round_to(pools.medium, 20 * MIB) + pools.large
end

-- Which ops allocate (and free) on a side stream, from the frameworks'
-- code: FSDP1's unshard stream gathers (torch/distributed/fsdp/
-- _runtime_utils.py, _unshard), its post-backward stream makes the
-- gradient shard (_reduce_grad); FSDP2's all-gather stream makes the flat
-- all-gather output (under mixed precision the cast shards it is copied in
-- from first, on the same copy-in stream), its reduce-scatter stream the
-- sharded gradient (_fsdp_collectives.py, foreach_all_gather,
-- foreach_reduce).
local STREAMS = {
  fsdp = { all_gather = 1, ["all_gather.prefetch"] = 1, ["all_gather.root"] = 1, ["all_gather.release"] = 1,
    ["reduce_scatter.grad"] = 2 },
  fsdp2 = { ["all_gather.copy_in"] = 1, ["all_gather.output"] = 1, ["all_gather.prefetch"] = 1, ["all_gather.state"] = 1,
    ["all_gather.mistargeted"] = 1,
    ["reduce_scatter.grad"] = 2 },
  -- DeepSpeed ZeRO-3 with overlap_comm: all_gather_coalesced under
  -- parameter_offload.py's __allgather_stream (partitioned_param_coordinator.py)
  deepspeed = { all_gather = 1, ["all_gather.prefetch"] = 1, ["all_gather.root"] = 1, ["all_gather.release"] = 1 },
  -- torchtune's OffloadActivations with use_streams (_activation_offloading.py:
  -- what it brings back, `.to("cuda")` under `torch.cuda.stream(self.s1)`,
  -- and a non-contiguous tensor's copy to the host made there too)
  offload = { ["offload.stream_unpack"] = 3, ["offload.stream_contiguous"] = 3 },
}

-- Each stream's live bytes over the timeline: its peak and its pools there.
local function per_stream(timeline, streams)
  local meters = {}
  for s = 0, 3 do meters[s] = { live = 0, peak = 0, pools = { small = 0, medium = 0, large = 0 } } end
  for s = 0, 3 do meters[s].peak_pools = { small = 0, medium = 0, large = 0 } end
  for _, e in ipairs(timeline) do
    if e.op ~= "AccumulateGrad" then -- a move into .grad: no allocator call
      local m = meters[streams[e.op] or 0]
      local size = math.abs(e.delta)
      local pool = pool_of(size)
      local sign = e.delta > 0 and 1 or -1
      m.live = m.live + e.delta
      m.pools[pool] = m.pools[pool] + sign * pool_bytes(size)
      if m.live > m.peak then
        m.peak = m.live
        m.peak_pools = { small = m.pools.small, medium = m.pools.medium, large = m.pools.large }
      end
    end
  end
  return meters
end

-- The estimate's reservation against the brute force: the default
-- stream's peak in segments (or the peak itself, if larger) and the
-- fragmentation share, plus each side stream's high-water in segments;
-- within a byte. Returns the meters.
local function assert_reserved(r, streams)
  local m = per_stream(r.timeline, streams)
  local expected = math.max(segments(m[0].peak_pools), m[0].peak) + math.floor(r.recipe.fragmentation * m[0].peak + 0.5)
  for s = 1, 3 do expected = expected + segments(m[s].peak_pools) end
  assert.is_true(math.abs(r.per_gpu.peak_reserved_bytes - expected) <= 1,
    string.format("engine %d, brute force %d", r.per_gpu.peak_reserved_bytes, expected))
  return m
end

local CASES = {
  { "llama3.2-1b", "fsdp2", { "--set", "framework=fsdp2", "--set", "gpus=4", "--set", "seq_len=512" } },
  { "llama3.2-1b", "fsdp", { "--set", "framework=fsdp", "--set", "gpus=4", "--set", "seq_len=512",
    "--set", "precision=mixed-bf16" } },
}

describe("the constant allocator with FSDP's stream pools", function()
  for _, case in ipairs(CASES) do
    local model, framework, sets = case[1], case[2], case[3]
    it(framework .. ": the default stream's peak plus each side stream's high-water, as a brute force finds", function()
      local r = helper.estimate(model, "--timeline", table.unpack(sets))
      local g = r.per_gpu
      local m = assert_reserved(r, STREAMS[framework])
      assert.is_true(m[1].peak > 0 and m[2].peak > 0, "both side streams allocate")
      -- and the folded evaluation (a plain estimate) keeps the same meters
      local folded = helper.estimate(model, table.unpack(sets)).per_gpu
      assert.are.equal(g.peak_reserved_bytes, folded.peak_reserved_bytes)
      assert.are.equal(g.peak_allocated_bytes, folded.peak_allocated_bytes)
    end)
  end

  it("deepspeed ZeRO-3: the default stream's peak plus the all-gather stream's high-water, as a brute force finds",
    function()
      local sets = { "--set", "framework=deepspeed", "--set", "zero=3", "--set", "gpus=4", "--set", "seq_len=512",
        "--set", "precision=mixed-bf16" }
      local r = helper.estimate("llama3.2-1b", "--timeline", table.unpack(sets))
      local m = assert_reserved(r, STREAMS.deepspeed)
      assert.is_true(m[1].peak > 0, "the all-gather stream allocates")
      -- overlap_comm off: one stream, gathers and all
      assert_reserved(helper.estimate("llama3.2-1b", "--timeline", "--set", "overlap_comm=false", table.unpack(sets)), {})
    end)

  it("keeps sequence parallelism's reduce-scatters on the compute stream under fsdp2 with tp", function()
    -- FSDP2's reduce-scatter stream gets the sharded gradients, one per unit
    -- and step whatever tp is; sequence parallelism's input-gradient
    -- reduce-scatters (two a layer) run on the compute stream
    local function fsdp_scatters(...)
      local n = 0
      for _, e in ipairs(helper.estimate("llama3.2-1b", "--timeline", "--set", "framework=fsdp2", "--set", "dp=2",
          "--set", "seq_len=256", ...).timeline) do
        if e.op == "reduce_scatter.grad" and e.delta > 0 then n = n + 1 end
      end
      return n
    end
    local plain = fsdp_scatters()
    assert.is_true(plain > 0)
    assert.are.equal(plain, fsdp_scatters("--set", "tp=2", "--set", "sequence_parallel=true"))
  end)

  it("holds FSDP2's root all-gather output beside the first block's on the all-gather stream", function()
    -- FSDPParamGroup.unshard allocates the next flat output before
    -- wait_for_unshard lets go of the previous all_gather_state
    -- (_fsdp_param_group.py). Llama 3.2 1B in bf16, by hand: the root is the
    -- (tied) embedding 128,256 x 2,048 and the final norm 2,048; a block is
    -- q and o 2,048 x 2,048, k and v 512 x 2,048, gate, up and down 8,192 x
    -- 2,048 and two norms.
    local ROOT = (128256 * 2048 + 2048) * 2
    local BLOCK = (2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048 + 2 * 2048) * 2
    local r = helper.estimate("llama3.2-1b", "--timeline", "--set", "framework=fsdp2", "--set", "gpus=4",
      "--set", "seq_len=512")
    -- through forward: the root's, the first block's beside it, then each
    -- block's made before the last one goes; the last goes as the root's
    -- forward returns, which the step counts after the loss
    local outputs = {}
    for _, e in ipairs(r.timeline) do
      if e.op == "all_gather.output" and (e.phase == "forward" or e.phase == "loss") then
        outputs[#outputs + 1] = e.delta
      end
    end
    local expected = { ROOT, BLOCK, -ROOT }
    for _ = 2, 16 do -- Llama 3.2 1B's 16 blocks
      expected[#expected + 1] = BLOCK
      expected[#expected + 1] = -BLOCK
    end
    expected[#expected + 1] = -BLOCK
    assert.are.same(expected, outputs)
    -- the all-gather stream's high-water holds both, and the first block's
    -- fp32 shards cast to bf16 for its all-gather (mixed precision's
    -- flat_foreach_copy_input, one rank's quarter, as the output is made)
    assert.are.equal(ROOT + BLOCK + BLOCK // 4, per_stream(r.timeline, STREAMS.fsdp2)[1].peak)
  end)

  it("puts OffloadActivations' copies on a stream of their own, beside FSDP2's two", function()
    -- torchtune's offloading without checkpointing, where what backward brings
    -- back is a layer's saved tensors, one or two nodes' at a time
    local r = helper.estimate("llama3.2-1b", "--timeline", "--set", "stack=torchtune", "--set", "seq_len=512",
      "--set", "checkpointing=none", "--set", "offload_activations=true", "--set", "offload_streams=true")
    local m = assert_reserved(r, STREAMS.offload)
    assert.is_true(m[3].peak > 0, "the copy stream allocates")
    local both = {}
    for op, s in pairs(STREAMS.fsdp2) do both[op] = s end
    for op, s in pairs(STREAMS.offload) do both[op] = s end
    m = assert_reserved(helper.estimate("llama3.2-1b", "--timeline", "--set", "stack=torchtune", "--set",
      "framework=fsdp2", "--set", "gpus=2", "--set", "seq_len=512", "--set", "checkpointing=full", "--set",
      "offload_activations=true", "--set", "offload_streams=true"), both)
    assert.is_true(m[1].peak > 0 and m[3].peak > 0)
  end)

  it("under TRL's offloading brings no frozen weight back, and copies the gathered ones' transposes (FSDP2)", function()
    -- TRL's OffloadActivations (trl/models/activation_offloading.py, 1.8)
    -- keeps a tensor whose storage is a parameter's: a frozen Linear's
    -- weight.t(), which torchtune's copies out and brings back in backward.
    -- Llama 3.2 1B in bf16: q and o 2,048 x 2,048, gate, up and down 8,192 x 2,048
    local WEIGHTS = { [2048 * 2048 * 2] = true, [8192 * 2048 * 2] = true }
    local lora = { "--set", "precision=bf16", "--set", "finetune=lora", "--set", "seq_len=256", "--set",
      "micro_batch=1", "--set", "offload_activations=true", "--set", "offload_torchtune=true", "--set",
      "offload_streams=true" }
    local function weights_back(r, op)
      local n = 0
      for _, e in ipairs(r.timeline) do
        if e.op == op and WEIGHTS[e.delta] then n = n + 1 end
      end
      return n
    end
    local tune = helper.estimate("llama3.2-1b", "--timeline", table.unpack(lora))
    -- (q, o, gate, up and down of 16 layers but the first q, whose input
    -- needs no gradient behind frozen embeddings, and but what the forward's
    -- stash of five still holds as backward starts)
    local SAVED = 16 * 5 - 1
    assert.is_true(weights_back(tune, "offload.stream_unpack") >= SAVED - 5, "torchtune's brings base weights back")
    local trl = helper.estimate("llama3.2-1b", "--timeline", "--set", "offload_trl=true", table.unpack(lora))
    assert.are.equal(0, weights_back(trl, "offload.stream_unpack"))
    assert_reserved(trl, STREAMS.offload)
    -- axolotl 0.18's patch clones each weight.t() on the compute stream
    -- first (a parameter's view is no parameter): every one is copied, and
    -- all but what the stash holds brought back
    local axolotl = helper.estimate("llama3.2-1b", "--timeline", "--set", "offload_trl=true", "--set",
      "offload_clone_views=true", table.unpack(lora))
    assert.are.equal(SAVED, weights_back(axolotl, "offload.clone"))
    assert.is_true(weights_back(axolotl, "offload.stream_unpack") >= SAVED - 5)
    assert_reserved(axolotl, STREAMS.offload)
    -- under FSDP2 the weights are gathered into storages of their own: each
    -- transpose goes through a contiguous copy on the offload stream (TRL
    -- 1.4's .contiguous()), where torchtune's empty_like needs none
    local sharded = { "--set", "framework=fsdp2", "--set", "gpus=2", "--set", "checkpointing=none" }
    for _, kv in ipairs(lora) do sharded[#sharded + 1] = kv end
    local copies = weights_back(helper.estimate("llama3.2-1b", "--timeline", "--set", "offload_trl=true",
      table.unpack(sharded)), "offload.stream_contiguous")
    assert.are.equal(SAVED, copies, "a copy of each gathered weight's transpose")
    assert.are.equal(0, weights_back(helper.estimate("llama3.2-1b", "--timeline", table.unpack(sharded)),
      "offload.stream_contiguous"))
  end)

  it("leaves a run without side streams as the whole step's peak (DDP)", function()
    assert_reserved(helper.estimate("llama3.2-1b", "--timeline", "--set", "gpus=4", "--set", "seq_len=512"), {})
  end)
end)
