-- torch.distributed.pipelining's schedules under torchtitan's names, with
-- torchtitan's split of the layers over pp x v stages. Every expectation is
-- worked out here from torchtitan's and torch's rules, written out in the
-- comments, not taken from the engine:
--  - the split (_generate_llm_fqn_per_model_part, torchtitan/distributed/
--    pipeline_parallel.py since 3c84ce0): layers + 2 (the embeddings and the
--    head count as one layer each) dealt out evenly over the stages, the
--    first (layers + 2) % stages one more, the first and the last stage one
--    less for the embeddings and the head; rank i holds stages i, i + pp, ...
--  - ScheduleInterleaved1F1B (torch/distributed/pipelining/schedules.py):
--    rounds = max(1, m // pp), per_round = m // rounds, rank i warms up with
--    (v - 1) per_round + 2 (pp - 1 - i) forwards (at most m v), then one
--    forward and one backward a step; forward k runs local chunk
--    (k // per_round) % v, backward k chunk v - 1 - (k // per_round) % v.
local helper = require("tests.lua.helper")

-- a small Llama so that 126 layers run quickly
local SHAPE = { "--set", "hidden=64", "--set", "heads=4", "--set", "kv_heads=4", "--set", "intermediate=128",
  "--set", "vocab=1000", "--set", "seq_len=256", "--set", "framework=megatron", "--set", "attention=flash" }

local function estimate(...) return helper.estimate_on("llama2-7b", SHAPE, ...) end

-- parameters of one Llama block at these dims: q, k, v, o (64 x 64), gate,
-- up, down (64 x 128), two RMSNorms (64)
local BLOCK = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64
local EMBED, HEAD = 1000 * 64, 1000 * 64 + 64 -- the head with the final norm

local function layer_counts(r)
  local t = {}
  for i, st in ipairs(r.per_rank) do t[i] = (st.params_bytes // 2 - (i == 1 and EMBED or 0) -
    (i == #r.per_rank and HEAD or 0)) / BLOCK end
  return t
end

describe("torchtitan's pipeline split", function()
  it("puts 126 layers on 16 virtual stages (pp 8 x 2), refused under Megatron's interleaving", function()
    -- (126 + 2) / 16 = 8 a stage: stage 0 7 and the embeddings, stages
    -- 1-14 8, stage 15 7 and the head; rank 0 holds stages 0 and 8 (15
    -- layers), ranks 1-6 16, rank 7 stages 7 and 15 (15)
    local r = estimate("--set", "layers=126", "--set", "pp=8", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=8")
    assert.are.same({ 15, 16, 16, 16, 16, 16, 16, 15 }, layer_counts(r))
    local err = helper.fails("llama2-7b", "--set", "layers=126", "--set", "framework=megatron", "--set", "pp=8",
      "--set", "pp_schedule=interleaved-1f1b", "--set", "virtual_stages=2")
    assert.truthy(err:find("virtual_stages: pp x virtual_stages must divide the layers", 1, true), err)
  end)

  it("walks ScheduleInterleaved1F1B over uneven chunks", function()
    -- 30 layers over pp 4 x 2: (30 + 2) / 8 = 4 a stage, stages 0 and 7 3:
    -- rank 0 holds chunks of 3 (stage 0) and 4 (stage 4), rank 3 4 (stage
    -- 3) and 3 (stage 7). m = 8: rounds 2, per_round 4.
    -- rank 0: warm-up 4 + 6 = 10 forwards (chunks 0,0,0,0,1,1,1,1,0,0:
    -- 4x3 + 4x4 + 2x3 = 34 layers), then forward 10 (chunk 0, +3 = 37, the
    -- most) and backward 0 (chunk 1, -4); the later steps reach 37 again
    -- at most: 37 of its 7 layers' worth.
    -- rank 3: warm-up 4 (chunk 0: 16), step 4 forward chunk 1 (+3 = 19),
    -- backward chunk 1 (-3); steps 8-11 forward chunk 0 (+4 = 20, the
    -- most), backward chunk 0: 20 / 7.
    local r = estimate("--set", "layers=30", "--set", "pp=4", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=8")
    assert.are.same({ 7, 8, 8, 7 }, layer_counts(r))
    -- (the JSON carries 15 significant digits)
    assert.is_true(math.abs(37 / 7 - r.per_rank[1].in_flight) < 1e-12, r.per_rank[1].in_flight)
    assert.is_true(math.abs(20 / 7 - r.per_rank[4].in_flight) < 1e-12, r.per_rank[4].in_flight)
  end)

  it("splits 1F1B's single stages the same way, with Schedule1F1B's pp - i in flight", function()
    -- 30 layers over 4: (30 + 2) / 4 = 8: 7, 8, 8, 7
    local r = estimate("--set", "layers=30", "--set", "pp=4", "--set", "pp_schedule=1F1B",
      "--set", "num_microbatches=8")
    assert.are.same({ 7, 8, 8, 7 }, layer_counts(r))
    assert.are.same({ 4, 3, 2, 1 }, { r.per_rank[1].in_flight, r.per_rank[2].in_flight, r.per_rank[3].in_flight,
      r.per_rank[4].in_flight })
    -- Megatron's even split gives the first stages the remainder: 8, 8, 7, 7
    assert.are.same({ 8, 8, 7, 7 }, layer_counts(estimate("--set", "layers=30", "--set", "pp=4",
      "--set", "num_microbatches=8")))
  end)

  it("takes pp_layers as one count per virtual stage", function()
    local r = estimate("--set", "layers=30", "--set", "pp=2", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=4", "--set", "pp_layers=5,9,10,6")
    -- rank 0: stages 0 and 2 (5 + 10), rank 1: 1 and 3 (9 + 6)
    assert.are.same({ 15, 15 }, layer_counts(r))
  end)

  it("sets the stages per rank from pp_layers_per_stage as torchtitan's _get_pipeline_metadata does", function()
    -- torchtitan's own test recipe (llama3_debugmodel_pp4_interleaved_1f1b_
    -- layers_per_stage: 6 layers, pp 4, 1 layer a stage): ceil((6 + 2) / 1)
    -- = 8 stages, 2 a rank; the split gives each 1: stage 0 only the
    -- embeddings, stage 7 only the head. Rank 0 holds stages 0 and 4 (1
    -- layer), rank 1 stages 1 and 5 (2), rank 2 2 and 6 (2), rank 3 3 and 7 (1).
    local r = estimate("--set", "layers=6", "--set", "pp=4", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=8", "--set", "parallelism.pipeline_parallel_layers_per_stage=1")
    assert.are.same({ 1, 2, 2, 1 }, layer_counts(r))
    assert.are.equal(2, r.recipe.virtual_stages)
    -- 30 layers, the embeddings weighing nothing: ceil((30 + 0 + 1) / 8) =
    -- 4 stages over pp 2 (2 a rank); 31 / 4 = 7, the first 3 stages one
    -- more: 8, 8, 8, and 7 less the head's 1 = 6. Rank 0 stages 0 and 2
    -- (16), rank 1 stages 1 and 3 (14).
    r = estimate("--set", "layers=30", "--set", "pp=2", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=4", "--set", "pp_layers_per_stage=8", "--set", "pp_first_stage_less_layers=0")
    assert.are.same({ 16, 14 }, layer_counts(r))
    -- one stage a rank for 1F1B: ceil(32 / 16) = 2 over pp 2
    assert.are.same({ 15, 15 }, layer_counts(estimate("--set", "layers=30", "--set", "pp=2",
      "--set", "pp_schedule=1F1B", "--set", "pp_layers_per_stage=16")))
  end)

  it("keeps torch's receive buffers: one a micro-batch for each stage's activation in and gradient in", function()
    -- a stage's boundary: 256 tokens x 64 in bf16 = 32,768 bytes. A
    -- PipelineStage makes, for each of its stages, m activation receive
    -- buffers unless it is the model's first and m gradient receive buffers
    -- unless it is the last (stage.py: _prepare_forward_infra,
    -- _prepare_backward_infra); m = 8.
    local B, M = 256 * 64 * 2, 8
    local r = estimate("--set", "layers=30", "--set", "pp=4", "--set", "pp_schedule=1F1B",
      "--set", "num_microbatches=8")
    local want = { M * B, 2 * M * B, 2 * M * B, M * B }
    for i, st in ipairs(r.per_rank) do
      assert.are.equal(B, st.boundary_bytes)
      assert.are.equal(want[i], st.pp_buffers_bytes, i)
      -- at a backward peak the step counts those in flight itself (each
      -- micro-batch's received input: pp - i of them on rank i) and the
      -- received gradient backward starts from (not on the last rank)
      local counted = (i > 1 and (5 - i) * B or 0) + (i < 4 and B or 0)
      assert.are.equal("backward", st.peak_phase)
      assert.are.equal(want[i] - counted, st.peak_breakdown.comm, i)
    end
    -- Interleaved1F1B, pp 4 x 2: rank 0 holds stages 0 and 4 (3 kinds of
    -- buffers), ranks 1 and 2 four, rank 3 stages 3 and 7 three
    r = estimate("--set", "layers=30", "--set", "pp=4", "--set", "pp_schedule=Interleaved1F1B",
      "--set", "num_microbatches=8")
    local got = {}
    for i, st in ipairs(r.per_rank) do got[i] = st.pp_buffers_bytes end
    assert.are.same({ 3 * M * B, 4 * M * B, 4 * M * B, 3 * M * B }, got)
    -- Megatron's schedules receive into tensors the step counts
    r = estimate("--set", "layers=30", "--set", "pp=4", "--set", "num_microbatches=8")
    for _, st in ipairs(r.per_rank) do
      assert.are.equal(0, st.pp_buffers_bytes)
      assert.are.equal(0, st.peak_breakdown.comm)
    end
  end)

  it("keeps the last stage's output of every micro-batch with return_outputs, and merges them", function()
    -- torch's schedules (stage.py, schedules.py before return_outputs=False):
    -- forward_one_chunk appends the last stage's output to output_chunks,
    -- kept until the next step; step() returns torch.cat of them. Without
    -- them the output still lives through its own backward (fwd_cache).
    -- One micro-batch's logits: 256 tokens x 1000 in bf16 = 512,000 bytes.
    local L, M = 256 * 1000 * 2, 8
    local function last(...)
      local r = estimate("--set", "framework=fsdp2", "--set", "layers=30", "--set", "pp=4",
        "--set", "pp_schedule=1F1B", "--set", "num_microbatches=8", ...)
      return r.per_rank[#r.per_rank], r.per_rank[1]
    end
    local kept, first = last()
    local released = last("--set", "pp_return_outputs=false")
    assert.are.equal(M * L, kept.pp_outputs_bytes)
    assert.are.equal(0, released.pp_outputs_bytes)
    assert.are.equal(0, first.pp_outputs_bytes)
    -- the last micro-batch's loss backward is the peak in both; the other
    -- seven outputs are held there too
    assert.are.equal("loss.log_softmax", kept.peak_op)
    assert.are.equal("loss.log_softmax", released.peak_op)
    assert.are.equal((M - 1) * L, kept.peak_allocated_bytes - released.peak_allocated_bytes)
    -- GPipe's last stage peaks at its first backward, every micro-batch in
    -- flight: their outputs are alive either way (fwd_cache), none more
    local gpipe = last("--set", "pp_schedule=GPipe")
    assert.are.equal(last("--set", "pp_schedule=GPipe", "--set", "pp_return_outputs=false").peak_allocated_bytes,
      gpipe.peak_allocated_bytes)
    assert.are.equal(M, gpipe.in_flight)
    -- a vocabulary of 32,000 makes the merge the peak: after every
    -- backward, the eight outputs (16,384,000 bytes each) and their
    -- concatenation
    local V = 256 * 32000 * 2
    kept = last("--set", "vocab=32000")
    assert.are.equal("pipeline.merge_outputs", kept.peak_op)
    assert.are.equal(M * V, kept.peak_breakdown.transient)
    assert.is_true(kept.peak_breakdown.activations >= M * V and kept.peak_breakdown.activations < M * V + 2 ^ 20)
    -- torchtitan passes return_outputs=False since e5ef99aa (Oct 2025)
    assert.are.equal(0, last("--set", "stack=torchtitan").pp_outputs_bytes)
    assert.are.equal(M * L, last("--set", "stack=torchtitan", "--set", "pp_return_outputs=true").pp_outputs_bytes)
    -- Megatron's model returns its loss, not logits: nothing to keep
    assert.are.equal(0, estimate("--set", "layers=30", "--set", "pp=4", "--set", "pp_schedule=1F1B",
      "--set", "num_microbatches=8").per_rank[4].pp_outputs_bytes)
  end)

  for name, test in helper.refusals("llama2-7b", { "layers=30", "pp=2", "num_microbatches=4" }, {
    -- ceil(32 / 8) = 4 stages: 2 a rank
    { { "pp_schedule=1F1B", "pp_layers_per_stage=8" }, "a single-stage schedule (1F1B, GPipe) runs exactly 1" },
    -- ceil(32 / 16) = 2 stages: 1 a rank
    { { "pp_schedule=Interleaved1F1B", "pp_layers_per_stage=16" }, "a multi-stage schedule runs at least 2" },
    -- ceil(32 / 5) = 7 stages over 2 ranks
    { { "pp_schedule=Interleaved1F1B", "pp_layers_per_stage=5" }, "must divide over the pp ranks" },
    -- ceil(32 / 4) = 8 stages: 4 a rank
    { { "pp_schedule=ZBVZeroBubble", "pp_layers_per_stage=4" }, "ZBVZeroBubble and DualPipeV run exactly 2" },
    { { "pp_schedule=Interleaved1F1B", "pp_layers_per_stage=8", "virtual_stages=3" }, "give one of the two" },
    -- 30 + 1 + 16 = 47 over 4 stages: 11 a stage, less than the head's 16
    { { "pp_schedule=Interleaved1F1B", "pp_last_stage_less_layers=16" }, "pp_last_stage_less_layers: more than" },
    { { "framework=megatron", "pp_layers_per_stage=8" }, "torchtitan's key, for torch's schedules" },
  }) do it(name, test) end

  for name, test in helper.refusals("llama2-7b", { "framework=megatron", "pp=2" }, {
    { { "pp_schedule=Interleaved1F1B", "pp_layers=5,9,16" }, "pp_layers: one layer count per stage" },
    { { "pp_schedule=Interleaved1F1B", "num_microbatches=5" }, "num_microbatches: Interleaved1F1B needs a multiple" },
    { { "pp_schedule=Interleaved1F1B", "layers=2", "virtual_stages=3" }, "pp: more stages than layers + pp_first_stage_less_layers" },
  }) do it(name, test) end
end)
