-- precision = bf16-autocast / fp16-autocast: torch.autocast over a model
-- loaded in 16 bits, as the Trainer runs bf16=True / fp16=True over such a
-- model (accelerate wraps the forward in autocast whatever the weights'
-- dtype). The bytes are checked against PyTorch by tests/torch/compare.py
-- ("bf16-autocast": 12 configurations); these tests hold what the harness
-- cannot run (fp16 on the CPU, refusals) and how the precision relates to
-- the ones beside it.
local helper = require("tests.lua.helper")

local function per_gpu(model, ...)
  return helper.estimate(model, "--set", "seq_len=512", "--set", "micro_batch=2", ...).per_gpu
end

describe("autocast over 16-bit weights", function()
  it("keeps pure bf16's model states and adds what autocast's fp32 list keeps", function()
    local pure = per_gpu("gpt2", "--set", "precision=bf16")
    local autocast = per_gpu("gpt2", "--set", "precision=bf16-autocast")
    for _, k in ipairs({ "params_bytes", "grads_bytes", "master_bytes", "optimizer_bytes" }) do
      assert.are.equal(pure[k], autocast[k], k)
    end
    -- GPT-2's LayerNorms run in fp32 under autocast: each saves an fp32
    -- copy of its input (4 bytes an element where bf16 saves its 2-byte
    -- input) and fp32 copies of its weight and bias; 25 LayerNorms x 2 x
    -- 512 tokens x 768 (the harness has the exact bytes)
    local norms = 25 * 2 * 512 * 768
    assert.is_true(autocast.activations_bytes - pure.activations_bytes >= norms * 2,
      string.format("%d more bytes", autocast.activations_bytes - pure.activations_bytes))
    -- fp32 weights under autocast (amp-bf16) hold twice the states
    local amp = per_gpu("gpt2", "--set", "precision=amp-bf16")
    assert.are.equal(2 * autocast.params_bytes, amp.params_bytes)
  end)

  it("trains fp32 adapters over fp16 weights, and refuses what GradScaler refuses", function()
    local lora = per_gpu("llama3.2-1b", "--set", "precision=fp16-autocast", "--set", "finetune=lora")
    assert.is_true(lora.peak_allocated_bytes > 0)
    for _, args in ipairs({ { "--set", "finetune=full" }, { "--set", "finetune=freeze" },
                            { "--set", "finetune=lora", "--set", "lora_dtype=base" } }) do
      local err = helper.fails("llama3.2-1b", "--set", "precision=fp16-autocast", table.unpack(args))
      assert.truthy(err:find("Attempting to unscale FP16 gradients", 1, true), err)
    end
  end)

  it("refuses DeepseekMoE under it, whose rows turn fp32 after the first MoE layer", function()
    local err = helper.fails("deepseek-moe-16b", "--set", "precision=bf16-autocast")
    assert.truthy(err:find("fp32 rows by index under autocast", 1, true), err)
  end)

  it("is what the Trainer stacks read bf16 = true over bf16 weights as, and fp16 = true over fp16 LoRA", function()
    local r = helper.estimate("llama2-7b", "--set", "stack=hf-trainer", "--set", "fp16=true", "--set", "finetune=lora",
      "--set", "seq_len=256").recipe
    assert.are.equal("fp16-autocast", r.precision)
    r = helper.estimate("llama2-7b", "--set", "stack=axolotl", "--set", "bf16=true", "--set", "seq_len=256").recipe
    assert.are.equal("bf16-autocast", r.precision)
  end)
end)
