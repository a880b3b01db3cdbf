-- FP8 training as Transformer Engine runs it (DelayedScaling): what it adds
-- (a cached FP8 weight and its transpose per linear layer, the scaling
-- state) and what it saves (each linear input kept as a 1-byte transpose
-- instead of a 16-bit tensor).
local helper = require("tests.lua.helper")

local function megatron(precision, ...)
  return helper.estimate("llama2-7b", "--set", "framework=megatron", "--set", "precision=" .. precision,
    "--set", "seq_len=2048", "--set", "attention=flash", ...)
end

describe("fp8", function()
  local h, f, layers = 4096, 11008, 32
  local linear = layers * (4 * h * h + 3 * h * f) -- every linear weight but the output layer

  it("keeps an FP8 copy of every linear weight and its transpose beside the bf16 one", function()
    local bf16, fp8 = megatron("mixed-bf16"), megatron("fp8")
    assert.are.equal(2 * linear, fp8.per_gpu.params_bytes - bf16.per_gpu.params_bytes)
    -- an fp32 amax history of 1024 and a scale for 5 tensors per linear layer
    assert.are.equal(layers * 7 * (1024 + 1) * 5 * 4, fp8.per_gpu.buffers_bytes - bf16.per_gpu.buffers_bytes)
    -- master weights, gradients and Adam states do not change
    assert.are.equal(bf16.per_gpu.master_bytes, fp8.per_gpu.master_bytes)
    assert.are.equal(bf16.per_gpu.optimizer_bytes, fp8.per_gpu.optimizer_bytes)
  end)

  it("keeps each linear input as one FP8 transpose, shared by the GEMMs of one input", function()
    local bf16, fp8 = megatron("mixed-bf16"), megatron("fp8")
    -- per layer and token: the two norm outputs (inputs of linear_qkv and
    -- linear_fc1, 2h bytes each) and the SwiGLU output (input of linear_fc2,
    -- 2f) are no longer kept; FP8 transposes of the four GEMM inputs are
    -- (h + h + h + f bytes; linear_proj's input, the attention output, stays
    -- kept by flash attention): h + f bytes fewer
    local tokens = 2048
    local saved = layers * tokens * (h + f)
    assert.is_true(fp8.per_gpu.activations_bytes < bf16.per_gpu.activations_bytes)
    assert.are.equal(saved, bf16.per_gpu.activations_bytes - fp8.per_gpu.activations_bytes)
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { precision = "fp8", framework = "megatron", tp = 2, sequence_parallel = true, dp = 2 },
      { precision = "fp8", framework = "megatron", checkpointing = "selective", attention = "eager" },
      { precision = "fp8", checkpointing = "every-2" },
    })
  end)
end)
