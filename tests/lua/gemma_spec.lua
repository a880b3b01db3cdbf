-- Gemma (models/gemma-2b.lua, models/gemma-7b.lua: the llama family with
-- norm_style "gemma" and embed_scale): config.json files read like the
-- model scripts, and what GemmaRMSNorm keeps. (The activations are checked
-- against PyTorch in tests/torch/compare.py, the embedding normalizer
-- included; the parameter counts in reference_spec.)
local helper = require("tests.lua.helper")

describe("Gemma", function()
  it("reads a Gemma config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/gemma-7b-config.json", "models/gemma-7b.lua")
  end)

  it("keeps each norm's normalized rows in fp32, where LLaMA's norm keeps them in the model's dtype", function()
    -- GemmaRMSNorm multiplies by (1 + weight) before casting back: the
    -- product saves the fp32 rows; LlamaRMSNorm saves them cast to bf16.
    -- Two norms a layer and the final one, 2 bytes more per element each.
    local function activations(style)
      return helper.estimate("gemma-2b", "--set", "precision=bf16", "--set", "seq_len=512", "--set", "use_cache=false",
        "--set", "norm_style=" .. style).per_gpu.activations_bytes
    end
    local tokens, hidden, norms = 512, 2048, 2 * 18 + 1
    -- and each keeps its fp32 (1 + weight), where LLaMA's keeps the weight
    -- itself; the allocator rounds each to 512 bytes
    local want = norms * (2 * hidden * tokens + 4 * hidden)
    local diff = activations("gemma") - activations("llama")
    assert.is_true(math.abs(diff - want) <= norms * 512, string.format("%d vs %d", diff, want))
  end)
end)
