-- torch.distributed.pipelining's zero-bubble schedules (ScheduleZBVZeroBubble,
-- ScheduleInterleavedZeroBubble, ScheduleDualPipeV) under torchtitan's names.
-- The expectations are the published memory tables and hand arithmetic:
--  - the DualPipe README (deepseek-ai/DualPipe; the DeepSeek-V3 report's
--    Table 2): activations per device, in micro-batches of one chunk, PP for
--    1F1B and ZB1P, PP + 1 for DualPipe, PP its chunks (a V over pp ranks
--    has PP = 2 pp chunks of half a rank's layers);
--  - Qi et al. 2023 ("Zero Bubble Pipeline Parallelism", section 6): ZB-V's
--    peak activations are 1F1B's, p micro-batches on the first rank;
--  - what the input half of a split backward keeps for the weight half
--    (torch/distributed/pipelining/_backward.py, stage_backward_input: the
--    graph retained, and the gradient flowing into every node where a weight
--    meets the inputs' path), counted by hand below.
local helper = require("tests.lua.helper")

-- the small Llama of torch_pipeline_spec.lua, in Megatron's mixed bf16
local SHAPE = { "--set", "hidden=64", "--set", "heads=4", "--set", "kv_heads=4", "--set", "intermediate=128",
  "--set", "vocab=1000", "--set", "seq_len=256", "--set", "framework=megatron", "--set", "attention=flash",
  "--set", "num_microbatches=8", "--set", "pp=4" }

local function estimate(...) return helper.estimate_on("llama2-7b", SHAPE, ...) end

-- one layer's gradients kept for its weight pass, one sequence of 256
-- tokens in bf16: the outputs of q, k, v, o (64 wide each), gate and up
-- (128), down (64) and the two RMSNorms' weight multiplications (64):
-- 704 x 256 x 2 bytes (each a whole number of 512-byte blocks)
local LAYER = 704 * 256 * 2
-- the last stage's head (1000 wide) and final norm (64)
local HEAD = 1000 * 256 * 2 + 64 * 256 * 2

local function field(r, name)
  local t = {}
  for i, st in ipairs(r.per_rank) do t[i] = st[name] end
  return t
end

describe("the zero-bubble schedules", function()
  -- 30 layers over pp 4 x 2 stages (torchtitan's split): 3, 4 x 6, 3; in a
  -- V rank 0 holds stages 0 and 7 (6 layers, the embeddings and the head),
  -- rank i stages i and 7 - i (8): every rank's two chunks are alike.
  it("keep each linear's and each norm's output gradient for the weight pass", function()
    local r = estimate("--set", "layers=30", "--set", "pp_schedule=ZBVZeroBubble")
    assert.are.same({ 6 * LAYER + HEAD, 8 * LAYER, 8 * LAYER, 8 * LAYER }, field(r, "weight_pass_bytes"))
    -- none kept by the other schedules
    assert.is_nil(estimate("--set", "layers=30", "--set", "pp_schedule=1F1B").per_rank[1].weight_pass_bytes)
  end)

  -- Below, a and g are one chunk's activations and weight-pass gradients
  -- (half of a rank's: its two chunks are alike); the peak is the moment
  -- with the most of both. Rank 0 holds the head, whose share of a chunk
  -- the JSON does not give: the hand walks take ranks 1-3.
  it("hold PP + 1 chunks on ranks 1-3 under DualPipeV", function()
    -- rank i: 2 (pp - i - 1) F0's, i + 1 pairs F0 F1 (2 pp - i - 1 + i + 1
    -- = 8 chunks), pp - i - 1 of I1 W F1 (8a + g at most: each W frees
    -- what its I kept), then F0 before the first B1: 9 chunks, 2 pp + 1,
    -- nothing waiting; the later steps hold less. 9a > 8a + g when a > g.
    local r = estimate("--set", "layers=30", "--set", "pp_schedule=DualPipeV")
    for i = 2, 4 do
      local st = r.per_rank[i]
      assert.is_true(st.activations_bytes > st.weight_pass_bytes)
      assert.are.equal(4.5, st.in_flight)
      assert.are.equal(0, st.pending_weight_bytes)
    end
  end)

  it("hold pp micro-batches on rank 1 under ZBVZeroBubble, as 1F1B does on rank 0", function()
    -- rank 1: 5 F0's; F1 F0 (7 chunks); 3 of F1 (8) I1 (8a + g) W1 (7);
    -- steady F0 (8) I0 (8a + g) W0 F1 (8) I1 (8a + g) W1 until the 8th F1;
    -- cool-down from 5 chunks: I0 I1 (5a + 2g), then I0 (5a + 3g) W0 ...
    -- 8a + g is the most when 3a >= 2g: 8 chunks (4 micro-batches) and one
    -- chunk's gradients
    local st = estimate("--set", "layers=30", "--set", "pp_schedule=ZBVZeroBubble").per_rank[2]
    assert.is_true(3 * st.activations_bytes >= 2 * st.weight_pass_bytes)
    assert.are.equal(4, st.in_flight)
    assert.are.equal(8 * LAYER // 2, st.pending_weight_bytes)
    assert.are.equal(4, estimate("--set", "layers=30", "--set", "pp_schedule=1F1B").per_rank[1].in_flight)
  end)

  it("hold pp micro-batches on rank 0 under InterleavedZeroBubble (ZB1P), as 1F1B does", function()
    -- 32 layers, 4 a stage; rank 0 holds stages 0 and 4. m = 8: rounds 2,
    -- per_round 4; warm-up (v - 1) 4 + (pp - 1) = 7 forwards (chunks
    -- 0,0,0,0,1,1,1), then F (chunk 1: 8 chunks, 4 micro-batches' worth),
    -- I of chunk 1 (stage 4's gradients kept: half of the rank's), its W
    -- at once (rank 0 delays none); stage 0's I does nothing, its W is
    -- the full backward. 8a + g, then less.
    local r = estimate("--set", "layers=32", "--set", "pp_layers=4,4,4,4,4,4,4,4",
      "--set", "pp_schedule=InterleavedZeroBubble")
    assert.are.equal(4, r.per_rank[1].in_flight)
    assert.are.equal(8 * LAYER // 2, r.per_rank[1].pending_weight_bytes)
  end)

  it("add what waits for weight passes to the peak", function()
    -- ZBV and DualPipeV place the same layers: rank 1's peak under DualPipeV
    -- is ZBV's with half a micro-batch's activations more and ZBV's pending
    -- gradients less; of that half micro-batch, the received input's half
    -- is one of the receive buffers both keep (boundary_bytes)
    local zbv = estimate("--set", "layers=30", "--set", "pp_schedule=ZBVZeroBubble").per_rank[2]
    local dual = estimate("--set", "layers=30", "--set", "pp_schedule=DualPipeV").per_rank[2]
    assert.are.equal(zbv.activations_bytes, dual.activations_bytes)
    assert.are.equal(zbv.pp_buffers_bytes, dual.pp_buffers_bytes)
    assert.are.equal(dual.peak_allocated_bytes - zbv.peak_allocated_bytes,
      zbv.activations_bytes // 2 - zbv.pending_weight_bytes - zbv.boundary_bytes // 2)
  end)

  it("place a V's stages i and 2 pp - 1 - i on rank i, pp_layers one count per stage", function()
    -- pp 2: rank 0 stages 0 and 3 (5 + 6 layers, counted from layer 0),
    -- rank 1 stages 1 and 2 (9 + 10, from layer 5)
    local r = estimate("--set", "layers=30", "--set", "pp=2", "--set", "pp_schedule=DualPipeV",
      "--set", "pp_layers=5,9,10,6")
    assert.are.same({ "0-10", "5-23" }, field(r, "layers"))
  end)

  it("say in the text what waits for weight passes, and only then", function()
    local function text(schedule)
      local args = { "estimate", "llama2-7b" }
      for _, a in ipairs(SHAPE) do args[#args + 1] = a end
      for _, a in ipairs({ "--set", "layers=30", "--set", "pp_schedule=" .. schedule }) do args[#args + 1] = a end
      return (helper.run(table.unpack(args)))
    end
    -- the worst rank of this layout is rank 3 (ranks 1-3 alike: 8 layers)
    local out = text("zbv")
    assert.truthy(out:find("gradients kept for the weight pass: 2.8 MiB a micro-batch", 1, true), out)
    assert.falsy(text("1F1B"):find("weight pass", 1, true))
  end)

  it("give the same peak folded and unfolded (the weight pass counted once per folded layer)", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 14), {
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "ZBVZeroBubble", num_microbatches = 4 },
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "DualPipeV", num_microbatches = 4,
        checkpointing = "full", use_reentrant = false },
      { framework = "fsdp2", dp = 8, pp = 2, pp_schedule = "InterleavedZeroBubble", num_microbatches = 4 },
    })
  end)

  it("take the short names and torchtitan's keys", function()
    for short, name in pairs({ zbv = "ZBVZeroBubble", ["zero-bubble"] = "InterleavedZeroBubble",
                                dualpipev = "DualPipeV" }) do
      assert.are.equal(name, estimate("--set", "layers=30", "--set", "pp_schedule=" .. short).recipe.pp_schedule)
    end
    -- torch's get_schedule_class takes any case: torchtitan's 1f1b is torch's
    local r = helper.estimate_on("llama2-7b", { "--set", "hidden=64", "--set", "heads=4", "--set", "kv_heads=4",
      "--set", "intermediate=128", "--set", "vocab=1000", "--set", "seq_len=256", "--set", "layers=30",
      "--set", "framework=megatron", "--set", "attention=flash", "--set", "num_microbatches=8" },
      "--set", "parallelism.pipeline_parallel_degree=4", "--set", "parallelism.pipeline_parallel_schedule=1f1b")
    assert.are.equal("1F1B", r.recipe.pp_schedule)
    assert.are.equal(4, r.recipe.pp)
  end)

  for name, test in helper.refusals("llama2-7b", { "framework=megatron", "pp=4", "layers=30" }, {
    { { "pp_schedule=DualPipeV", "num_microbatches=4" }, "num_microbatches: DualPipeV needs at least" },
    { { "pp_schedule=ZBVZeroBubble", "virtual_stages=3" }, "virtual_stages: ZBVZeroBubble and DualPipeV run " ..
      "exactly 2 stages per rank" },
    { { "pp_schedule=InterleavedZeroBubble", "num_microbatches=9" },
      "num_microbatches: InterleavedZeroBubble needs a multiple" },
  }) do it(name, test) end
end)
