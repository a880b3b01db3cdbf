-- Checks against the world: published parameter counts and the published
-- arithmetic of model states.
local helper = require("tests.lua.helper")
describe("published parameter counts", function()
  -- tests/reference/models.json: each count with the place it is published
  for _, entry in ipairs(helper.read_json("tests/reference/models.json")) do
    it(entry.model .. " has " .. entry.published_params .. " parameters (" .. entry.source .. ")", function()
      local r = helper.estimate(entry.model, "--set", "seq_len=128")
      assert.are.equal(entry.published_params, r.model.params)
    end)
  end
end)

describe("parameter counts published rounded", function()
  -- DeepSeek-V3's README_WEIGHTS.md (deepseek-ai/DeepSeek-V3): "Total
  -- parameters: 671B" for the main model, without the multi-token
  -- prediction module transformers does not load
  it("deepseek-v3 has 671B parameters in its main model", function()
    local r = helper.estimate("deepseek-v3", "--set", "seq_len=128")
    assert.are.equal(671, math.floor(r.model.params / 1e9 + 0.5))
  end)

  -- DeepSpeed's memory.rst runs its estimator on t5-3b: "2851M total
  -- params" (T5Model; with the tied head T5ForConditionalGeneration has no
  -- more)
  it("t5-3b has 2851M parameters", function()
    local r = helper.estimate("t5-3b", "--set", "seq_len=128")
    assert.are.equal(2851, math.floor(r.model.params / 1e6))
  end)

  -- bigscience/mt0-xxl's model card: 13B parameters
  it("mt0-xxl has 13B parameters", function()
    local r = helper.estimate("mt0-xxl", "--set", "seq_len=128")
    assert.are.equal(13, math.floor(r.model.params / 1e9 + 0.5))
  end)
end)

describe("accelerate estimate-memory's \"Training using Adam\" (bert-base-cased)", function()
  -- HF Accelerate's model-size estimator prints 4 x the model's size for
  -- training with Adam (weights, gradients, two moments): 1.61 GB in fp32
  -- and 826.36 MB in fp16 for bert-base-cased (binary units; its docs'
  -- usage guide "Model memory estimator"; reference accel-02). That is
  -- pure training in one dtype, which vramplan's fp32 and fp16 recipes
  -- match; "fp16 training" as AMP or mixed precision keeps fp32 weights or
  -- master copies and takes twice the fp16 figure.
  local function states(precision)
    local p = helper.estimate("bert-base-cased", "--set", "precision=" .. precision, "--set", "optimizer=adam",
      "--set", "seq_len=128").per_gpu
    return p.params_bytes + p.grads_bytes + p.master_bytes + p.optimizer_bytes
  end
  it("is vramplan's fp32 model states: 1.61 GiB", function()
    assert.is_true(math.abs(states("fp32") / 2 ^ 30 - 1.61) < 0.005)
  end)
  it("is vramplan's pure-fp16 model states: 826.36 MiB (4 x the 206.59 MiB it prints)", function()
    assert.is_true(math.abs(states("fp16") / 2 ^ 20 - 826.36) < 0.03)
  end)
  it("is half of what AMP or mixed-precision Adam keeps", function()
    assert.are.equal(2 * states("fp16"), states("amp-fp16"))
    assert.are.equal(2 * states("fp16"), states("mixed-fp16"))
  end)
end)

describe("model states of mixed-precision Adam", function()
  -- Rajbhandari et al. 2020 (ZeRO), section 3.1: fp16 parameters and
  -- gradients (2 + 2 bytes) and fp32 parameters, momentum and variance
  -- (K = 12 bytes) per parameter: 16 bytes, "at least 24 GB" for GPT-2 1.5B.
  it("is 16 bytes per parameter, as the ZeRO paper counts it", function()
    local r = helper.estimate("gpt2-xl", "--set", "precision=mixed-fp16", "--set", "optimizer=adam",
      "--set", "seq_len=128")
    local n = r.model.params
    local states = r.per_gpu.params_bytes + r.per_gpu.grads_bytes + r.per_gpu.master_bytes + r.per_gpu.optimizer_bytes
    assert.are.equal(16 * n, states)
    assert.is_true(states >= 24e9) -- the paper's "at least 24 GB" for 1.5B parameters (reference zero-09)
  end)
end)
