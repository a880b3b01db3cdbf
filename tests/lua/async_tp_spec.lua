-- async_tp = true (torchtitan's async tensor parallelism: Inductor's
-- micro-pipeline TP over symmetric memory) against the unfused DTensor
-- collectives, by hand from the sources cited in engine/core/prims.c
-- (funcol) and engine/step/estimate.c (the workspace):
-- - torch/distributed/_functional_collectives.py (torch 2.6):
--   all_gather_tensor with gather_dim 1 is all_gather_into_tensor, then
--   torch.cat(torch.chunk(out, tp), dim=1); reduce_scatter_tensor with
--   scatter_dim 1 is torch.cat(torch.chunk(x, tp, dim=1)), then the
--   collective: a full-size tensor beside each collective;
-- - torch/_inductor/fx_passes/micro_pipeline_tp.py: inside the compiled
--   blocks, a gather is fused with the matmuls reading it, a reduce-scatter
--   with the one matmul producing it (a sum of q, k and v's input
--   gradients is no matmul: that backward reduce-scatter stays unfused);
--   the embeddings and the head run eagerly;
-- - torch/distributed/_symmetric_memory: the fused ops allocate what the
--   engine's collective outputs are (ag_out, stacked_partials) and ask
--   get_symm_mem_workspace for the shard gathered or 2 x the output shard.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")
local H100 = require("vramplan.hardware").gpu(helper.root, "h100-80gb")

-- llama2-7b's dims, 2 layers: hidden 4096; b 2 x s 128 tokens over tp 2
local B, S, H, TP, LAYERS = 2, 128, 4096, 2, 2
local FULL = B * S * H * 2       -- a bf16 [b, s, h] tensor
local SHARD = B * S // TP * H * 2 -- its sequence shard
local MIB = 1024 * 1024

local model = helper.model("llama2-7b", LAYERS)

local function recipe(extra)
  local r = { framework = "fsdp2", dp = 2, tp = TP, sequence_parallel = true, compile = true, seq_len = S,
    micro_batch = B, checkpointing = "none" }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- the allocations named `op` in `phase` of a layer-by-layer timeline
