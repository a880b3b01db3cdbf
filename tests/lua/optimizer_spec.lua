-- Optimizers beyond Adam, by the state their libraries allocate for each of
-- GPT-2's parameters. (Adafactor's and SM3's steps are measured against
-- PyTorch in tests/torch/compare.py; bitsandbytes' kernels need CUDA.)
local helper = require("tests.lua.helper")

-- GPT-2 small's parameters as {rows, cols} (a vector: rows 0); the head is
-- tied to wte
local function gpt2_params()
  local h, list = 768, { { 50257, 768 }, { 1024, 768 } }
  for _ = 1, 12 do
    for _, p in ipairs({ { 0, h }, { 0, h }, { h, 3 * h }, { 0, 3 * h }, { h, h }, { 0, h }, { 0, h }, { 0, h },
                         { h, 4 * h }, { 0, 4 * h }, { 4 * h, h }, { 0, h } }) do
      list[#list + 1] = p
    end
  end
  list[#list + 1] = { 0, h }
  list[#list + 1] = { 0, h }
  return list
end

local function sum_over_params(per_param)
  local total = 0
  for _, p in ipairs(gpt2_params()) do
    local numel = (p[1] > 0 and p[1] or 1) * p[2]
    total = total + per_param(numel, p[1], p[2])
  end
  return total
end

local function optimizer(name, ...)
  return helper.estimate("gpt2", "--set", "seq_len=128", "--set", "optimizer=" .. name, ...)
end

describe("optimizer states", function()
  it("counts GPT-2's parameters the way these tests list them", function()
    assert.are.equal(124439808, sum_over_params(function(numel) return numel end))
  end)

  it("adamw-8bit: uint8 states with an fp32 absmax per 256 elements, fp32 below 4096 elements", function()
    -- bitsandbytes Optimizer2State: optim_bits 8, min_8bit_size 4096, blockwise (256)
    local expected = sum_over_params(function(numel)
      if numel < 4096 then return 2 * 4 * numel end
      return 2 * (numel + 4 * math.ceil(numel / 256))
    end)
    assert.are.equal(expected, optimizer("adamw-8bit").per_gpu.optimizer_bytes)
  end)

  it("torchao's AdamW8bit / 4bit / Fp8: codes, an fp32 scale per block, a map each; like the parameter when small",
    function()
    -- torchao/optim/adam.py _new_buffer: quantized when numel >= 4096 and
    -- a whole number of blocks, else torch.zeros_like(p) (the parameter's
    -- dtype: bf16 here, where bitsandbytes keeps fp32); subclass_8bit.py,
    -- subclass_4bit.py, subclass_fp8.py: codes, scale (numel / block fp32
    -- values), qmap (256 or 16 fp32 entries; none for fp8)
    local formats = {
      { "adamw-8bit-torchao", 256, function(n) return n end, 256 * 4 },
      { "adamw-4bit-torchao", 128, function(n) return n // 2 end, 16 * 4 },
      { "adamw-fp8-torchao", 256, function(n) return n end, 0 },
    }
    for _, f in ipairs(formats) do
      local name, block, codes, qmap = f[1], f[2], f[3], f[4]
      for _, case in ipairs({ { "bf16", 2 }, { "fp32", 4 } }) do
        local expected = sum_over_params(function(numel)
          if numel < 4096 or numel % block ~= 0 then return 2 * case[2] * numel end
          return 2 * (codes(numel) + 4 * (numel // block) + qmap)
        end)
        local r = optimizer(name, "--set", "precision=" .. case[1])
        assert.are.equal(expected, r.per_gpu.optimizer_bytes, name .. " " .. case[1])
      end
    end
    -- transformers' names for them (OptimizerNames.ADAMW_TORCH_8BIT / _4BIT)
    assert.are.equal("adamw-8bit-torchao", optimizer("adamw_torch_8bit").recipe.optimizer)
    assert.are.equal("adamw-4bit-torchao", optimizer("adamw_torch_4bit").recipe.optimizer)
  end)

  it("paged optimizers keep their states in unified memory, one tensor's worth on the GPU at the step", function()
    local paged = optimizer("paged-adamw-8bit")
    local resident = optimizer("adamw-8bit")
    assert.are.equal(0, paged.per_gpu.optimizer_bytes)
    assert.are.equal(resident.per_gpu.optimizer_bytes, paged.host.cpu_bytes_per_rank)
    -- wte's states paged in for its update (50257 x 768 elements), one
    -- allocation that the caching allocator rounds up to 512 bytes
    local wte = 50257 * 768
    local bytes = 2 * (wte + 4 * math.ceil(wte / 256))
    assert.are.equal(math.ceil(bytes / 512) * 512, paged.per_gpu.peak_breakdown.optimizer)
  end)

  it("lion keeps one fp32 momentum even beside bf16 parameters", function()
    local r = optimizer("lion", "--set", "precision=bf16")
    assert.are.equal(4 * 124439808, r.per_gpu.optimizer_bytes)
  end)

  it("adafactor factors every matrix into fp32 row and column statistics", function()
    local expected = sum_over_params(function(numel, rows, cols)
      local stats = rows > 0 and (rows + cols) or numel
      return 4 * stats + 4 -- and state["RMS"], a 0-dim fp32 tensor
    end)
    assert.are.equal(expected, optimizer("adafactor").per_gpu.optimizer_bytes)
  end)

  it("sm3 keeps an accumulator per dimension in the gradient's dtype", function()
    local expected = sum_over_params(function(numel, rows, cols)
      return 2 * (rows > 0 and (rows + cols) or numel)
    end)
    assert.are.equal(expected, optimizer("sm3", "--set", "precision=bf16").per_gpu.optimizer_bytes)
  end)

  it("first_moment: adafactor's beta1 keeps an fp32 exp_avg per parameter, sm3's momentum a buffer in the gradient's dtype",
    function()
    -- transformers' Adafactor: exp_avg = torch.zeros_like(grad) of the
    -- gradient it has made fp32; torch-optimizer's SM3: momentum_buffer =
    -- update, in the gradient's dtype
    local params = sum_over_params(function(numel) return numel end)
    for _, case in ipairs({ { "adafactor", "bf16", 4 }, { "adafactor", "fp32", 4 }, { "sm3", "bf16", 2 } }) do
      local without = optimizer(case[1], "--set", "precision=" .. case[2])
      local with = optimizer(case[1], "--set", "precision=" .. case[2], "--set", "first_moment=true")
      assert.are.equal(case[3] * params, with.per_gpu.optimizer_bytes - without.per_gpu.optimizer_bytes)
      assert.is_true(with.recipe.first_moment)
    end
    local _, err, code = helper.run("estimate", "gpt2", "--set", "first_moment=true")
    assert.are.equal(1, code)
    assert.truthy(err:find("first_moment: only adafactor (beta1) and sm3 (momentum) keep a first moment on request", 1,
      true), err)
  end)

  it("rejects an optimizer it does not know, naming the choices", function()
    local _, err, code = helper.run("estimate", "gpt2", "--set", "optimizer=adamw8bit")
    assert.are.equal(1, code)
    assert.truthy(err:find("optimizer", 1, true), err)
    assert.truthy(err:find("adamw-8bit", 1, true), err)
  end)
end)

describe("gradient accumulation", function()
  it("runs later micro-batches into the gradients the first made", function()
    local one = helper.estimate("gpt2", "--set", "seq_len=1024", "--set", "optimizer=none", "--set", "precision=fp32")
    local four = helper.estimate("gpt2", "--set", "seq_len=1024", "--set", "optimizer=none", "--set", "precision=fp32",
      "--set", "grad_accum=4")
    assert.are.equal(4, four.recipe.grad_accum)
    assert.are.equal(4, four.recipe.num_microbatches)
    assert.are.equal(one.per_gpu.activations_bytes, four.per_gpu.activations_bytes)
    -- the second backward starts with every gradient already there
    assert.is_true(four.per_gpu.peak_allocated_bytes > one.per_gpu.peak_allocated_bytes)
    assert.is_true(four.per_gpu.peak_allocated_bytes <= one.per_gpu.peak_allocated_bytes + one.per_gpu.grads_bytes)
  end)

  it("is the pipeline's micro-batches: both keys must agree", function()
    local _, err, code = helper.run("estimate", "gpt2", "--set", "grad_accum=4", "--set", "num_microbatches=2")
    assert.are.equal(1, code)
    assert.truthy(err:find("grad_accum: the micro-batches are the accumulation", 1, true), err)
  end)
end)
