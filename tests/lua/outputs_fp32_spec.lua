-- accelerate's convert_outputs_to_fp32 (outputs_fp32). The bytes are checked
-- against PyTorch by tests/torch/compare.py ("outputs_fp32": accelerate's
-- convert_to_fp32 written out over the twins' outputs, 12 configurations);
-- these tests hold what accelerate's source fixes in closed form, where the
-- Trainer stacks turn it on, and what is refused.
local helper = require("tests.lua.helper")

-- GPT-2 (124M): 12 layers, h = 768, a 50,257-token vocabulary; one
-- sequence of 512 tokens keeps every tensor a multiple of the allocator's
-- 512-byte blocks
local LAYERS, H, VOCAB, TOKENS = 12, 768, 50257, 512

local function gpt2(...)
  return helper.estimate("gpt2", "--set", "precision=amp-bf16", "--set", "micro_batch=1", "--set", "seq_len=512", ...)
end

describe("accelerate's convert_outputs_to_fp32", function()
  it("copies the outputs' 16-bit logits and a cache of tuples to fp32", function()
    local base = gpt2().per_gpu.activations_bytes
    -- the loop keeps the outputs (keep_logits): the bf16 logits give way to
    -- their fp32 copy (2 bytes a logit more), and GPT-2's presents, a
    -- (key, value) tuple per layer, views of c_attn's bf16 output that
    -- attention keeps anyway, gain an fp32 copy each
    local logits = TOKENS * VOCAB * 2
    local presents = 2 * LAYERS * TOKENS * H * 4
    assert.are.equal(logits + presents, gpt2("--set", "outputs_fp32=true").per_gpu.activations_bytes - base)
    -- transformers 5 returns a DynamicCache, which convert_to_fp32 passes
    -- as it is
    local v5 = gpt2("--set", "transformers_major=5").per_gpu.activations_bytes
    assert.are.equal(logits, gpt2("--set", "transformers_major=5", "--set", "outputs_fp32=true")
      .per_gpu.activations_bytes - v5)
  end)

  it("sets the peak where the loss keeps less than the copies in backward", function()
    local function lora(loss, on)
      return helper.estimate("llama3.2-1b", "--set", "precision=bf16-autocast", "--set", "finetune=lora",
        "--set", "keep_logits=false", "--set", "micro_batch=1", "--set", "seq_len=512", "--set", "loss=" .. loss,
        "--set", "outputs_fp32=" .. on).per_gpu
    end
    -- transformers' upcast loss keeps 12 bytes a logit in its backward,
    -- above the 10 of the copy at the forward's end: the peak stays
    assert.are.equal(lora("cross-entropy", "false").peak_allocated_bytes,
      lora("cross-entropy", "true").peak_allocated_bytes)
    -- Liger's cross-entropy keeps less: the copy makes the peak, and the
    -- Trainer drops it with the outputs before backward
    local off, on = lora("liger-ce", "false"), lora("liger-ce", "true")
    assert.are.equal("accelerate.convert_to_fp32.logits", on.peak_op)
    assert.is_true(on.peak_allocated_bytes > off.peak_allocated_bytes)
    assert.are.equal(off.activations_bytes, on.activations_bytes)
  end)

  it("is on under the Trainer stacks' autocast outside DeepSpeed", function()
    local function stack(...)
      return helper.estimate("llama2-7b", "--set", "seq_len=256", "--set", "micro_batch=1", ...).recipe
    end
    assert.are.equal(true, stack("--set", "stack=hf-trainer", "--set", "bf16=true").outputs_fp32)
    assert.are.equal(true, stack("--set", "stack=trl", "--set", "finetune=lora").outputs_fp32)
    assert.are.equal(true, stack("--set", "stack=axolotl", "--set", "bf16=true", "--set", "finetune=lora").outputs_fp32)
    assert.are.equal(true, stack("--set", "stack=llama-factory", "--set", "bf16=true", "--set", "finetune=lora")
      .outputs_fp32)
    -- no autocast, or DeepSpeed's engine: no native amp
    assert.are.equal(false, stack("--set", "stack=hf-trainer").outputs_fp32)
    assert.are.equal(false, stack("--set", "stack=hf-trainer", "--set", "bf16=true", "--set", "zero=2", "--set", "dp=8")
      .outputs_fp32)
    assert.are.equal(false, stack("--set", "stack=torchtitan").outputs_fp32)
    -- FSDP2 over transformers' modules converts: the Trainer stacks run
    -- that model code by default, where fsdp2 alone means torchtitan's;
    -- the stack's default never makes a recipe the core refuses
    local fsdp2 = stack("--set", "stack=axolotl", "--set", "bf16=true", "--set", "framework=fsdp2", "--set", "dp=2")
    assert.are.equal(true, fsdp2.outputs_fp32)
    assert.are.equal("transformers", fsdp2.model_code)
    assert.are.equal(false, stack("--set", "stack=hf-trainer", "--set", "bf16=true", "--set", "framework=fsdp2",
      "--set", "dp=2", "--set", "model_code=torchtitan").outputs_fp32)
    -- the recipe's own value stands
    assert.are.equal(false, stack("--set", "stack=hf-trainer", "--set", "bf16=true", "--set", "outputs_fp32=false")
      .outputs_fp32)
  end)

  it("is refused where accelerate does not convert", function()
    for _, args in ipairs({
      { "--set", "precision=bf16" },
      { "--set", "precision=mixed-bf16", "--set", "framework=deepspeed", "--set", "zero=2", "--set", "dp=2" },
      { "--set", "precision=amp-bf16", "--set", "framework=fsdp2", "--set", "model_code=torchtitan", "--set", "dp=2" },
    }) do
      local bad = helper.fails("llama2-7b", "--set", "outputs_fp32=true", table.unpack(args))
      assert.truthy(bad:find("outputs_fp32: accelerate's convert_outputs_to_fp32", 1, true), bad)
    end
  end)
end)
