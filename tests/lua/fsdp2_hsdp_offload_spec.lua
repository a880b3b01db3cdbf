-- framework = fsdp2 with HSDP (fsdp_shard_size: fully_shard over a
-- (replicate, shard) mesh, torchtitan's data_parallel_replicate_degree) and
-- with CPUOffloadPolicy (offload_params = cpu, torchtitan's
-- training.enable_cpu_offload). The expected bytes are worked out here from
-- the rules alone (torch 2.6's _fully_shard: FSDPParam._init_sharded_param
-- shards dim 0 over the shard group, ceil(dim0 / ranks) rows; HSDP
-- replicates that shard; foreach_reduce all-reduces the reduce-scatter
-- output in place, which becomes the sharded gradient; CPUOffloadPolicy
-- keeps the sharded parameters, their gradients and the optimizer's states
-- on the host and copies each unit's shards to the GPU for its all-gather),
-- not from the engine. torch 1.13 (the CPU harness) has no fully_shard.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")

-- a Llama whose dims leave remainders over 3 ranks: hidden 100, 5 heads of
-- 20, one key/value head, intermediate 270, vocabulary 1003, 4 blocks
local H, HEAD_DIM, KV, FFN, VOCAB, LAYERS = 100, 20, 1, 270, 1003, 4
local SHAPE = { "--set", "hidden=" .. H, "--set", "heads=5", "--set", "kv_heads=" .. KV, "--set",
  "intermediate=" .. FFN, "--set", "vocab=" .. VOCAB, "--set", "layers=" .. LAYERS, "--set", "seq_len=64",
  "--set", "framework=fsdp2", "--set", "precision=mixed-bf16" }
local function estimate(...) return helper.estimate_on("llama2-7b", SHAPE, ...) end

local function ceil_div(a, b) return (a + b - 1) // b end
-- (dim 0, the rest) of each parameter
local BLOCK = {
  { H, 1 }, { 5 * HEAD_DIM, H }, { KV * HEAD_DIM, H }, { KV * HEAD_DIM, H }, { H, 5 * HEAD_DIM },
  { H, 1 }, { FFN, H }, { FFN, H }, { H, FFN },
}
local ROOT = { { VOCAB, H }, { H, 1 }, { VOCAB, H } } -- embed_tokens, norm, lm_head
local function shard(params, ranks)
  local n = 0
  for _, p in ipairs(params) do n = n + ceil_div(p[1], ranks) * p[2] end
  return n
end
local function rank_shard(ranks) return LAYERS * shard(BLOCK, ranks) + shard(ROOT, ranks) end

describe("fsdp2 with HSDP", function()
  it("shards over fsdp_shard_size ranks, whatever dp replicates", function()
    local hsdp = estimate("--set", "dp=6", "--set", "fsdp_shard_size=3")
    -- the sharded parameters in fp32 (torchtitan's MixedPrecisionPolicy),
    -- AdamW's two fp32 moments of them
    assert.are.equal(4 * rank_shard(3), hsdp.per_gpu.params_bytes)
    assert.are.equal(8 * rank_shard(3), hsdp.per_gpu.optimizer_bytes)
    local fsdp3 = estimate("--set", "dp=3")
    assert.are.equal(fsdp3.per_gpu.peak_allocated_bytes, hsdp.per_gpu.peak_allocated_bytes)
    -- but over the whole dp, FSDP shards over 6
    assert.are.equal(4 * rank_shard(6), estimate("--set", "dp=6").per_gpu.params_bytes)
  end)

  it("takes part in two data-parallel communicators (shard and replica groups)", function()
    local one = estimate("--set", "dp=6").per_gpu.nccl_bytes
    assert.is_true(one > 0)
    assert.are.equal(2 * one, estimate("--set", "dp=6", "--set", "fsdp_shard_size=3").per_gpu.nccl_bytes)
  end)

  it("all-reduces the gradient shards across replicas in the step time", function()
    -- the same shards and per-rank work as FSDP over 3 ranks, and the
    -- replicas' all-reduce on top (fused element-wise kernels: the shorter
    -- compute leaves the reduction exposed)
    local args = { "--gpu", "h100-80gb", "--set", "micro_batch=1", "--set", "kernels=fused" }
    local hsdp = estimate("--set", "dp=12", "--set", "fsdp_shard_size=3", "--gpus", "12", table.unpack(args)).time
    local fsdp3 = estimate("--set", "dp=3", "--gpus", "3", table.unpack(args)).time
    assert.is_true(hsdp.exposed_comm_s > fsdp3.exposed_comm_s, hsdp.exposed_comm_s .. " vs " .. fsdp3.exposed_comm_s)
  end)

  it("refuses a shard group that does not divide dp", function()
    local _, err, code = helper.run("estimate", "llama2-7b", "--set", "framework=fsdp2", "--set", "dp=4", "--set",
      "fsdp_shard_size=3")
    assert.are_not.equal(0, code)
    assert.truthy(err:find("fsdp_shard_size: HSDP needs a shard group that divides dp", 1, true), err)
  end)
end)

describe("fsdp2 with CPUOffloadPolicy", function()
  it("keeps no model state on the GPU: parameters, gradients and states on the host", function()
    local r = estimate("--set", "dp=3", "--set", "offload_params=cpu")
    for _, k in ipairs({ "params_bytes", "grads_bytes", "master_bytes", "optimizer_bytes" }) do
      assert.are.equal(0, r.per_gpu[k], k)
    end
    -- fp32 shards of the parameters and their gradients, AdamW's two moments
    assert.are.equal(16 * rank_shard(3), r.host.cpu_bytes_per_rank)
  end)

  it("copies each unit's shards to the GPU before its all-gather", function()
    local m = helper.model("llama2-7b", LAYERS, { hidden = H, heads = 5, kv_heads = KV, intermediate = FFN,
      vocab = VOCAB })
    local r = vramplan.estimate(m, { framework = "fsdp2", dp = 3, precision = "mixed-bf16", offload_params = "cpu",
      seq_len = 64 }, nil, { timeline = true, fold = false })
    local copies = {}
    for _, e in ipairs(r.timeline) do
      if e.op == "all_gather.host_copy" and e.delta > 0 then copies[#copies + 1] = e.delta end
    end
    -- the root once (never resharded), each block in forward, again in
    -- backward but the last (torchtitan keeps it gathered): fp32 shards,
    -- each block of the caching allocator a multiple of 512 bytes
    -- (CUDACachingAllocator.cpp, kMinBlockSize)
    local function block(bytes) return ceil_div(bytes, 512) * 512 end
    local want = { block(4 * shard(ROOT, 3)) }
    for _ = 1, LAYERS + LAYERS - 1 do want[#want + 1] = block(4 * shard(BLOCK, 3)) end
    assert.are.same(want, copies)
  end)

  it("agrees folded and layer by layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 4), {
      { framework = "fsdp2", dp = 4, precision = "mixed-bf16", offload_params = "cpu" },
      { framework = "fsdp2", dp = 4, fsdp_shard_size = 2, precision = "mixed-bf16", checkpointing = "full" },
    })
  end)

  it("refuses offload_optimizer and NVMe", function()
    for _, case in ipairs({ { "offload_optimizer=cpu", "offload_optimizer: with framework = fsdp2, offload is" },
      { "offload_params=nvme", "offload_params: FSDP2's CPUOffloadPolicy offloads to the CPU only" } }) do
      local _, err, code = helper.run("estimate", "llama2-7b", "--set", "framework=fsdp2", "--set", "dp=4",
        "--set", case[1])
      assert.are_not.equal(0, code)
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)
end)

describe("torchtitan's names", function()
  it("map the replicate and shard degrees onto dp and fsdp_shard_size, cpu offload onto offload_params", function()
    local r = estimate("--set", "parallelism.data_parallel_replicate_degree=2", "--set",
      "parallelism.data_parallel_shard_degree=3", "--set", "training.enable_cpu_offload=true")
    assert.are.equal(6, r.recipe.dp)
    assert.are.equal("cpu", r.recipe.offload_params)
    -- sharded over 3 (fsdp_shard_size, a key the echo does not show)
    assert.are.equal(16 * rank_shard(3), r.host.cpu_bytes_per_rank)
    -- the shard degree -1 (torchtitan's default): the ranks dp leaves
    r = estimate("--set", "dp=6", "--set", "parallelism.data_parallel_replicate_degree=2")
    assert.are.equal(4 * rank_shard(3), r.per_gpu.params_bytes)
  end)

  it("refuse what does not hold together", function()
    for _, case in ipairs({
      { { "parallelism.data_parallel_replicate_degree=2" }, "give dp, the data-parallel ranks" },
      { { "dp=6", "parallelism.data_parallel_replicate_degree=4" }, "4 replicas do not divide dp = 6" },
      { { "dp=4", "parallelism.data_parallel_shard_degree=3" }, "gives dp = 3, but dp = 4" },
    }) do
      local args = { "estimate", "llama2-7b", "--set", "framework=fsdp2" }
      for _, s in ipairs(case[1]) do args[#args + 1] = "--set"; args[#args + 1] = s end
      local _, err, code = helper.run(table.unpack(args))
      assert.are_not.equal(0, code)
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)
end)
