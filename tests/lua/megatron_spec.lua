-- Megatron-LM: tensor parallelism's split of the weights, the padded
-- vocabulary, fp32 main_grad buffers and the distributed optimizer.
local helper = require("tests.lua.helper")

local function megatron(...)
  return helper.estimate("llama2-7b", "--set", "framework=megatron", "--set", "seq_len=512", ...)
end

describe("Megatron-LM's tensor parallelism", function()
  it("splits attention and MLP weights and the padded vocabulary over tp ranks", function()
    local r = megatron("--set", "tp=8")
    -- Llama-2's 32000 tokens padded to a multiple of 128 x 8 = 1024: 32768
    -- (--make-vocab-size-divisible-by 128, _vocab_size_with_padding)
    local h, f, layers, vocab = 4096, 11008, 32, 32768
    local local_params = 2 * (vocab / 8) * h                            -- embedding and head slices
      + layers * (4 * h * h / 8 + 3 * h * f / 8 + 2 * h)                -- column/row splits; norms whole
      + h                                                               -- the final norm
    assert.are.equal(2 * local_params, r.per_gpu.params_bytes)          -- bf16
    assert.are.equal(4 * local_params, r.per_gpu.grads_bytes)           -- fp32 main_grad buffers
    assert.are.equal(6738415616, r.model.params)                        -- the model itself is unpadded
  end)

  it("keeps 16-bit main grads without accumulate_allreduce_grads_in_fp32", function()
    local a = megatron("--set", "tp=2")
    local b = megatron("--set", "tp=2", "--set", "accumulate_allreduce_grads_in_fp32=false")
    assert.are.equal(a.per_gpu.grads_bytes, 2 * b.per_gpu.grads_bytes)
  end)

  it("shards master weights and Adam states over dp with the distributed optimizer", function()
    local plain = megatron("--set", "tp=2", "--set", "dp=4")
    local dist = megatron("--set", "tp=2", "--set", "dp=4", "--set", "distributed_optimizer=true")
    assert.is_true(math.abs(plain.per_gpu.master_bytes / 4 - dist.per_gpu.master_bytes) < 4 * 4096)
    assert.is_true(math.abs(plain.per_gpu.optimizer_bytes / 4 - dist.per_gpu.optimizer_bytes) < 8 * 4096)
    assert.are.equal(plain.per_gpu.params_bytes, dist.per_gpu.params_bytes)
  end)

  it("cuts activations with sequence parallelism and selective recompute", function()
    local plain = megatron("--set", "tp=4", "--set", "attention=eager")
    local sp = megatron("--set", "tp=4", "--set", "attention=eager", "--set", "sequence_parallel=true")
    local sel = megatron("--set", "tp=4", "--set", "attention=eager", "--set", "sequence_parallel=true",
      "--set", "checkpointing=selective")
    assert.is_true(sp.per_gpu.activations_bytes < plain.per_gpu.activations_bytes)
    assert.is_true(sel.per_gpu.activations_bytes < sp.per_gpu.activations_bytes)
  end)

  it("agrees with evaluating every layer (tp, sp, selective)", function()
    local arch = require("vramplan.arch")
    local model = arch.build(require("vramplan.models").describe(helper.root, "llama2-7b"), { layers = 5 },
      { layers = "test" })
    for _, recipe in ipairs({
      { framework = "megatron", tp = 4, sequence_parallel = true, checkpointing = "selective", attention = "eager" },
      { framework = "megatron", tp = 2, dp = 4, distributed_optimizer = true, checkpointing = "every-2" },
      { framework = "megatron", tp = 8, attention = "flash", precision = "fp32" },
    }) do
      recipe.seq_len = 256
      helper.assert_fold_agrees(model, recipe)
    end
  end)
end)

describe("tensor-parallel layouts that do not hold together", function()
  local function fails(model, ...)
    local _, err, code = helper.run("estimate", model, ...)
    assert.are.equal(1, code, err)
    return err
  end
  it("names the key", function()
    -- tp > 1 alone implies Megatron (docs/configs.md); an explicit other framework is refused
    assert.truthy(fails("llama2-7b", "--set", "framework=torch", "--set", "tp=2")
      :find("tp: tensor parallelism needs framework", 1, true))
    assert.truthy(fails("llama2-7b", "--set", "framework=megatron", "--set", "tp=3")
      :find("--set tp=3: tp: must divide the attention heads", 1, true))
    assert.truthy(fails("llama2-7b", "--set", "framework=megatron", "--set", "sequence_parallel=true")
      :find("sequence_parallel: needs tp > 1", 1, true))
    assert.truthy(fails("gpt2", "--set", "framework=megatron", "--set", "tp=2", "--set", "sequence_parallel=true",
      "--set", "seq_len=1023"):find("sequence_parallel: tp must divide micro_batch x seq_len", 1, true))
    assert.truthy(fails("llama2-7b", "--set", "framework=megatron", "--set", "precision=amp-bf16")
      :find("precision: Megatron-LM trains with", 1, true))
  end)

  it("keeps selective recompute to Megatron-LM, whose option it is", function()
    for _, framework in ipairs({ "torch", "deepspeed", "fsdp" }) do
      for _, attention in ipairs({ "eager", "sdpa" }) do
        assert.truthy(fails("llama3.2-1b", "--set", "checkpointing=selective", "--set", "framework=" .. framework,
          "--set", "attention=" .. attention):find("checkpointing: selective recompute is Megatron-LM's", 1, true))
      end
    end
    local _, err, code = helper.run("estimate", "llama3.2-1b", "--set", "checkpointing=selective",
      "--set", "framework=megatron", "--set", "attention=eager")
    assert.are.equal(0, code, err)
  end)
end)
