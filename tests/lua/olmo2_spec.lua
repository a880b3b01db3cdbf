-- OLMo 2 (models/olmo-2-7b.lua: the llama family with norm_style "olmo2",
-- norm_position "post" and qk_norm): config.json files read like the model
-- scripts, and what the norms over the whole query and key projections
-- keep. (The activations are checked against PyTorch in
-- tests/torch/compare.py; the parameter count in reference_spec.)
local helper = require("tests.lua.helper")

describe("OLMo 2", function()
  it("reads an OLMo 2 config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/olmo-2-7b-config.json", "models/olmo-2-7b.lua")
  end)

  it("keeps the fp32 copy and the fp32 normalized rows of every query and key projection", function()
    -- Olmo2RMSNorm over q_proj's and k_proj's outputs: pow and the rsqrt
    -- product keep the fp32 copy, the weight's product the fp32 rows, and
    -- rsqrt its fp32 output per token; the bf16 result is what the rotary
    -- embedding takes, as without the norm. 32 layers, 2 norms of 4096.
    local function activations(qk_norm)
      return helper.estimate("olmo-2-7b", "--set", "precision=bf16", "--set", "seq_len=1024", "--set", "use_cache=false",
        "--set", "qk_norm=" .. tostring(qk_norm)).per_gpu.activations_bytes
    end
    local tokens = 1024
    assert.are.equal(32 * 2 * (2 * 4096 * tokens * 4 + tokens * 4), activations(true) - activations(false))
  end)

  it("models the norms over whole projections without tensor parallelism", function()
    local err = helper.fails("olmo-2-7b", "--set", "framework=megatron", "--set", "tp=2", "--set", "seq_len=256")
    assert.truthy(err:find("q_norm and k_norm span the whole projection", 1, true), err)
  end)
end)
