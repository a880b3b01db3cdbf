-- Gemma 3's text model (models/gemma-3-1b.lua: Gemma 2's layers with one
-- global layer in six, per-head q/k norms, the sliding layers' own rotary
-- tables): config.json files read like the model script, and what each of
-- its own steps adds, from transformers' code (Gemma3ForCausalLM,
-- 4.50-4.52). The whole step is checked against PyTorch in
-- tests/torch/compare.py; the parameter count in reference_spec.
local helper = require("tests.lua.helper")

local function activations(...)
  return helper.estimate("gemma-3-1b", "--set", "seq_len=1024", "--set", "micro_batch=2", ...).per_gpu.activations_bytes
end

-- gemma-3-1b: 26 layers (5, 11, 17 and 23 global), 4 query heads and one
-- key/value head of 256
local layers, sliding_layers, head_dim, qk_heads, batch, seq = 26, 22, 256, 4 + 1, 2, 1024

describe("Gemma 3", function()
  it("reads a Gemma 3 config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/gemma-3-1b-config.json", "models/gemma-3-1b.lua")
  end)

  it("keeps the sliding layers' rotary tables beside the global ones", function()
    -- rotary_emb_local's cos and sin, [1, s, head_dim] in bf16, are what the
    -- sliding layers' q * cos and rotate_half(q) * sin keep for backward
    local two_pairs = activations("--set", "attention=flash")
    local one_pair = activations("--set", "attention=flash", "--set", "local_rope=false")
    assert.are.equal(2 * seq * head_dim * 2, two_pairs - one_pair)
  end)

  it("keeps each query and key head's normalized rows in fp32 (Gemma3RMSNorm), where Qwen3's norm keeps bf16", function()
    -- 2 bytes more per element of q and k, and each norm's fp32 (1 + weight)
    -- of one head (1 KiB) where LlamaRMSNorm keeps the weight itself
    local gemma = activations("--set", "attention=flash", "--set", "precision=bf16")
    local llama = activations("--set", "attention=flash", "--set", "precision=bf16", "--set", "qk_norm_style=head")
    assert.are.equal(layers * (2 * batch * seq * qk_heads * head_dim + 2 * 4 * head_dim), gemma - llama)
  end)

  it("hands SDPA its mask on every layer and a copy of its own on five layers in six", function()
    local function sdpa(...)
      return activations("--set", "attention=sdpa", "--set", "precision=bf16", "--set", "use_cache=false", ...)
    end
    local hybrid = sdpa()
    local plain = sdpa("--set", "sliding_pattern=0", "--set", "sliding_window=0", "--set", "local_rope=false")
    -- the sliding layers' masks, the model's (kept by the global layers) and the second rotary pair
    assert.are.equal(sliding_layers * batch * seq * seq * 2 + seq * seq * 2 + 2 * seq * head_dim * 2, hybrid - plain)
  end)

  it("refuses the multimodal gemma3 config (a vision tower beside the text model), naming the key", function()
    helper.assert_config_rejected('{"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}',
      "model_type")
  end)

  it("refuses a second rotary pair without sliding layers, naming the field", function()
    local err = helper.fails("gemma-3-1b", "--set", "sliding_pattern=0", "--set", "sliding_window=0")
    assert.matches("local_rope", err, 1, true)
  end)
end)
