-- 2:4 structured sparsity as NVIDIA apex's ASP trains it (sparsity = "2:4"):
-- a bool mask beside every trained nn.Linear weight, nothing saved. The
-- counts below come from the models' published shapes.
local helper = require("tests.lua.helper")

local function buffers(model, ...)
  return helper.estimate(model, "--set", "seq_len=128", ...).per_gpu
end

local function masks(model, ...)
  local with, without = buffers(model, "--set", "sparsity=2:4", ...), buffers(model, ...)
  assert.are.equal(without.activations_bytes, with.activations_bytes)
  assert.are.equal(without.params_bytes, with.params_bytes)
  assert.are.equal(without.optimizer_bytes, with.optimizer_bytes)
  return with.buffers_bytes - without.buffers_bytes
end

describe("2:4 sparsity (apex ASP)", function()
  it("adds a byte per linear weight and saves nothing", function()
    -- Llama-2-7B: 6,738,415,616 parameters less the embeddings
    -- (32000 x 4096) and 65 RMSNorm weights of 4096
    assert.are.equal(6738415616 - 32000 * 4096 - 65 * 4096, masks("llama2-7b"))
  end)

  it("passes GPT-2's Conv1D layers by and masks its tied head", function()
    -- only lm_head is an nn.Linear; its weight is the embedding's
    assert.are.equal(50257 * 768, masks("gpt2"))
  end)

  it("skips fp32 weights whose shape the sparse tensor cores cannot take", function()
    -- BERT-large in fp32: q, k, v, o (1024 x 1024), the MLP (2 x 4096 x 1024)
    -- of 24 layers and the pooler; the classifier's 2 rows are no multiple of 8
    local layer = 4 * 1024 * 1024 + 2 * 4096 * 1024
    assert.are.equal(24 * layer + 1024 * 1024, masks("bert-large-uncased", "--set", "precision=fp32"))
  end)

  it("masks LoRA's A, not its B, nor the frozen base", function()
    -- r = 8 on q_proj and v_proj of 32 layers, fp32 adapters: A is 8 x 4096;
    -- B (4096 x 8) has 8 columns, no multiple of 16
    assert.are.equal(2 * 32 * 8 * 4096, masks("llama2-7b", "--set", "finetune=lora", "--set", "precision=bf16"))
  end)

  it("rejects Megatron's modules", helper.rejection(
    { "llama2-7b", "--set", "framework=megatron", "--set", "sparsity=2:4" },
    "sparsity: modelled as apex's ASP on a PyTorch module"))
end)
