-- Pipeline parallelism: the stages, the micro-batches each holds in flight
-- under each schedule, and the per-rank report.
local helper = require("tests.lua.helper")

local function pipeline(...)
  return helper.estimate("llama2-7b", "--set", "framework=megatron", "--set", "seq_len=1024",
    "--set", "attention=flash", ...)
end

local function in_flight(r)
  local t = {}
  for i, st in ipairs(r.per_rank) do t[i] = st.in_flight end
  return t
end

describe("pipeline schedules", function()
  it("1F1B: stage i holds pp - i micro-batches (Narayanan et al. 2021)", function()
    local r = pipeline("--set", "pp=4", "--set", "num_microbatches=8")
    assert.are.same({ 4, 3, 2, 1 }, in_flight(r))
  end)

  it("1F1B with fewer micro-batches than stages holds at most all of them", function()
    assert.are.same({ 2, 2, 2, 1 }, in_flight(pipeline("--set", "pp=4", "--set", "num_microbatches=2")))
  end)

  it("GPipe: every stage holds every micro-batch", function()
    assert.are.same({ 8, 8, 8, 8 }, in_flight(pipeline("--set", "pp=4", "--set", "pp_schedule=gpipe",
      "--set", "num_microbatches=8")))
  end)

  it("interleaved 1F1B: (2(pp - i - 1) + (v - 1)pp + 1) chunks of 1/v of a stage", function()
    -- Megatron's forward_backward_pipelining_with_interleaving warm-up, plus
    -- the one in progress; for the first stage 1 + (pp - 1)/(pp v) stages'
    -- worth of micro-batches times pp (Korthikanti et al. 2022, 4.2.3)
    local r = pipeline("--set", "pp=4", "--set", "pp_schedule=interleaved-1f1b", "--set", "virtual_stages=2",
      "--set", "num_microbatches=16")
    assert.are.same({ 11 / 2, 9 / 2, 7 / 2, 5 / 2 }, in_flight(r))
    assert.are.equal(4 * (1 + 3 / 8), r.per_rank[1].in_flight)
  end)
end)

