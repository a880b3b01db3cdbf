-- The engine as a Lua module: `require "vramplan"` from plain lua5.4, and
-- the folding of identical layers, which must change nothing but speed.
local helper = require("tests.lua.helper")
local vramplan = require("vramplan")
local arch = require("vramplan.arch")
local models = require("vramplan.models")

local function build(name, overrides)
  local origins = {}
  for k in pairs(overrides or {}) do origins[k] = "test" end
  return (arch.build(models.describe(helper.root, name), overrides, origins))
end

describe("require 'vramplan'", function()
  it("loads from plain lua5.4 and exposes the engine", function()
    assert.are.equal("string", type(vramplan.version))
    assert.are.equal(4 * 1000, vramplan.tensor_bytes("fp32", 1000))
    -- NF4 with double quantization: 4-bit values, an 8-bit absmax per 64
    -- and an fp32 scale per 256 absmax values (QLoRA, section 2)
    assert.are.equal(4096 * 4096 / 2 + 4096 * 4096 / 64 + 4096 * 4096 / 64 / 256 * 4,
      vramplan.tensor_bytes("nf4-dq", 4096 * 4096))
  end)

  it("rejects an op field it does not know, naming the op", function()
    local ok, err = pcall(vramplan.op, "attention", { hidden = 64, heads = 4, hedas = 2 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("attention: unknown field 'hedas' (did you mean 'heads'?)", 1, true))
  end)

  it("rejects fused and rotary fields that do not hold together, naming the op", function()
    for _, case in ipairs({
      { { hidden = 64, heads = 4, kv_heads = 2, fused_qkv = true }, "fused_qkv with fewer kv_heads than heads" },
      { { hidden = 64, heads = 4, module_names = "phi3" }, "module_names = \"phi3\" names a fused qkv_proj" },
      { { hidden = 64, heads = 4, rotary_cat = true }, "rotary_cat needs rotary" },
      { { hidden = 64, heads = 4, rotary = true, rotary_dim = 6 }, "rotary_dim needs rotary_cat" },
    }) do
      local ok, err = pcall(vramplan.op, "attention", case[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find("attention: " .. case[2], 1, true), tostring(err))
    end
    local ok, err = pcall(vramplan.op, "mlp", { hidden = 64, intermediate = 128, module_names = "phi3" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("mlp: module_names = \"phi3\" names a fused gate_up_proj", 1, true), tostring(err))
  end)

  it("takes a family's norm registration order by name, and rejects one it does not know", function()
    local function model(norms_registered)
      return pcall(vramplan.model, {
        embed = { vramplan.op("token_embedding", { vocab = 10, hidden = 8 }) },
        layer = { vramplan.op("rmsnorm", { hidden = 8 }) },
        layers = 1,
        final = { vramplan.op("lm_head", { vocab = 10, hidden = 8 }), vramplan.op("cross_entropy", {}) },
        norms_registered = norms_registered,
      })
    end
    for _, how in ipairs({ "in_place", "last", "first", "after_branch" }) do assert.is_true((model(how))) end
    for _, bad in ipairs({ "lastt", 2 }) do
      local ok, err = model(bad)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("model: 'norms_registered' must be in_place, last, first or after_branch", 1,
        true), tostring(err))
    end
  end)

  it("rejects this session's op fields where they do not hold together, naming the op", function()
    for _, case in ipairs({
      { "attention", { hidden = 64, heads = 4, rotary = true, rotary_locals = true }, "rotary_locals needs rotary_cat" },
      { "attention", { hidden = 64, heads = 4, fused_qkv = true, module_names = "phi" },
        "module_names = \"phi\" names Phi-2's separate q_proj" },
      { "mlp", { hidden = 64, intermediate = 128, gated = true, module_names = "phi" },
        "module_names = \"phi\" names Phi-2's fc1 and fc2" },
      { "moe", { hidden = 64, intermediate = 32, experts = 4, top_k = 2, block = "deepseek", output_router_logits = true },
        "output_router_logits is transformers' sparse blocks'" },
      { "router_aux_loss", { experts = 4, top_k = 8 }, "top_k cannot exceed experts" },
    }) do
      local ok, err = pcall(vramplan.op, case[1], case[2])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[1] .. ": " .. case[3], 1, true), tostring(err))
    end
  end)
end)

