-- The recipe key loss: what each causal-LM loss keeps instead of HF's full
-- fp32 logits, on Llama-3.2-3B at 2 x 4096 tokens (docs/loss.md). The
-- timelines themselves are checked against PyTorch in tests/torch/compare.py
-- (the cases named "loss").
local helper = require("tests.lua.helper")

local TOKENS, VOCAB = 2 * 4096, 128256
local FP32_LOGITS = TOKENS * VOCAB * 4

local function peak(loss, ...)
  return helper.estimate("llama3.2-3b", "--set", "precision=bf16", "--set", "micro_batch=2", "--set", "seq_len=4096",
    "--set", "checkpointing=full", "--set", "optimizer=none", "--set", "loss=" .. loss, ...)
end

describe("loss", function()
  local base = peak("cross-entropy")

  it("defaults to HF's cross-entropy, unchanged", function()
    local r = helper.estimate("llama3.2-3b", "--set", "precision=bf16", "--set", "micro_batch=2", "--set",
      "seq_len=4096", "--set", "checkpointing=full", "--set", "optimizer=none")
    assert.are.equal("cross-entropy", r.recipe.loss)
    assert.are.equal(base.per_gpu.peak_allocated_bytes, r.per_gpu.peak_allocated_bytes)
    assert.is_nil(r.recipe.loss_chunks) -- shown with loss = chunked only
  end)

  it("saves at least one fp32 copy of the logits with each variant, more the less it materialises", function()
    local saved = {}
    for _, loss in ipairs({ "fused", "chunked", "fused-linear", "cut", "chunked-linear" }) do
      local r = peak(loss)
      assert.are.equal(loss, r.recipe.loss)
      saved[loss] = base.per_gpu.peak_allocated_bytes - r.per_gpu.peak_allocated_bytes
      assert.is_true(saved[loss] >= FP32_LOGITS, loss .. " saves " .. saved[loss])
    end
    -- fused keeps the 16-bit logits (the outputs, and the gradient written
    -- into them); chunked keeps every token's fp32 log-probabilities;
    -- fused-linear and cut keep no logits at all
    assert.is_true(saved.chunked > saved.fused)
    assert.is_true(saved["fused-linear"] > saved.chunked)
    assert.is_true(saved.cut >= saved["fused-linear"])
    assert.is_true(saved.cut >= 2 * FP32_LOGITS)
    -- chunked-linear keeps the fp32 log-probabilities too, but never all
    -- of the 16-bit logits at once: at these sizes the loss no longer binds
    assert.is_true(saved["chunked-linear"] > saved.chunked)
  end)

  it("is torchtune's chunked loss under stack = torchtune unless the recipe names one", function()
    local r = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=torchtune")
    assert.are.equal("chunked", r.recipe.loss)
    r = helper.estimate("llama3.2-1b", "--set", "seq_len=256", "--set", "stack=torchtune", "--set",
      "loss=chunked-linear")
    assert.are.equal("chunked-linear", r.recipe.loss)
  end)

  it("chunks torchtune's way: fewer chunks, a larger fp32 copy of one chunk", function()
    local eight = peak("chunked")
    local two = peak("chunked", "--set", "loss_chunks=2")
    assert.are.equal(8, eight.recipe.loss_chunks)
    assert.are.equal(2, two.recipe.loss_chunks)
    assert.is_true(two.per_gpu.peak_allocated_bytes > eight.per_gpu.peak_allocated_bytes)
  end)

  it("refuses bad values and layouts it does not model", function()
    local err = helper.fails("llama3.2-3b", "--set", "loss=chunky")
    assert.truthy(err:find("loss: 'chunky' is not one of cross-entropy, fused, chunked, fused-linear, cut, " ..
      "chunked-linear, liger-ce (did you mean 'chunked'?)", 1, true), err)
    err = helper.fails("llama3.2-3b", "--set", "loss=chunked", "--set", "loss_chunks=9")
    assert.truthy(err:find("loss_chunks: must be between 1 and 8 (got 9)", 1, true), err)
    err = helper.fails("llama3.2-3b", "--set", "loss=cut", "--set", "precision=fp32")
    assert.truthy(err:find("loss: cut cross-entropy's backward takes 16-bit hidden states and head weights only", 1,
      true), err)
    for _, loss in ipairs({ "fused", "chunked", "fused-linear", "cut", "chunked-linear", "liger-ce" }) do
      err = helper.fails("llama3.2-3b", "--set", "loss=" .. loss, "--set", "framework=megatron", "--set", "tp=2")
      assert.truthy(err:find("loss: the fused, chunked, fused-linear, cut, chunked-linear and liger-ce losses are modelled on one rank's " ..
        "whole vocabulary; framework megatron and tp > 1 use Megatron's vocab-parallel cross-entropy", 1, true), err)
    end
  end)

  it("refuses a loss library for a classifier or an encoder-decoder, naming the key", function()
    for _, model in ipairs({ "bert-base-cased", "t5-large" }) do
      for _, loss in ipairs({ "fused", "chunked", "fused-linear", "cut", "chunked-linear", "liger-ce" }) do
        local _, err, code = helper.run("estimate", model, "--set", "loss=" .. loss, "--set", "precision=bf16",
          "--set", "seq_len=128")
        assert.are.equal(1, code, model .. " " .. loss)
        assert.truthy(err:find("loss: ", 1, true), err)
      end
    end
  end)
end)