describe("pipeline stages", function()
  it("splits the layers, puts the embeddings first and the head last, and reports the worst stage", function()
    local r = pipeline("--set", "pp=4", "--set", "num_microbatches=8")
    assert.are.equal("0-7", r.per_rank[1].layers)
    assert.are.equal("24-31", r.per_rank[4].layers)
    -- the first stage holds the embedding, the last the head: 32000 x 4096 each
    local layer_params = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert.are.equal(2 * (8 * layer_params + 32000 * 4096), r.per_rank[1].params_bytes)
    assert.are.equal(2 * (8 * layer_params + 32000 * 4096 + 4096), r.per_rank[4].params_bytes)
    assert.are.equal(2 * 8 * layer_params, r.per_rank[2].params_bytes)
    -- under 1F1B the first stage holds the most
    local worst = 1
    for i, st in ipairs(r.per_rank) do
      if st.peak_total_bytes > r.per_rank[worst].peak_total_bytes then worst = i end
    end
    assert.are.equal(r.per_rank[worst].peak_total_bytes, r.per_gpu.peak_total_bytes)
    assert.are.equal(1, worst)
  end)

  it("adds the in-flight micro-batches' activations to a stage's peak", function()
    local one = pipeline("--set", "pp=4", "--set", "num_microbatches=1")
    local four = pipeline("--set", "pp=4", "--set", "num_microbatches=4")
    local a, b = one.per_rank[1], four.per_rank[1]
    assert.are.equal(1, a.in_flight)
    assert.are.equal(4, b.in_flight)
    -- with more micro-batches the gradients already exist in later backwards,
    -- and three more micro-batches' activations are held
    assert.is_true(b.peak_allocated_bytes - a.peak_allocated_bytes >= 3 * b.activations_bytes)
  end)

  it("interleaved: holds the last stage's head and loss for one micro-batch, the layers for all in flight", function()
    -- Megatron's interleaved warm-up on the last rank runs (v - 1) pp chunk
    -- forwards of its first chunk; the last chunk's forward (head, loss)
    -- comes next and its backward at once, so the extra micro-batches hold
    -- only the layers' activations: 1.5 x (activations - head) more at 8
    -- micro-batches (in flight 2.5) than at one (in flight 1)
    local function last(m)
      local r = helper.estimate("llama3-8b", "--set", "framework=megatron", "--set", "seq_len=4096", "--set", "pp=4",
        "--set", "pp_schedule=interleaved-1f1b", "--set", "virtual_stages=2", "--set", "grad_accum=" .. m)
      return r.per_rank[4]
    end
    local one, eight = last(1), last(8)
    assert.are.equal(1, one.in_flight)
    assert.are.equal(2.5, eight.in_flight)
    -- the 128,256-word head's logits and loss are a large part of the stage's activations
    assert.is_true(eight.head_activations_bytes > eight.activations_bytes / 3)
    assert.are.equal(one.peak_allocated_bytes + 1.5 * (eight.activations_bytes - eight.head_activations_bytes),
      eight.peak_allocated_bytes)
    -- no head on the other stages
    local r = helper.estimate("llama3-8b", "--set", "framework=megatron", "--set", "seq_len=4096", "--set", "pp=4",
      "--set", "pp_schedule=interleaved-1f1b", "--set", "virtual_stages=2", "--set", "grad_accum=8")
    assert.are.equal(0, r.per_rank[1].head_activations_bytes)
  end)

  it("follows a custom layout", function()
    local r = pipeline("--set", "pp=3", "--set", "pp_layers=10,12,10")
    assert.are.equal("0-9", r.per_rank[1].layers)
    assert.are.equal("10-21", r.per_rank[2].layers)
    assert.are.equal("22-31", r.per_rank[3].layers)
  end)

  it("agrees with evaluating every layer", function()
    local vramplan = require("vramplan")
    local arch = require("vramplan.arch")
    local model = arch.build(require("vramplan.models").describe(helper.root, "llama2-7b"), { layers = 7 },
      { layers = "test" })
    for _, recipe in ipairs({
      { framework = "megatron", pp = 3, num_microbatches = 6, checkpointing = "full" },
      { framework = "megatron", pp = 2, tp = 2, sequence_parallel = true, attention = "eager" },
      { pp = 3, pp_schedule = "gpipe", num_microbatches = 4, precision = "amp-bf16" },
      { framework = "deepspeed", zero = 1, dp = 2, pp = 2, num_microbatches = 4 },
    }) do
      recipe.seq_len = 256
      local a = vramplan.estimate(model, recipe, nil, { fold = true })
      local b = vramplan.estimate(model, recipe, nil, { fold = false })
      for i = 1, #a.ranks do
        assert.are.equal(b.ranks[i].peak_allocated_bytes, a.ranks[i].peak_allocated_bytes)
        assert.are.equal(b.ranks[i].activations_bytes, a.ranks[i].activations_bytes)
        assert.are.equal(b.ranks[i].peak_layer, a.ranks[i].peak_layer)
      end
    end
  end)
end)

describe("pipeline layouts that do not hold together", function()
  local function fails(...)
    local _, err, code = helper.run("estimate", "llama2-7b", ...)
    assert.are.equal(1, code, err)
    return err
  end
  it("names the key", function()
    assert.truthy(fails("--set", "pp=64"):find("pp: more stages than layers", 1, true))
    assert.truthy(fails("--set", "pp=2", "--set", "pp_layers=10,10"):find("pp_layers: the counts must add up", 1, true))
    assert.truthy(fails("--set", "pp=3", "--set", "pp_layers=16,16"):find("pp_layers: one layer count per stage", 1, true))
    assert.truthy(fails("--set", "virtual_stages=2", "--set", "pp=2"):find("virtual_stages: needs pp_schedule", 1, true))
    assert.truthy(fails("--set", "pp=3", "--set", "pp_schedule=interleaved-1f1b", "--set", "virtual_stages=2")
      :find("virtual_stages: pp x virtual_stages must divide the layers", 1, true))
    assert.truthy(fails("--set", "gpus=8", "--set", "dp=2", "--set", "pp=2")
      :find("gpus: must equal dp x tp x pp", 1, true))
    assert.truthy(fails("--set", "pp_layers=a,b"):find("pp_layers: must list the layers of each stage", 1, true))
  end)
end)
