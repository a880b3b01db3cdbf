-- DeepSeekMoE's own loss head: DeepseekForCausalLM.forward of
-- deepseek-ai/deepseek-moe-16b-base's modeling_deepseek.py (the checkpoint's
-- auto_map; transformers has no model_type deepseek) computes
--   logits = self.lm_head(hidden_states); logits = logits.float()
--   shift_logits = logits[..., :-1, :].contiguous()
--   shift_labels = labels[..., 1:].contiguous()
--   loss = CrossEntropyLoss()(shift_logits.view(-1, V), shift_labels.view(-1))
-- and returns the fp32 logits in its outputs, where transformers' own
-- ForCausalLMLoss (4.46+; shifted_loss = false below) pads and shifts the
-- labels, not the logits, and drops its fp32 copy when it returns. The
-- loss phase's high-water mark differs by exactly those tensors; the
-- timelines themselves are checked against PyTorch in tests/torch/compare.py
-- (the cases named deepseek-moe).
local helper = require("tests.lua.helper")

local B, S, VOCAB = 2, 256, 102400 -- deepseek-moe-16b-base config.json: vocab_size 102400

-- PyTorch's caching allocator rounds every request up to 512 bytes
-- (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize)
local function rounded(bytes) return (bytes + 511) // 512 * 512 end

local function loss_high_water(precision, shifted_loss)
  local fields = shifted_loss == nil and {} or { shifted_loss = shifted_loss }
  return helper.phase_high_water(helper.model("deepseek-moe-16b", 2, fields),
    { precision = precision, micro_batch = B, seq_len = S, optimizer = "none" }, "loss")
end

describe("DeepSeekMoE's own loss", function()
  -- the shifted copy: every position but the last, fp32
  local copy = rounded(B * (S - 1) * VOCAB * 4)
  -- ForCausalLMLoss's log-probabilities have one more row a sequence, and
  -- it pads the labels to S + 1 (int64) before shifting them (the shifted
  -- labels themselves, B * (S - 1) and B * S int64, round to the same size)
  local fewer_rows = B * VOCAB * 4
  local padded_labels = rounded(B * (S + 1) * 8)

  it("copies the fp32 logits of every position but the last (fp32: logits.float() copies nothing)", function()
    local own, hf = loss_high_water("fp32"), loss_high_water("fp32", false)
    assert.are.equal(copy - fewer_rows - padded_labels, own - hf)
  end)

  it("keeps the fp32 logits in its outputs instead of the 16-bit ones (bf16)", function()
    local own, hf = loss_high_water("bf16"), loss_high_water("bf16", false)
    -- ForCausalLMLoss holds the bf16 logits (the outputs') beside its fp32
    -- copy; DeepSeek's forward frees the bf16 ones once .float() made theirs
    local bf16_logits = B * S * VOCAB * 2
    assert.are.equal(copy - fewer_rows - padded_labels - bf16_logits, own - hf)
  end)

  it("is Megatron's own loss under framework = megatron (its GPTModel runs, not DeepSeek's forward)", function()
    local function peak(...)
      return helper.estimate("deepseek-moe-16b", "--set", "framework=megatron", "--set", "precision=mixed-bf16",
        "--set", "seq_len=512", "--set", "micro_batch=2", ...).per_gpu.peak_allocated_bytes
    end
    assert.are.equal(peak("--set", "shifted_loss=false"), peak())
    assert.are.equal(peak("--set", "shifted_loss=false", "--set", "tp=2", "--set", "sequence_parallel=true"),
      peak("--set", "tp=2", "--set", "sequence_parallel=true"))
  end)
end)
