-- Gemma 2 (models/gemma-2-{2b,9b,27b}.lua: the llama family with four norms
-- a layer, every other layer sliding, soft-capped scores and logits):
-- config.json files read like the model scripts, and what each of Gemma 2's
-- own steps adds, from transformers' code (Gemma2ForCausalLM, 4.50-4.52).
-- The whole step is checked against PyTorch in tests/torch/compare.py; the
-- parameter counts in reference_spec; folding in engine_spec.
local helper = require("tests.lua.helper")

local function per_gpu(...)
  return helper.estimate("gemma-2-2b", "--set", "seq_len=1024", "--set", "micro_batch=2", ...).per_gpu
end

-- gemma-2-2b: 26 layers, 8 query heads, a 256000-word head
local layers, heads, vocab, batch, seq = 26, 8, 256000, 2, 1024

describe("Gemma 2", function()
  it("reads a Gemma 2 config.json like the model script it describes", function()
    helper.assert_same_model("tests/fixtures/gemma-2-9b-config.json", "models/gemma-2-9b.lua")
  end)

  it("keeps one more bf16 logits tensor for the final soft cap (tanh saves its output)", function()
    -- logits / 30, torch.tanh (saved), * 30: the capped logits replace the
    -- raw ones as the outputs' logits; the quotient and the raw logits go
    local capped = per_gpu("--set", "attention=flash").activations_bytes
    local uncapped = per_gpu("--set", "attention=flash", "--set", "final_softcap=0").activations_bytes
    assert.are.equal(batch * seq * vocab * 2, capped - uncapped)
  end)

  it("keeps one more bf16 score tensor a layer for the attention soft cap under eager attention", function()
    local capped = per_gpu("--set", "attention=eager").activations_bytes
    local uncapped = per_gpu("--set", "attention=eager", "--set", "attn_softcap=0").activations_bytes
    assert.are.equal(layers * batch * heads * seq * seq * 2, capped - uncapped)
  end)

  it("hands SDPA the model's mask on every layer and a copy of its own on the sliding ones", function()
    -- Gemma2Model has no _ignore_causal_mask_sdpa: SDPA gets the 4-D mask
    -- and runs its memory-efficient kernel, which saves the bias. Global
    -- layers pass the model's [s, s] mask (expanded: one storage); sliding
    -- layers their own [b, 1, s, s] copy. In bf16 neither is cast or padded.
    local function activations(...)
      return per_gpu("--set", "attention=sdpa", "--set", "precision=bf16", "--set", "use_cache=false", ...)
        .activations_bytes
    end
    local hybrid = activations()
    local plain = activations("--set", "sliding_pattern=0", "--set", "sliding_window=0")
    local sliding_layers = layers // 2
    assert.are.equal(sliding_layers * batch * seq * seq * 2 + seq * seq * 2, hybrid - plain)
  end)

  it("makes the sliding layers' masks only where there is a 4-D mask (none under FlashAttention-2)", function()
    -- with flash the masks are gone, so sliding or not changes nothing
    local function peak(...)
      return per_gpu("--set", "attention=flash", "--set", "use_cache=false", ...).peak_allocated_bytes
    end
    assert.are.equal(peak(), peak("--set", "sliding_pattern=0", "--set", "sliding_window=0"))
  end)

  it("keeps no key/value cache in training (Gemma2Model makes its HybridCache only for inference)", function()
    local default = per_gpu("--set", "attention=flash").activations_bytes
    assert.are.equal(default, per_gpu("--set", "attention=flash", "--set", "use_cache=false").activations_bytes)
  end)

  it("refuses what is not modelled, naming the key", function()
    local err = helper.fails("gemma-2-2b", "--set", "framework=megatron")
    assert.matches("framework: Gemma 2's and Gemma 3's attention", err, 1, true)
    err = helper.fails("gemma-2-2b", "--set", "finetune=prefix", "--set", "num_virtual_tokens=8")
    assert.matches("finetune: prefix tuning of Gemma 2 and Gemma 3", err, 1, true)
    err = helper.fails("gemma-2-2b", "--set", "sliding_window=0")
    assert.matches("sliding_pattern", err, 1, true)
  end)
end)