describe("folding identical layers", function()
  local recipes = {
    { precision = "fp32", attention = "eager" },
    { precision = "bf16", attention = "eager", checkpointing = "full" },
    { precision = "amp-bf16", attention = "eager", checkpointing = "every-3" },
    { precision = "mixed-bf16", attention = "flash", optimizer_impl = "for-loop" },
    { precision = "amp-fp16", attention = "sdpa", checkpointing = "every-2", keep_logits = false },
    { precision = "mixed-fp16", attention = "sdpa-mem-efficient", optimizer = "sgd-momentum" },
    { precision = "bf16", attention = "eager", torch_version = "1.13", device = "cpu", grads_set_to_none = false },
    { dp = 4, ddp_bucket_view = true, checkpointing = "full" },
    { framework = "deepspeed", zero = 2, dp = 8, offload_optimizer = "cpu" },
    { framework = "deepspeed", zero = 3, dp = 8, checkpointing = "every-2", attention = "eager" },
    { framework = "fsdp", dp = 8, precision = "mixed-bf16", checkpointing = "full" },
    { framework = "fsdp", fsdp = "shard_grad_op", dp = 4, precision = "amp-bf16" },
    { framework = "fsdp", fsdp = "hybrid_shard", fsdp_shard_size = 4, dp = 16, precision = "bf16" },
  }
  for _, name in ipairs({ "gpt2", "llama2-7b", "mistral-7b", "phi-3-mini-4k", "phi-4", "gemma-2-9b", "gemma-3-1b", "pythia-1b", "phi-2" }) do
    for i, recipe in ipairs(recipes) do
      it(string.format("gives the same answer as layer-by-layer evaluation (%s, recipe %d)", name, i), function()
        local model = build(name, { layers = 7 })
        recipe.seq_len, recipe.micro_batch = 256, 2
        local folded = vramplan.estimate(model, recipe, nil, { fold = true })
        local unfolded = vramplan.estimate(model, recipe, nil, { fold = false })
        for _, k in ipairs({ "peak_allocated_bytes", "peak_unrounded_bytes", "peak_reserved_bytes",
          "activations_bytes", "grads_bytes", "peak_phase", "peak_layer", "peak_op" }) do
          assert.are.equal(unfolded[k], folded[k], k)
        end
        assert.are.same(unfolded.peak_breakdown, folded.peak_breakdown)
      end)
    end
  end
end)

describe("the timeline", function()
  it("starts and ends at the resident state, and peaks where the result says", function()
    local model = build("llama2-7b", { layers = 3 })
    -- the CUDA caching allocator's blocks, and the CPU twin's exact bytes
    for _, device in ipairs({ "cuda", "cpu" }) do
      local r = vramplan.estimate(model, { seq_len = 500, attention = "eager", device = device }, nil,
        { timeline = true, fold = false })
      local top, top_event, live = 0, nil, 0
      for _, e in ipairs(r.timeline) do
        live = live + e.delta
        assert.are.equal(live, e.live)
        if e.live > top then top, top_event = e.live, e end
      end
      assert.are.equal(r.peak_allocated_bytes, top)
      assert.are.equal(r.peak_phase, top_event.phase)
      assert.are.equal(r.resident_bytes, r.timeline[#r.timeline].live)
    end
  end)
end)

describe("use_cache", function()
  local function run(...)
    return helper.estimate("llama3-8b", "--set", "precision=bf16", "--set", "micro_batch=1", "--set", "seq_len=512",
      "--set", "attention=eager", ...).per_gpu
  end

  it("keeps every layer's keys and values with the outputs", function()
    -- Llama-3-8B: 32 layers, 8 key/value heads of 128; eager attention
    -- saves the repeated copies, so the cache's own tensors are extra
    local cached, uncached = run(), run("--set", "use_cache=false")
    assert.are.equal(32 * 2 * 512 * 8 * 128 * 2, cached.activations_bytes - uncached.activations_bytes)
  end)

  it("is off under gradient checkpointing, as transformers turns it off", function()
    local cached = run("--set", "checkpointing=full")
    local uncached = run("--set", "checkpointing=full", "--set", "use_cache=false")
    assert.are.equal(uncached.peak_allocated_bytes, cached.peak_allocated_bytes)
  end)
end)