local function allocations(r, phase, op)
  local out = vramplan.estimate(model, r, nil, { timeline = true, fold = false })
  local sizes = {}
  for _, e in ipairs(out.timeline) do
    if e.op == op and e.phase == phase and e.delta > 0 then sizes[#sizes + 1] = e.delta end
  end
  return sizes
end

local function times(n, v)
  local t = {}
  for i = 1, n do t[i] = v end
  return t
end

describe("DTensor's collectives through funcol (sequence parallelism's Shard(1))", function()
  it("hold the gather's output beside its cat: each module input in forward, the head's in the loss", function()
    -- attention and MLP gather their input in every layer
    assert.are.same(times(2 * LAYERS, FULL),
      allocations(recipe(), "forward", "all_gather_into_tensor (before its cat)"))
    assert.are.same({ FULL }, allocations(recipe(), "loss", "all_gather_into_tensor (before its cat)"))
  end)

  it("copy the reduce-scatter's input by the cat: wo, w2 and the embeddings' RowwiseParallel", function()
    assert.are.same(times(2 * LAYERS + 1, FULL), allocations(recipe(), "forward", "reduce_scatter.cat"))
  end)

  it("do the same in backward: the gathers' reduce-scatters and the reduce-scatters' gathers", function()
    -- attention's and MLP's inputs and the head's: 2 x layers + 1 each
    assert.are.same(times(2 * LAYERS + 1, FULL), allocations(recipe(), "backward", "reduce_scatter.cat"))
    assert.are.same(times(2 * LAYERS + 1, FULL),
      allocations(recipe(), "backward", "all_gather_into_tensor (before its cat)"))
  end)
end)

describe("async_tp = true (Inductor's micro-pipeline TP)", function()
  local async = recipe({ async_tp = true })

  it("drops the cats of the compiled blocks' fused collectives, keeps the eager ones", function()
    assert.are.same({}, allocations(async, "forward", "all_gather_into_tensor (before its cat)"))
    assert.are.same({ FULL }, allocations(async, "loss", "all_gather_into_tensor (before its cat)"))
    assert.are.same({ FULL }, allocations(async, "forward", "reduce_scatter.cat")) -- the embeddings'
    -- backward: the reduce-scatter of a sum (q + k + v, gate + up) and the
    -- head's stay; of the gathers only the embeddings' (eager) stays
    assert.are.same(times(2 * LAYERS + 1, FULL), allocations(async, "backward", "reduce_scatter.cat"))
    assert.are.same({ FULL }, allocations(async, "backward", "all_gather_into_tensor (before its cat)"))
  end)

  it("keeps the gathered input for the backward as the unfused gather does (ag_out, return_A)", function()
    assert.are.same(helper.forward_sizes(model, recipe(), "all_gather.module_input"),
      helper.forward_sizes(model, async, "all_gather.module_input"))
    assert.are.same(times(2 * LAYERS, FULL), helper.forward_sizes(model, async, "all_gather.module_input"))
  end)

  it("counts the symmetric-memory workspace outside the caching allocator, in the total", function()
    -- the largest request: a reduce-scatter's two output chunks, 2 x 1 MiB;
    -- + the 2,048-byte signal pad, rounded up to 2 MiB: 4 MiB
    assert.are.equal(2 * MIB, 2 * SHARD)
    local fused = vramplan.estimate(model, async, H100)
    local plain = vramplan.estimate(model, recipe(), H100)
    assert.are.equal(4 * MIB, fused.symm_mem_bytes)
    assert.are.equal(0, plain.symm_mem_bytes)
    -- cuBLAS's four workspaces (two threads x two streams) are tensors of
    -- the caching allocator under PyTorch 2.x, not runtime
    assert.are.equal(4 * 32 * MIB, fused.cublas_workspace_bytes)
    assert.are.equal(fused.cublas_workspace_bytes, fused.peak_breakdown.workspace)
    assert.are.equal(fused.cuda_context_bytes + fused.nccl_bytes + 4 * MIB, fused.runtime_bytes)
    assert.are.equal(fused.peak_reserved_bytes + fused.runtime_bytes, fused.peak_total_bytes)
    -- cuBLAS: one more workspace per thread for the backend stream's
    -- matmuls, 4 x 32 MiB on an H100 (4096 KiB x 8 each) against 2 x 32
    assert.are.equal(4 * 32 * MIB, fused.cublas_workspace_bytes)
    assert.are.equal(2 * 32 * MIB, plain.cublas_workspace_bytes)
  end)

  it("asks for the workspace by the largest shard: 1,536 tokens a rank", function()
    -- b 3 x s 1024 over tp 2, hidden 4096: the reduce-scatter's shard is
    -- 3 x 512 x 4096 x 2 = 12 MiB, two of them 24 MiB, + 2,048 -> 26 MiB
    local r = vramplan.estimate(model, recipe({ async_tp = true, micro_batch = 3, seq_len = 1024 }), H100)
    assert.are.equal(26 * MIB, r.symm_mem_bytes)
  end)

  it("names the workspace in the text report's runtime line", function()
    -- b 1 x s 512 over tp 2: 256 x 4096 x 2 = 2 MiB a shard, 4 MiB asked, 6 MiB with the pad
    local out, err, code = helper.run("estimate", "llama2-7b", "--set", "framework=fsdp2", "--set", "gpus=4",
      "--set", "tp=2", "--set", "sequence_parallel=true", "--set", "compile=true", "--set", "async_tp=true",
      "--set", "seq_len=512", "--gpu", "h100-80gb")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("async TP's symmetric memory 6.0 MiB", 1, true), out)
  end)

  it("gives the same peak folded and unfolded", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 4), {
      recipe({ async_tp = true }),
      recipe({ async_tp = true, checkpointing = "full" }),
      recipe({ checkpointing = "full" }),
    })
  end)

  for name, test in helper.refusals("llama2-7b", { "framework=fsdp2", "dp=2" }, {
    { { "async_tp=true", "compile=true" }, "async_tp: needs tp > 1" },
    { { "tp=2", "async_tp=true", "compile=true" }, "async_tp: needs sequence_parallel = true" },
    { { "tp=2", "sequence_parallel=true", "async_tp=true" }, "async_tp: needs compile = true" },
  }) do it(name, test) end

  it("hides the forward's tensor-parallel collectives behind the matmuls they feed and drain", function()
    -- Llama-3-8B over tp 8 with full checkpointing: unfused, the forward's
    -- (and the rerun's) all-gathers and reduce-scatters wait on the critical
    -- path; pipelined shard by shard beside their matmuls they do not (the
    -- backward's already hid behind the weight-gradient GEMMs). torchtitan's
    -- async-TP benchmark (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md)
    -- measured 1.04-1.16x; the compute is the same either way.
    local function time(async)
      return helper.estimate("llama3-8b", "--gpu", "h100-80gb", "--set", "stack=torchtitan", "--set", "gpus=8",
        "--set", "tp=8", "--set", "seq_len=8192", "--set", "compile=true", "--set", "checkpointing=full",
        "--set", "async_tp=" .. tostring(async)).time
    end
    local plain, async = time(false), time(true)
    assert.are.equal(plain.compute_s, async.compute_s)
    assert.is_true(async.exposed_comm_s < plain.exposed_comm_s / 3, async.exposed_comm_s .. " vs " .. plain.exposed_comm_s)
  end)

  it("takes torchtitan's key names of each era", function()
    for _, key in ipairs({ "experimental.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel",
      "compile.enable_async_tensor_parallel" }) do
      local r = helper.estimate("llama2-7b", "--set", "stack=torchtitan", "--set", "gpus=4", "--set", "tp=2",
        "--set", "sequence_parallel=true", "--set", "training.compile=true", "--set", "seq_len=128",
        "--set", key .. "=true")
      assert.is_true(r.recipe.async_tp, key)
      assert.is_true(r.per_gpu.symm_mem_bytes > 0, key)
    end
  end)
end)
