-- DoRA (use_dora) as Hugging Face PEFT 0.15-0.17 trains it: a magnitude
-- per output feature beside each adapter pair, and a forward that makes
-- B @ A and the weight's column norms whole. (The step is checked against
-- PyTorch in tests/torch/compare.py, cases "dora".)
local helper = require("tests.lua.helper")

local H, F, LAYERS = 4096, 11008, 32 -- Llama-2-7B

local function adapted(...)
  return helper.estimate("llama2-7b", "--set", "finetune=lora", "--set", "precision=bf16", ...)
end

describe("DoRA", function()
  it("trains one magnitude per output feature of every adapted weight, in fp32 like the adapters", function()
    local lora = adapted("--set", "lora_targets=all-linear")
    local dora = adapted("--set", "lora_targets=all-linear", "--set", "use_dora=true")
    -- q, k, v, o and down_proj give H outputs, gate_proj and up_proj F
    local magnitudes = LAYERS * (5 * H + 2 * F)
    assert.are.equal(lora.model.trainable_params + magnitudes, dora.model.trainable_params)
    assert.are.equal(lora.per_gpu.grads_bytes + 4 * magnitudes, dora.per_gpu.grads_bytes)
    assert.is_true(dora.recipe.use_dora)
    assert.is_false(lora.recipe.use_dora)
  end)

  it("makes B @ A, the weight in fp32 and their sum whole in each forward: the peak of a short sequence", function()
    local args = { "--set", "lora_targets=all-linear", "--set", "micro_batch=1", "--set", "seq_len=16" }
    local lora = adapted(table.unpack(args))
    args[#args + 1] = "--set"
    args[#args + 1] = "use_dora=true"
    local dora = adapted(table.unpack(args))
    -- down_proj at the sum in get_weight_norm: torch.eye(F) in fp32 (the
    -- adapters' dtype), lora_weight [F x H], the bf16 weight cast to fp32,
    -- scaling * lora_weight and the sum, all alive at once
    local transients = 4 * F * F + 4 * (4 * F * H)
    assert.are.equal("dora.weight_sum", dora.per_gpu.peak_op)
    assert.is_true(dora.per_gpu.peak_allocated_bytes - lora.per_gpu.peak_allocated_bytes >= transients)
  end)

  it("keeps the base output and the adapters' for the magnitude's gradient", function()
    local lora = adapted("--set", "seq_len=256")
    local dora = adapted("--set", "seq_len=256", "--set", "use_dora=true")
    -- per adapted q_proj and v_proj: base_result (bf16) and lora_result (fp32), [256 x H] each
    local kept = LAYERS * 2 * 256 * H * (2 + 4)
    local extra = dora.per_gpu.activations_bytes - lora.per_gpu.activations_bytes
    assert.is_true(extra >= kept, string.format("%d more than LoRA, expected at least %d", extra, kept))
    assert.is_true(extra < kept * 1.05, string.format("%d more than LoRA, expected about %d", extra, kept))
  end)

  it("agrees with evaluating every layer", function()
    helper.assert_folds_agree(helper.model("llama2-7b", 5), {
      { finetune = "lora", use_dora = true, precision = "bf16", attention = "eager" },
      { finetune = "lora", use_dora = true, precision = "amp-bf16", checkpointing = "full", lora_dropout = 0.1 },
      { finetune = "lora", use_dora = true, lora_targets = "all-linear", checkpointing = "every-2",
        framework = "deepspeed", zero = 3, dp = 4, precision = "mixed-bf16" },
    })
  end)

  -- QDoRA: peft/tuners/lora/bnb.py runs the variant on the cloned 4-bit
  -- output; DoraLinearLayer.forward takes its norms of
  -- dequantize_module_weight(base_layer).to(x.dtype)
  describe("over a quantized base", function()
    local model = helper.model("llama2-7b", 1)
    local function forward_sizes(recipe, op) return helper.forward_sizes(model, recipe, op) end
    local q = { finetune = "qlora", use_dora = true, seq_len = 64, lora_targets = "q_proj,down_proj" }

    it("dequantizes each adapted weight whole: 4-bit in the compute dtype, int8 in fp32 (two products at once)", function()
      q.precision = "amp-bf16"
      assert.are.same({ 2 * H * H, 2 * H * F }, forward_sizes(q, "dora.dequantize"))
      q.quant = "int8"
      assert.are.same({ 4 * H * H, 4 * H * H, 4 * H * F, 4 * H * F }, forward_sizes(q, "dora.dequantize"))
      q.quant = nil
    end)

    it("casts the dense weight to x's fp32, and the result back without autocast", function()
      q.precision = "bf16" -- x is cast to lora_A's fp32, and the weight with it
      assert.are.same({ 4 * H * H, 4 * H * F }, forward_sizes(q, "dora.weight"))
      assert.are.same({ 2 * 64 * H, 2 * 64 * H }, forward_sizes(q, "lora.cast_output"))
      -- under autocast x is not cast, but prepare_model_for_kbit_training
      -- keeps the norms in fp32, so q_proj's x is fp32 already
      -- (and bnb's Linear4bit returns its input's dtype, so the MLP's too)
      q.precision = "amp-bf16"
      assert.are.same({ 4 * H * H, 4 * H * F }, forward_sizes(q, "dora.weight"))
      assert.are.same({}, forward_sizes(q, "lora.cast_output"))
    end)

    it("trains the magnitudes DoRA trains over a 16-bit base", function()
      local lora = adapted("--set", "use_dora=true")
      local qdora = helper.estimate("llama2-7b", "--set", "finetune=qlora", "--set", "use_dora=true")
      assert.are.equal(lora.model.trainable_params, qdora.model.trainable_params)
      assert.is_true(qdora.recipe.use_dora)
    end)

    it("keeps the dense weight for backward once dropout makes F.linear recompute the base output", function()
      local function run(dropout)
        return helper.estimate("llama2-7b", "--set", "finetune=qlora", "--set", "use_dora=true",
          "--set", "precision=amp-bf16", "--set", "seq_len=64", "--set", "lora_dropout=" .. dropout)
      end
      -- q_proj and v_proj: autocast's bf16 copy of the dense weight, saved
      -- by F.linear(x, weight) where x needs a gradient (not in layer 0,
      -- whose input comes from the frozen embedding); around it a few
      -- [64 x H] tensors come and go (the mask and F.linear's output kept,
      -- the clone no longer), under 2 %
      local saved = (LAYERS - 1) * 2 * 2 * H * H
      local extra = run(0.1).per_gpu.activations_bytes - run(0).per_gpu.activations_bytes
      assert.is_true(extra >= saved * 0.98, string.format("%d more with dropout, expected about %d", extra, saved))
      assert.is_true(extra < saved * 1.05, string.format("%d more with dropout, expected about %d", extra, saved))
    end)

    it("agrees with evaluating every layer", function()
      helper.assert_folds_agree(helper.model("llama2-7b", 5), {
        { finetune = "qlora", use_dora = true, precision = "bf16", lora_dropout = 0.1 },
        { finetune = "qlora", use_dora = true, quant = "int8", precision = "amp-bf16", checkpointing = "full" },
      })
    end)
  end)

  local bad = {
    { { "llama2-7b", "--set", "use_dora=true" }, "use_dora: DoRA is LoRA's variant: needs finetune = lora or qlora" },
    { { "llama2-7b", "--set", "finetune=prompt", "--set", "num_virtual_tokens=8", "--set", "use_dora=true" },
      "use_dora: DoRA is LoRA's variant" },
    { { "llama2-7b", "--set", "finetune=lora", "--set", "use_dora=yes" }, "use_dora" },
  }
  for _, case in ipairs(bad) do
    local args = { table.unpack(case[1]) }
    it("rejects " .. table.concat(args, " "), helper.rejection(args, case[2]))
  end
end)
